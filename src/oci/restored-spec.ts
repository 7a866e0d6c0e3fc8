/**
 * The OCI spec of a container restored from a checkpoint into another pod. The checkpointed spec
 * says what the process was (its command, environment, terminal), which criu brings back as it
 * was. Everything else is what berth builds for the new request in the new pod, as for a fresh
 * container: namespaces to join, cgroup and resources, root, hostname, mounts (the pod's hostname,
 * hosts and resolv.conf files, and the mounts the new request asks for, replacing the old
 * request's), id mappings, annotations. So is everything that grants the container anything: hooks
 * (run on the host), devices, sysctls, seccomp, masked and read-only paths, capabilities, AppArmor
 * and SELinux labels, no_new_privs, and the process' user, groups, umask and rlimits. A checkpoint
 * archive comes from outside the node, and its spec.dump must not widen what the new request's
 * security context allows.
 *
 * The user can not simply be replaced: criu restores each process with the credentials its
 * images hold, whatever the spec says. So a restore whose spec.dump user differs from the one the
 * request resolves to is refused (checkRestoredUser), and only a matching one is restored. What
 * is compared is spec.dump's word for the credentials: criu's own images are not read, and the
 * restored processes themselves are held to the spec's user once they run (restored-credentials.ts).
 */
import { InvalidArgumentError } from '../errors.js';
import type { Spec } from './spec.js';

export function restoredSpec(checkpointed: Spec, fresh: Spec): Spec {
  const { process: was } = checkpointed;
  const { process: now } = fresh;
  if (!was || !now) return fresh;
  const { capabilities, noNewPrivileges, apparmorProfile, oomScoreAdj, selinuxLabel, user, rlimits } = now;
  const granted = {
    capabilities,
    noNewPrivileges,
    apparmorProfile,
    oomScoreAdj,
    selinuxLabel,
    user,
    rlimits,
  };
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

/** The identity the new request gives the process; a field left out is not known (yet) and not compared. */
export interface WantedUser {
  uid?: number;
  gid?: number;
  /** Supplementary groups; compared as a set, with the primary gid counted on both sides. */
  additionalGids?: readonly number[];
}

/** The request field each part of the identity comes from, and how the request came to it. */
export interface WantedUserFields {
  uid: string;
  gid: string;
  groups: string;
  /** Appended to the message: "the image's user", say, when the request named no user. */
  how?: string;
}

/**
 * Throws InvalidArgumentError naming the request field, and both values, where spec.dump's user
 * is not the identity the request asks for. A spec.dump without a user ran as uid 0 and gid 0 with
 * no supplementary groups (runc's defaults).
 */
export function checkRestoredUser(
  checkpointed: Spec,
  wanted: WantedUser,
  fields: WantedUserFields,
  archive: string,
): void {
  const was = checkpointed.process?.user;
  const uid = was?.uid ?? 0;
  const gid = was?.gid ?? 0;
  const refuse = (field: string, what: string, archived: string, asked: string): InvalidArgumentError =>
    new InvalidArgumentError(
      field,
      `checkpoint ${archive} restores a process of ${what} ${archived} (spec.dump), the request asks for ${what} ${asked}` +
        `${fields.how ? ` (${fields.how})` : ''}: criu restores a process with the credentials it was checkpointed with`,
    );
  if (wanted.uid !== undefined && wanted.uid !== uid)
    throw refuse(fields.uid, 'uid', String(uid), String(wanted.uid));
  if (wanted.gid !== undefined && wanted.gid !== gid)
    throw refuse(fields.gid, 'gid', String(gid), String(wanted.gid));
  if (wanted.additionalGids !== undefined) {
    const archived = groupSet(gid, was?.additionalGids ?? []);
    const asked = groupSet(wanted.gid ?? gid, wanted.additionalGids);
    if (archived.join() !== asked.join()) {
      throw refuse(fields.groups, 'groups', `[${archived.join(',')}]`, `[${asked.join(',')}]`);
    }
  }
}

/** A process's groups as compared: its supplementary ones and its primary gid, each once, sorted. */
export function groupSet(gid: number, groups: readonly number[]): number[] {
  return [...new Set([gid, ...groups])].sort((a, b) => a - b);
}
