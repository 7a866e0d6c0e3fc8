import { BerthError, ExecError } from '../errors.js';

/**
 * A layer could not be unpacked: corrupt or hostile tar, failed decompression, or a filesystem
 * operation that failed. `entry` names the tar entry at fault when there is one, so a refused
 * layer can be traced to the file that caused it.
 */
export class UnpackError extends BerthError {
  override name = 'UnpackError';
  constructor(
    /** What is wrong, without the entry's name. */
    readonly problem: string,
    readonly entry?: string,
    options?: { cause?: unknown },
  ) {
    super(entry === undefined ? problem : `layer entry ${JSON.stringify(entry)}: ${problem}`, options);
  }
}

/**
 * The layer holds an entry berth will not unpack, whatever the host: a path or link that leads out
 * of the layer, a malformed whiteout, a name longer than Linux takes, a corrupt tar header. The
 * image is at fault, not the node: pulling it again gets the same refusal.
 */
export class RefusedEntryError extends UnpackError {
  override name = 'RefusedEntryError';
}

/**
 * Wraps anything that is not already an UnpackError, keeping the original as `cause`. A name the
 * file system finds too long (ENAMETOOLONG, or mknod's "File name too long") is the entry's fault.
 */
export function asUnpackError(err: unknown, context: string, entry?: string): UnpackError {
  if (err instanceof UnpackError) return err;
  const message = err instanceof Error ? err.message : String(err);
  const Kind = nameTooLong(err) ? RefusedEntryError : UnpackError;
  return new Kind(`${context}: ${message}`, entry, { cause: err });
}

function nameTooLong(err: unknown): boolean {
  if ((err as NodeJS.ErrnoException | null)?.code === 'ENAMETOOLONG') return true;
  return err instanceof ExecError && err.stderr.includes('File name too long');
}
