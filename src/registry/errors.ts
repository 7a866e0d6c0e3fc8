/**
 * Errors of the registry client. The CRI layer maps them to gRPC codes (src/cri/status.ts); each
 * class says which code it stands for.
 */
import { BerthError, DeadlineExceededError, FailedPreconditionError, NotFoundError } from '../errors.js';

/**
 * A registry did not serve what was asked, for a reason other than those below: a 5xx, an
 * unexpected status, a malformed manifest, a digest that does not match, a timeout.
 * CRI: UNKNOWN.
 */
export class RegistryError extends BerthError {
  override name = 'RegistryError';
  constructor(
    message: string,
    /** Base URL of the endpoint that failed, when one did. */
    readonly endpoint?: string,
    /** HTTP status, when the failure was an HTTP answer. */
    readonly status?: number,
  ) {
    super(message);
  }
}

/**
 * The registry refused us, after we tried the credentials we had (or had none to try).
 * `reason` picks the CRI code: 'unauthenticated' (HTTP 401: credentials missing or wrong) →
 * UNAUTHENTICATED; 'denied' (HTTP 403: valid credentials without access) → PERMISSION_DENIED.
 * Final: no other endpoint is tried after it.
 */
export class RegistryAuthError extends RegistryError {
  override name = 'RegistryAuthError';
  constructor(
    message: string,
    readonly reason: 'unauthenticated' | 'denied',
    endpoint?: string,
    status?: number,
  ) {
    super(message, endpoint, status);
  }
}

/**
 * The origin registry says the manifest (tag or digest) or blob does not exist. A NotFoundError,
 * so the CRI layer already maps it to NOT_FOUND. `kind` is 'manifest' or 'blob'.
 */
export class RegistryNotFoundError extends NotFoundError {
  override name = 'RegistryNotFoundError';
  constructor(
    kind: 'manifest' | 'blob',
    /** The full reference (or `name@digest` for a blob). */
    readonly reference: string,
    readonly endpoint: string,
  ) {
    super(kind, reference);
    this.message = `${kind} unknown: ${reference} not found at ${endpoint}`;
  }
}

/**
 * An endpoint could not be reached at all: refused, unreachable, reset, a TLS handshake failure.
 * CRI: UNAVAILABLE, worth trying again later.
 */
export class RegistryConnectError extends RegistryError {
  override name = 'RegistryConnectError';
}

/** One failed try of one endpoint, as reported by RegistryUnavailableError. */
export interface EndpointFailure {
  endpoint: string;
  error: Error;
}

/**
 * Every endpoint (mirrors, then origin) failed without a final answer: connection errors, 5xx,
 * timeouts, a mirror's 404. Lists each endpoint's failure; `note` says why the list is what it
 * is (the origin left out by `mirrors_only`). CRI: UNAVAILABLE.
 */
export class RegistryUnavailableError extends RegistryError {
  override name = 'RegistryUnavailableError';
  constructor(
    what: string,
    readonly failures: readonly EndpointFailure[],
    note = '',
  ) {
    super(`${what}: every endpoint failed${note}: ${describeFailures(failures)}`);
  }
}

/**
 * With `mirrors_only`, every mirror said it does not have it, and the origin (which might) is off
 * limits. A NotFoundError, so CRI: NOT_FOUND, which kubelet reports as ErrImagePull.
 */
export class MirrorsNotFoundError extends NotFoundError {
  override name = 'MirrorsNotFoundError';
  constructor(
    what: string,
    readonly failures: readonly EndpointFailure[],
    note: string,
  ) {
    super('image', what);
    this.message = `${what}: not found on any mirror${note}: ${describeFailures(failures)}`;
  }
}

/**
 * A blob download received nothing for the pull's progress timeout and was cancelled, as
 * containerd's image_pull_progress_timeout does. CRI: DEADLINE_EXCEEDED; kubelet reports any
 * pull error as ErrImagePull and retries with back-off.
 */
export class PullStalledError extends DeadlineExceededError {
  override name = 'PullStalledError';
}

function describeFailures(failures: readonly EndpointFailure[]): string {
  return failures.map((f) => `${f.endpoint}: ${f.error.message}`).join('; ');
}

/**
 * An image index has no manifest for the wanted platform. The message lists those it has.
 * A NotFoundError, so CRI: NOT_FOUND (as containerd's "no match for platform in manifest").
 */
export class PlatformNotFoundError extends NotFoundError {
  override name = 'PlatformNotFoundError';
  constructor(
    readonly wanted: string,
    readonly available: readonly string[],
  ) {
    super('platform', wanted);
    this.message =
      `no manifest for platform ${wanted} in the image index; it has ` +
      (available.length > 0 ? available.join(', ') : 'no platform-specific manifests');
  }
}

/**
 * A manifest larger than berth reads (containerd's bound): an image whose manifest is that big is
 * broken or hostile, not a registry having a bad moment. CRI: FAILED_PRECONDITION, as every
 * image berth refuses. Another endpoint (a mirror's origin) may still serve a good one.
 */
export class ManifestTooLargeError extends FailedPreconditionError {
  override name = 'ManifestTooLargeError';
  constructor(
    message: string,
    readonly endpoint: string,
  ) {
    super(message);
  }
}
