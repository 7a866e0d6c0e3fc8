/**
 * Typed domain errors. Domain modules throw these; src/cri/status.ts maps them to gRPC codes
 * in one place, so no domain module needs to know about gRPC.
 */
export class BerthError extends Error {
  override name = 'BerthError';
}

/** A request field is missing or malformed. `field` is the request path, e.g. `config.metadata.name`. */
export class InvalidArgumentError extends BerthError {
  override name = 'InvalidArgumentError';
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super(`${field}: ${problem}`);
  }
}

export class NotFoundError extends BerthError {
  override name = 'NotFoundError';
  constructor(
    readonly kind: string,
    readonly id: string,
  ) {
    super(`${kind} "${id}" not found`);
  }
}

export class AlreadyExistsError extends BerthError {
  override name = 'AlreadyExistsError';
}

export class FailedPreconditionError extends BerthError {
  override name = 'FailedPreconditionError';
}

export class UnimplementedError extends BerthError {
  override name = 'UnimplementedError';
}

/**
 * An operation ran out of the time the request gave it (ExecSync's timeout). kubelet reads this
 * code, and only this one, as "the probe timed out".
 */
export class DeadlineExceededError extends BerthError {
  override name = 'DeadlineExceededError';
}

/** Something berth keeps per caller is full (a subscriber's event buffer); the caller may ask again. */
export class ResourceExhaustedError extends BerthError {
  override name = 'ResourceExhaustedError';
}

/** berth cannot serve this now (it is shutting down); the caller retries. */
export class UnavailableError extends BerthError {
  override name = 'UnavailableError';
}

/** A host program failed or timed out. Carries what the program said on stderr. */
export class ExecError extends BerthError {
  override name = 'ExecError';
  constructor(
    readonly command: string,
    readonly exitCode: number | undefined,
    readonly stderr: string,
    readonly timedOut: boolean,
    /** Some programs (CNI plugins) report failures as JSON on stdout. */
    readonly stdout = '',
  ) {
    const how = timedOut ? 'timed out' : `exited with code ${exitCode ?? 'unknown'}`;
    const said = stderr.trim();
    super(`${command} ${how}${said ? `: ${said}` : ''}`);
  }
}

/** One step of a multi-step operation (e.g. RunPodSandbox) failed; names the step. */
export class StepError extends BerthError {
  override name = 'StepError';
  constructor(
    readonly step: string,
    override readonly cause: unknown,
  ) {
    super(`${step}: ${errorMessage(cause)}`);
  }
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
