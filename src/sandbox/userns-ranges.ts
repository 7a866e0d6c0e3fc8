/**
 * The host ids each user-namespaced pod has to itself. kubelet hands every such pod a range of
 * its own; two pods that share host ids are one user to the host, so either could write the other's
 * rootfs and read its files through the dirs only the pod's root may pass. A pod keeps its range
 * until it is removed, stopped too: its files on disk are still owned by those ids.
 */
import { FailedPreconditionError } from '../errors.js';
import type { Sandbox, SandboxSpec } from '../model/sandbox.js';
import type { IdMapping } from '../oci/userns.js';

/** Throws naming the first pod of `others` whose uids or gids share a host id with `spec`'s. */
export function checkOwnHostIds(spec: SandboxSpec, others: readonly Sandbox[]): void {
  const mine = spec.userNamespace;
  if (mine === null) return;
  for (const other of others) {
    const theirs = other.spec.userNamespace;
    if (theirs === null) continue;
    for (const kind of ['uids', 'gids'] as const) {
      const shared = sharedRange(mine[kind], theirs[kind]);
      if (shared === null) continue;
      const { namespace, name } = other.spec.metadata;
      throw new FailedPreconditionError(
        `config.linux.security_context.namespace_options.userns_options.${kind}: host ids ${shared} are those of pod sandbox ${other.id} (${namespace}/${name}) too: each pod's user namespace needs host ids of its own`,
      );
    }
  }
}

/** "first..last" of the host ids both have, null when they have none in common. */
function sharedRange(a: readonly IdMapping[], b: readonly IdMapping[]): string | null {
  for (const x of a) {
    for (const y of b) {
      const first = Math.max(x.hostId, y.hostId);
      const last = Math.min(x.hostId + x.length, y.hostId + y.length) - 1;
      if (first <= last) return `${first}..${last}`;
    }
  }
  return null;
}
