import { FailedPreconditionError } from '../errors.js';
import type { Sandbox } from '../model/sandbox.js';
import { findByIdOrPrefix, type RecordKind } from '../operation/lookup.js';
import type { Store } from '../store/index.js';

const SANDBOX: RecordKind<Sandbox> = { field: 'pod_sandbox_id', noun: 'pod sandbox', plural: 'sandboxes' };

/** A sandbox by exact id or unique prefix; a missing one is NotFound unless `allowMissing`. */
export function findSandbox(
  store: Pick<Store, 'sandboxes'>,
  idOrPrefix: string,
  allowMissing: true,
): Sandbox | undefined;
export function findSandbox(
  store: Pick<Store, 'sandboxes'>,
  idOrPrefix: string,
  allowMissing: false,
): Sandbox;
export function findSandbox(
  store: Pick<Store, 'sandboxes'>,
  idOrPrefix: string,
  allowMissing: boolean,
): Sandbox | undefined {
  return findByIdOrPrefix(store.sandboxes, idOrPrefix, SANDBOX, allowMissing);
}

/** As findSandbox, for the calls that work in a running pod (CreateContainer, PortForward). */
export function findReadySandbox(store: Pick<Store, 'sandboxes'>, idOrPrefix: string): Sandbox {
  return requireReady(findSandbox(store, idOrPrefix, false));
}

/**
 * The one rule for a pod new work may go into: READY, and, if it runs an infra, with the infra's
 * pid recorded (its containers join the infra's namespaces through it; infra.ts checks that the
 * process there is still that infra). A pod berth found dead says what it found.
 */
export function requireReady(sandbox: Sandbox): Sandbox {
  if (sandbox.state !== 'READY' || (sandbox.infra && sandbox.pid <= 0)) {
    const why = sandbox.reason ? `: ${sandbox.reason}` : '';
    throw new FailedPreconditionError(`pod sandbox ${sandbox.id} is not ready${why}`);
  }
  return sandbox;
}
