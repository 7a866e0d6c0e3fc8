import { findByIdOrPrefix, type RecordKind } from '../operation/lookup.js';
import type { Store } from '../store/index.js';
import type { SandboxRow } from '../store/types.js';

const SANDBOX: RecordKind<SandboxRow> = { field: 'pod_sandbox_id', noun: 'pod sandbox', plural: 'sandboxes' };

/** A sandbox by exact id or unique prefix; a missing one is NotFound unless `allowMissing`. */
export function findSandbox(store: Store, idOrPrefix: string, allowMissing: true): SandboxRow | undefined;
export function findSandbox(store: Store, idOrPrefix: string, allowMissing: false): SandboxRow;
export function findSandbox(store: Store, idOrPrefix: string, allowMissing: boolean): SandboxRow | undefined {
  const sandboxes = {
    get: (id: string) => store.getSandbox(id),
    findByIdPrefix: (prefix: string) => store.findSandboxesByIdPrefix(prefix),
  };
  return findByIdOrPrefix(sandboxes, idOrPrefix, SANDBOX, allowMissing);
}
