/**
 * The OCI spec of a container restored from a checkpoint into another pod. criu brings back the
 * processes as they were, so what they were started with (the process, devices, masked paths,
 * seccomp) stays the checkpointed spec's; where they now live is the new pod's and the new
 * request's, as berth builds it for a fresh container: namespaces to join, cgroup, root, hostname,
 * mounts (the pod's hostname, hosts and resolv.conf files, and the mounts the new request asks
 * for, replacing the old request's), resources, id mappings and annotations.
 */
import type { Spec } from './spec.js';

export function restoredSpec(checkpointed: Spec, fresh: Spec): Spec {
  const { uidMappings: _oldUids, gidMappings: _oldGids, ...old } = checkpointed.linux ?? {};
  const now = fresh.linux ?? {};
  const spec: Spec = {
    ...checkpointed,
    linux: {
      ...old,
      namespaces: now.namespaces ?? [],
      cgroupsPath: now.cgroupsPath ?? '',
      resources: now.resources ?? {},
      ...(now.uidMappings && { uidMappings: now.uidMappings }),
      ...(now.gidMappings && { gidMappings: now.gidMappings }),
    },
  };
  if (fresh.root) spec.root = fresh.root;
  if (fresh.hostname !== undefined) spec.hostname = fresh.hostname;
  if (fresh.mounts) spec.mounts = fresh.mounts;
  if (fresh.annotations) spec.annotations = fresh.annotations;
  return spec;
}
