import { InvalidArgumentError, NotFoundError } from '../errors.js';
import type { Store } from '../store/index.js';
import type { SandboxRow } from '../store/types.js';

/**
 * A sandbox by exact id or unique prefix (crictl shows and accepts truncated ids). An ambiguous
 * prefix is the caller's mistake; a missing one is NotFound unless `allowMissing`.
 */
export function findSandbox(store: Store, idOrPrefix: string, allowMissing: true): SandboxRow | undefined;
export function findSandbox(store: Store, idOrPrefix: string, allowMissing: false): SandboxRow;
export function findSandbox(store: Store, idOrPrefix: string, allowMissing: boolean): SandboxRow | undefined {
  const exact = store.getSandbox(idOrPrefix);
  if (exact) return exact;
  const matches = store.findSandboxesByIdPrefix(idOrPrefix);
  if (matches.length > 1) {
    throw new InvalidArgumentError('pod_sandbox_id', `"${idOrPrefix}" matches ${matches.length} sandboxes`);
  }
  const only = matches[0];
  if (only) return only;
  if (allowMissing) return undefined;
  throw new NotFoundError('pod sandbox', idOrPrefix);
}

/** CRI label selectors: every key present with exactly that value. */
export function matchesLabels(
  labels: Record<string, string>,
  selector: Record<string, string> | undefined,
): boolean {
  if (!selector) return true;
  return Object.entries(selector).every(([key, value]) => labels[key] === value);
}
