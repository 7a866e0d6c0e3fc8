/**
 * A container of a pod of its own user namespace: it joins the pod's (src/oci/container.ts), and
 * its rootfs is made over the image's layers idmapped with it, so that the pod's root owns what
 * image root owned. A container cannot have another user namespace than its pod's.
 */
import { FailedPreconditionError, InvalidArgumentError } from '../errors.js';
import type { RootfsIdmap } from '../imagestore/rootfs.js';
import type { ContainerSecurity, ContainerUserNamespace } from '../model/container.js';
import type { PodUserNamespaceSpec, Sandbox } from '../model/sandbox.js';
import type { ResolvedUser } from '../oci/user.js';
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

const SECURITY = 'config.linux.security_context';

/**
 * The ids a container of a user-namespaced pod runs as must be ids of that namespace: runc would
 * fail it with "invalid argument" from setgroups or setuid. One the request names is refused
 * naming its field; one the image gives (its USER, its /etc/group), naming the image's.
 */
export function checkIdsMapped(security: ContainerSecurity, user: ResolvedUser, sandbox: Sandbox): void {
  const pod = sandbox.spec.userNamespace;
  if (pod === null) return;
  const outside = (id: number, mappings: readonly IdMapping[]): boolean =>
    !mappings.some((m) => id >= m.containerId && id - m.containerId < m.length);
  const range = (mappings: readonly IdMapping[]): string =>
    mappings.map((m) => `${m.containerId}-${m.containerId + m.length - 1}`).join(', ');
  const requested: [string, number | null, readonly IdMapping[]][] = [
    [`${SECURITY}.run_as_user.value`, security.runAsUser, pod.uids],
    [`${SECURITY}.run_as_group.value`, security.runAsGroup, pod.gids],
    ...security.supplementalGroups.map((gid, i): [string, number, readonly IdMapping[]] => [
      `${SECURITY}.supplemental_groups[${i}]`,
      gid,
      pod.gids,
    ]),
  ];
  for (const [field, id, mappings] of requested) {
    if (id !== null && outside(id, mappings)) {
      throw new InvalidArgumentError(
        field,
        `${id} is not an id of pod sandbox ${sandbox.id}'s user namespace (${range(mappings)})`,
      );
    }
  }
  const resolved: [string, number, readonly IdMapping[]][] = [
    ['uid', user.uid, pod.uids],
    ...[user.gid, ...user.additionalGids].map((gid): [string, number, readonly IdMapping[]] => [
      'gid',
      gid,
      pod.gids,
    ]),
  ];
  for (const [kind, id, mappings] of resolved) {
    if (outside(id, mappings)) {
      throw new FailedPreconditionError(
        `the image's user or groups give ${kind} ${id}, which is not an id of pod sandbox ${sandbox.id}'s user namespace (${range(mappings)})`,
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
