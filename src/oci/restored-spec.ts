/**
 * The OCI spec of a container restored from a checkpoint into another pod. The checkpointed spec
 * says what the process was (its command, environment, user, terminal, limits), which criu brings
 * back as it was. Everything else is what berth builds for the new request in the new pod, as for
 * a fresh container: namespaces to join, cgroup and resources, root, hostname, mounts (the pod's
 * hostname, hosts and resolv.conf files, and the mounts the new request asks for, replacing the old
 * request's), id mappings, annotations. So is everything that grants the container anything: hooks
 * (run on the host), devices, sysctls, seccomp, masked and read-only paths, capabilities, AppArmor
 * and SELinux labels, no_new_privs. A checkpoint archive comes from outside the node, and its
 * spec.dump must not widen what the new request's security context allows.
 */
import type { Spec } from './spec.js';

export function restoredSpec(checkpointed: Spec, fresh: Spec): Spec {
  const { process: was } = checkpointed;
  const { process: now } = fresh;
  if (!was || !now) return fresh;
  const { capabilities, noNewPrivileges, apparmorProfile, oomScoreAdj, selinuxLabel } = now;
  const granted = { capabilities, noNewPrivileges, apparmorProfile, oomScoreAdj, selinuxLabel };
  const process = { ...was };
  for (const key of Object.keys(granted) as (keyof typeof granted)[]) delete process[key];
  return {
    ...fresh,
    process: { ...process, ...definedOnly(granted) },
  };
}

/** Only the fields the fresh process sets: an absent one stays absent, not `undefined`. */
function definedOnly<T extends object>(fields: T): Partial<T> {
  return Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined)) as Partial<T>;
}
