/**
 * What a container that joins a pod's pinned user namespace needs in its spec. runc 1.1 wants the
 * mappings even when it joins by path (it refuses a user namespace without them, "no uid mappings
 * found"), and uses them for the ids of what it sets up; it does not compare them with the
 * namespace's own (tried with 1.1.5), so they must be the very mappings the namespace was made
 * with.
 */
import type { Linux, LinuxIDMapping } from './spec.js';

/** One line of a uid_map or gid_map: `length` ids from `containerId` inside are `hostId` on. */
export interface IdMapping {
  containerId: number;
  hostId: number;
  length: number;
}

/** A user namespace's mappings, or an idmapped mount's: one list per kind of id. */
export interface IdMappings {
  uids: readonly IdMapping[];
  gids: readonly IdMapping[];
}

export interface PodUserNamespace {
  /** The pinned namespace (see netns/userns.ts). */
  path: string;
  uids: readonly IdMapping[];
  gids: readonly IdMapping[];
}

/** The `linux` keys that put a container into the pod's user namespace. */
export function joinUserNamespace(
  userns: PodUserNamespace,
): Required<Pick<Linux, 'uidMappings' | 'gidMappings'>> & { namespace: { type: 'user'; path: string } } {
  return {
    namespace: { type: 'user', path: userns.path },
    uidMappings: userns.uids.map(ociMapping),
    gidMappings: userns.gids.map(ociMapping),
  };
}

/** The mappings alone, for a spec's `linux`. */
export function mappingsOf(
  joined: ReturnType<typeof joinUserNamespace>,
): Pick<Linux, 'uidMappings' | 'gidMappings'> {
  return { uidMappings: joined.uidMappings, gidMappings: joined.gidMappings };
}

function ociMapping(m: IdMapping): LinuxIDMapping {
  return { containerID: m.containerId, hostID: m.hostId, size: m.length };
}

/** The host id a namespace's id 0 is; a pod's mappings always map it (cri/userns.ts). */
export function hostIdOfRoot(mappings: readonly IdMapping[]): number {
  const root = mappings.find((m) => m.containerId === 0);
  if (root === undefined) throw new Error('the mappings leave id 0 unmapped');
  return root.hostId;
}
