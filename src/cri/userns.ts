/**
 * A pod's `userns_options` as kubelet sends them (KEP-127): mode NODE (or none) for the host's user
 * namespace; mode POD with exactly one uid and one gid mapping, each mapping the pod's root (id 0)
 * to a range of unprivileged host ids, for one of its own. CONTAINER and TARGET are no modes a user
 * namespace has in Kubernetes. Each refusal names the field and why.
 */
import { InvalidArgumentError } from '../errors.js';
import type { ContainerUserNamespace } from '../model/container.js';
import type { PodUserNamespaceSpec } from '../model/sandbox.js';
import type { IdMapping } from '../oci/userns.js';
import type { Received } from './messages.js';
import { namespaceMode } from './validate.js';

/** The largest id is (uid_t)-1, which means "no id" to the kernel: no mapping may reach it. */
const ID_LIMIT = 0xffff_ffff;

/** The pod's user namespace; null for the host's. `base` names the namespace_options field. */
export function toPodUserNamespace(
  base: string,
  options: Received<'UserNamespace'> | null | undefined,
): PodUserNamespaceSpec | null {
  if (!options) return null;
  const field = `${base}.userns_options`;
  const mode = namespaceMode(`${field}.mode`, options.mode);
  if (mode === 'NODE') {
    if (options.uids.length > 0 || options.gids.length > 0) {
      throw new InvalidArgumentError(
        `${field}.uids`,
        'mode NODE is the host user namespace: it takes no mappings',
      );
    }
    return null;
  }
  if (mode !== 'POD') {
    throw new InvalidArgumentError(`${field}.mode`, `${mode} is not a user namespace mode: use POD or NODE`);
  }
  return {
    uids: [onlyMapping(`${field}.uids`, options.uids)],
    gids: [onlyMapping(`${field}.gids`, options.gids)],
  };
}

/**
 * What a container's `userns_options` say, read as a pod's are: kubelet (and critest) copy the
 * pod's options into each container's config. Whether they match the pod is the domain's check.
 */
export function toContainerUserNamespace(
  base: string,
  options: Received<'UserNamespace'> | null | undefined,
): ContainerUserNamespace {
  return options ? { asked: toPodUserNamespace(base, options) } : 'unset';
}

/**
 * One mapping with the pod's root in it: kubelet sends exactly one, and a pod whose root maps to
 * nothing could not set up its own filesystem. Host id 0 is refused: the pod's root would be the
 * host's.
 */
function onlyMapping(field: string, mappings: readonly Received<'IDMapping'>[]): IdMapping {
  const [mapping] = mappings;
  if (mappings.length !== 1 || mapping === undefined) {
    throw new InvalidArgumentError(field, `exactly one mapping is supported, got ${mappings.length}`);
  }
  const { container_id: containerId, host_id: hostId, length } = mapping;
  if (containerId !== 0) {
    throw new InvalidArgumentError(
      `${field}[0].container_id`,
      `must be 0 (the pod's root), got ${containerId}`,
    );
  }
  if (length < 1 || length > ID_LIMIT) {
    throw new InvalidArgumentError(`${field}[0].length`, `${length} is not between 1 and ${ID_LIMIT}`);
  }
  if (hostId === 0) {
    throw new InvalidArgumentError(`${field}[0].host_id`, "0 would make the pod's root the host's root");
  }
  if (hostId + length > ID_LIMIT) {
    throw new InvalidArgumentError(
      `${field}[0].host_id`,
      `${hostId} + length ${length} reaches past the largest id, ${ID_LIMIT - 1}`,
    );
  }
  return { containerId, hostId, length };
}
