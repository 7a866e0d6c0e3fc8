/** Assertions on CRI calls that must fail, as the test client sees them (grpc-js ServiceErrors). */
import assert from 'node:assert/strict';
import { status, type ServiceError } from '@grpc/grpc-js';

/** grpc-js rejects with an Error carrying the status' code and details; anything else failed before the wire. */
function isServiceError(err: unknown): err is ServiceError {
  return err instanceof Error && typeof (err as Partial<ServiceError>).code === 'number' && 'details' in err;
}

function describeCode(code: number | undefined): string {
  return code === undefined ? 'no gRPC code' : `${status[code] ?? 'an unknown code'} (${code})`;
}

/** Awaits a call that must fail with a gRPC error, whatever its code; returns the error. */
export async function rejectsGrpc(call: Promise<unknown>): Promise<ServiceError> {
  try {
    await call;
  } catch (err) {
    assert.ok(isServiceError(err), `expected a gRPC error, got ${String(err)}`);
    return err;
  }
  assert.fail('expected the call to fail, but it succeeded');
}

/**
 * Awaits a call that must fail with `code`; with `detail`, its details must match it (a string:
 * contain it). Returns the error for further checks.
 */
export async function rejectsWith(
  call: Promise<unknown>,
  code: status,
  detail?: RegExp | string,
): Promise<ServiceError> {
  try {
    await call;
  } catch (err) {
    const got = (err as Partial<ServiceError>).code;
    assert.equal(got, code, `expected ${describeCode(code)}, got ${describeCode(got)}: ${String(err)}`);
    const details = (err as ServiceError).details;
    if (typeof detail === 'string') {
      assert.ok(details.includes(detail), `details "${details}" should name ${detail}`);
    } else if (detail) {
      assert.match(details, detail);
    }
    return err as ServiceError;
  }
  assert.fail(`expected gRPC ${describeCode(code)}, but the call succeeded`);
}
