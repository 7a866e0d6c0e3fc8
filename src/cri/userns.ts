/**
 * A pod's `userns_options` as kubelet sends them (KEP-127): mode NODE (or none) for the host's user
 * namespace; mode POD with exactly one uid and one gid mapping, each mapping the pod's root (id 0)
 * to a range of unprivileged host ids, for one of its own. CONTAINER and TARGET are no modes a user
 * namespace has in Kubernetes. And a volume mount's mappings, with which berth binds it idmapped.
 * Each refusal names the field and why.
 */
import { InvalidArgumentError } from '../errors.js';
import type { ContainerUserNamespace } from '../model/container.js';
import type { PodUserNamespaceSpec } from '../model/sandbox.js';
import type { IdMapping, IdMappings } from '../oci/userns.js';
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
  if (mapping.container_id !== 0) {
    throw new InvalidArgumentError(
      `${field}[0].container_id`,
      `must be 0 (the pod's root), got ${mapping.container_id}`,
    );
  }
  const checked = idMapping(`${field}[0]`, mapping);
  if (checked.hostId === 0) {
    throw new InvalidArgumentError(`${field}[0].host_id`, "0 would make the pod's root the host's root");
  }
  return checked;
}

/** A range of ids that fits below the largest id on both sides. */
function idMapping(field: string, mapping: Received<'IDMapping'>): IdMapping {
  const { container_id: containerId, host_id: hostId, length } = mapping;
  if (length < 1 || length > ID_LIMIT) {
    throw new InvalidArgumentError(`${field}.length`, `${length} is not between 1 and ${ID_LIMIT}`);
  }
  for (const [side, id] of [
    ['host_id', hostId],
    ['container_id', containerId],
  ] as const) {
    if (id + length > ID_LIMIT) {
      throw new InvalidArgumentError(
        `${field}.${side}`,
        `${id} + length ${length} reaches past the largest id, ${ID_LIMIT - 1}`,
      );
    }
  }
  return { containerId, hostId, length };
}

/**
 * The most ranges a mount's mapping may have: what the kernel keeps inline in a user namespace,
 * and more than kubelet sends (one, the pod's).
 */
export const MAX_MOUNT_MAPPINGS = 5;

/**
 * A mount's `uidMappings` and `gidMappings` (the CRI keeps their camelCase names): null when
 * neither is set, for a plain bind. Both or neither, each 1 to MAX_MOUNT_MAPPINGS ranges that
 * overlap neither inside nor on the host, as the kernel requires of a user namespace's map.
 */
export function toMountIdmap(
  field: string,
  uids: readonly Received<'IDMapping'>[],
  gids: readonly Received<'IDMapping'>[],
): IdMappings | null {
  if (uids.length === 0 && gids.length === 0) return null;
  if (uids.length === 0 || gids.length === 0) {
    throw new InvalidArgumentError(
      `${field}.uidMappings`,
      'uidMappings and gidMappings must be set together',
    );
  }
  return {
    uids: mountMappings(`${field}.uidMappings`, uids),
    gids: mountMappings(`${field}.gidMappings`, gids),
  };
}

function mountMappings(field: string, mappings: readonly Received<'IDMapping'>[]): IdMapping[] {
  if (mappings.length > MAX_MOUNT_MAPPINGS) {
    throw new InvalidArgumentError(
      field,
      `at most ${MAX_MOUNT_MAPPINGS} mappings are supported, got ${mappings.length}`,
    );
  }
  const checked = mappings.map((m, i) => idMapping(`${field}[${i}]`, m));
  for (const [i, m] of checked.entries()) {
    for (const [j, other] of checked.slice(0, i).entries()) {
      const side = overlaps(m.containerId, other.containerId, m, other)
        ? 'container_id'
        : overlaps(m.hostId, other.hostId, m, other)
          ? 'host_id'
          : null;
      if (side !== null) {
        throw new InvalidArgumentError(`${field}[${i}].${side}`, `overlaps the range of ${field}[${j}]`);
      }
    }
  }
  return checked;
}

function overlaps(start: number, otherStart: number, m: IdMapping, other: IdMapping): boolean {
  return start < otherStart + other.length && otherStart < start + m.length;
}
