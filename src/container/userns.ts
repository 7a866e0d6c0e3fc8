/**
 * A container of a pod of its own user namespace: it joins the pod's (src/oci/container.ts), and
 * its rootfs is made over the image's layers idmapped with it, so that the pod's root owns what
 * image root owned. A container cannot have another user namespace than its pod's.
 */
import { InvalidArgumentError } from '../errors.js';
import type { RootfsIdmap } from '../imagestore/rootfs.js';
import type { ContainerUserNamespace } from '../model/container.js';
import type { PodUserNamespaceSpec, Sandbox } from '../model/sandbox.js';
import { hostIdOfRoot, type IdMapping } from '../oci/userns.js';
import { namespacePins } from '../sandbox/namespaces.js';

const FIELD = 'config.linux.security_context.namespace_options.userns_options';

/**
 * kubelet sends each container its pod's options: they must say what the pod has. Options left
 * out mean the pod's, whichever it is.
 */
export function checkUserNamespace(userns: ContainerUserNamespace, sandbox: Sandbox): void {
  if (userns === 'unset') return;
  const pod = sandbox.spec.userNamespace;
  const asked = userns.asked;
  if (pod === null && asked !== null) {
    throw new InvalidArgumentError(
      `${FIELD}.mode`,
      `POD asks for a user namespace of its own, and pod sandbox ${sandbox.id} runs in the host's: a container has its pod's`,
    );
  }
  if (pod !== null && asked === null) {
    throw new InvalidArgumentError(
      `${FIELD}.mode`,
      `NODE asks for the host's user namespace, and pod sandbox ${sandbox.id} has one of its own: a container has its pod's`,
    );
  }
  if (pod === null || asked === null) return;
  for (const kind of ['uids', 'gids'] as const) {
    if (!sameMappings(asked[kind], pod[kind])) {
      throw new InvalidArgumentError(
        `${FIELD}.${kind}`,
        `${mappingText(asked[kind])} are not the mappings of pod sandbox ${sandbox.id} (${mappingText(pod[kind])})`,
      );
    }
  }
}

/** How the rootfs of a container of `sandbox` is idmapped; null in the host's user namespace. */
export function rootfsIdmap(sandbox: Sandbox): RootfsIdmap | null {
  const mappings: PodUserNamespaceSpec | null = sandbox.spec.userNamespace;
  const { user } = namespacePins(sandbox);
  if (mappings === null || user === null) return null;
  return { userns: user, rootUid: hostIdOfRoot(mappings.uids), rootGid: hostIdOfRoot(mappings.gids) };
}

function sameMappings(a: readonly IdMapping[], b: readonly IdMapping[]): boolean {
  return (
    a.length === b.length &&
    a.every(
      (m, i) => m.containerId === b[i]?.containerId && m.hostId === b[i]?.hostId && m.length === b[i]?.length,
    )
  );
}

function mappingText(mappings: readonly IdMapping[]): string {
  return mappings.map((m) => `${m.containerId}:${m.hostId}:${m.length}`).join(',');
}
