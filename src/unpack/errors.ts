import { BerthError } from '../errors.js';

/**
 * A layer could not be unpacked: corrupt or hostile tar, failed decompression, or a filesystem
 * operation that failed. `entry` names the tar entry at fault when there is one, so a refused
 * layer can be traced to the file that caused it.
 */
export class UnpackError extends BerthError {
  override name = 'UnpackError';
  constructor(
    problem: string,
    readonly entry?: string,
    options?: { cause?: unknown },
  ) {
    super(entry === undefined ? problem : `layer entry ${JSON.stringify(entry)}: ${problem}`, options);
  }
}

/** Wraps anything that is not already an UnpackError, keeping the original as `cause`. */
export function asUnpackError(err: unknown, context: string, entry?: string): UnpackError {
  if (err instanceof UnpackError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new UnpackError(`${context}: ${message}`, entry, { cause: err });
}
