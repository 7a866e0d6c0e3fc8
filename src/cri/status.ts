import { Metadata, status, type ServiceError } from '@grpc/grpc-js';
import {
  AlreadyExistsError,
  BerthError,
  DeadlineExceededError,
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
  ResourceExhaustedError,
  StepError,
  UnavailableError,
  UnimplementedError,
} from '../errors.js';
import { MonitorError } from '../runtime/index.js';
import { RegistryAuthError, RegistryConnectError, RegistryUnavailableError } from '../registry/errors.js';

/** The one place where domain errors become gRPC status codes. */
export function grpcCode(err: unknown): status {
  // A full disk, or no file descriptor left, is the same answer wherever it struck: the database, a
  // layer, runc, a plugin, a file berthd opens.
  if (exhausted(err)) return status.RESOURCE_EXHAUSTED;
  if (err instanceof StepError) return err.cause instanceof BerthError ? stepCode(err.cause) : status.UNKNOWN;
  if (err instanceof InvalidArgumentError) return status.INVALID_ARGUMENT;
  if (err instanceof RegistryAuthError) {
    return err.reason === 'denied' ? status.PERMISSION_DENIED : status.UNAUTHENTICATED;
  }
  if (err instanceof NotFoundError) return status.NOT_FOUND;
  if (err instanceof AlreadyExistsError) return status.ALREADY_EXISTS;
  if (err instanceof FailedPreconditionError) return status.FAILED_PRECONDITION;
  if (err instanceof UnimplementedError) return status.UNIMPLEMENTED;
  if (err instanceof DeadlineExceededError) return status.DEADLINE_EXCEEDED;
  if (err instanceof ResourceExhaustedError) return status.RESOURCE_EXHAUSTED;
  if (err instanceof UnavailableError) return status.UNAVAILABLE;
  // runc could not create the container from this config with this image: no such program,
  // a file where the config wants a directory... The request does not fit, the runtime is fine.
  if (err instanceof MonitorError && !err.timedOut && IMAGE_MISMATCH.test(err.reason)) {
    return status.FAILED_PRECONDITION;
  }
  // A host program (a CNI plugin, runc, conmon) that ran out of its time: their errors say so.
  if (err instanceof BerthError && 'timedOut' in err && err.timedOut === true)
    return status.DEADLINE_EXCEEDED;
  // No registry endpoint answered at all (refused, unreachable, 5xx): worth retrying later.
  if (err instanceof RegistryUnavailableError || err instanceof RegistryConnectError)
    return status.UNAVAILABLE;
  // Host programs (runc, CNI plugins) failing: the runtime could not do it, for reasons it reports.
  if (err instanceof BerthError) return status.UNKNOWN;
  return status.INTERNAL;
}

const IMAGE_MISMATCH =
  /executable file not found|no such file or directory|not a directory|permission denied/;

const EXHAUSTED_CODES = new Set(['ENOSPC', 'EDQUOT', 'SQLITE_FULL', 'EMFILE', 'ENFILE']);
/** How host programs and SQLite word it when the error itself carries no code. */
const EXHAUSTED_TEXT =
  /no space left on device|database or disk is full|disk quota exceeded|too many open files/i;

function exhausted(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && EXHAUSTED_CODES.has(code)) return true;
    if (EXHAUSTED_TEXT.test(e.message)) return true;
    e = e.cause;
  }
  return false;
}

/** A step that failed on a precondition keeps that code; anything else inside a step is UNKNOWN. */
function stepCode(cause: BerthError): status {
  const code = grpcCode(cause);
  return code === status.INTERNAL ? status.UNKNOWN : code;
}

/**
 * The most of a message sent back. The status travels in HTTP/2 trailers, and a message echoing a
 * 100 KB request field was never delivered: the call hung and stalled its connection.
 */
const MAX_MESSAGE_CHARS = 4096;

export function toServiceError(err: unknown): ServiceError {
  const full = err instanceof Error ? err.message : String(err);
  const message =
    full.length > MAX_MESSAGE_CHARS
      ? `${full.slice(0, MAX_MESSAGE_CHARS)}… (${full.length - MAX_MESSAGE_CHARS} more characters)`
      : full;
  const error = new Error(message) as ServiceError;
  error.code = grpcCode(err);
  error.details = message;
  error.metadata = new Metadata();
  return error;
}
