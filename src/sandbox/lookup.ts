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
