/**
 * The uid, gid and supplementary groups a container's process runs as, from the CRI security
 * context and the image's User, looked up in the image's own /etc/passwd and /etc/group. Those
 * files belong to the image, so every path inside the rootfs is resolved without ever leaving it:
 * a symlinked /etc/passwd pointing at "/etc/shadow" means the image's file, not the host's.
 */
import { FailedPreconditionError, InvalidArgumentError } from '../errors.js';
import { readInRoot } from './rootfs-files.js';

/**
 * Whether the groups the image's /etc/group gives the user join those asked for (Merge, what
 * runtimes always did), or only those asked for apply (Strict, KEP-3619).
 */
export type SupplementalGroupsPolicy = 'Merge' | 'Strict';

/** What a CRI security context asks of the process's user and groups. */
export interface UserRequest {
  runAsUser: number | null;
  /** '' when not set. Exclusive with runAsUser. */
  runAsUsername: string;
  /** Only valid together with runAsUser or runAsUsername (CRI rejects it alone). */
  runAsGroup: number | null;
  supplementalGroups: number[];
  supplementalGroupsPolicy: SupplementalGroupsPolicy;
}

export interface ResolvedUser {
  uid: number;
  gid: number;
  /**
   * Supplementary groups, the primary gid first, as containerd sets them (and so what `id` shows
   * there): a process that drops its primary group can still use it.
   */
  additionalGids: number[];
}

export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

export interface GroupEntry {
  name: string;
  gid: number;
  members: string[];
}

const USERNAME_FIELD = 'config.linux.security_context.run_as_username';

export async function resolveUser(
  rootfs: string,
  security: UserRequest,
  imageUser: string | undefined,
): Promise<ResolvedUser> {
  const [passwd, groups] = await Promise.all([
    readInRoot(rootfs, '/etc/passwd').then(parsePasswd),
    readInRoot(rootfs, '/etc/group').then(parseGroup),
  ]);
  const who = pickUser(security, imageUser, passwd);
  // The image's group applies only with the image's user: a CRI override replaces both.
  const gid = security.runAsGroup ?? imageGroup(who.groupPart, groups) ?? who.entry?.gid ?? 0;
  const merge = security.supplementalGroupsPolicy === 'Merge';
  const fromGroupFile = who.entry && merge ? memberships(who.entry.name, groups) : [];
  const additionalGids = [...new Set([gid, ...fromGroupFile, ...security.supplementalGroups])];
  return { uid: who.uid, gid, additionalGids };
}

interface PickedUser {
  uid: number;
  entry: PasswdEntry | undefined;
  /** The group half of the image's User ("app:staff"), when that is what applies. */
  groupPart: string | undefined;
}

function pickUser(security: UserRequest, imageUser: string | undefined, passwd: PasswdEntry[]): PickedUser {
  if (security.runAsUser !== null) {
    return { uid: security.runAsUser, entry: byUid(passwd, security.runAsUser), groupPart: undefined };
  }
  if (security.runAsUsername !== '') {
    const entry = passwd.find((e) => e.name === security.runAsUsername);
    if (!entry) {
      throw new InvalidArgumentError(
        USERNAME_FIELD,
        `user "${security.runAsUsername}" not found in the image's /etc/passwd`,
      );
    }
    return { uid: entry.uid, entry, groupPart: undefined };
  }
  const [userPart = '', groupPart] = splitUser(imageUser ?? '');
  if (userPart === '') return { uid: 0, entry: byUid(passwd, 0), groupPart };
  if (isNumeric(userPart)) {
    const uid = Number(userPart);
    return { uid, entry: byUid(passwd, uid), groupPart };
  }
  const entry = passwd.find((e) => e.name === userPart);
  if (!entry) throw new FailedPreconditionError(`user "${userPart}" not found in the image's /etc/passwd`);
  return { uid: entry.uid, entry, groupPart };
}

function imageGroup(groupPart: string | undefined, groups: GroupEntry[]): number | undefined {
  if (groupPart === undefined || groupPart === '') return undefined;
  if (isNumeric(groupPart)) return Number(groupPart);
  const group = groups.find((g) => g.name === groupPart);
  if (!group) throw new FailedPreconditionError(`group "${groupPart}" not found in the image's /etc/group`);
  return group.gid;
}

/** "user", "user:group"; a User of only ":group" is the default user with that group. */
function splitUser(user: string): [string, string | undefined] {
  const colon = user.indexOf(':');
  return colon < 0 ? [user, undefined] : [user.slice(0, colon), user.slice(colon + 1)];
}

function byUid(passwd: PasswdEntry[], uid: number): PasswdEntry | undefined {
  return passwd.find((e) => e.uid === uid);
}

function memberships(name: string, groups: GroupEntry[]): number[] {
  return groups.filter((g) => g.members.includes(name)).map((g) => g.gid);
}

function isNumeric(s: string): boolean {
  return /^\d+$/.test(s) && Number(s) <= 0xfffffffe;
}

/** name:password:uid:gid:gecos:home:shell; malformed lines are skipped, as libc does. */
export function parsePasswd(text: string): PasswdEntry[] {
  const entries: PasswdEntry[] = [];
  for (const line of lines(text)) {
    const f = line.split(':');
    const [name = '', , uid = '', gid = ''] = f;
    if (f.length < 4 || name === '' || !isNumeric(uid) || !isNumeric(gid)) continue;
    entries.push({ name, uid: Number(uid), gid: Number(gid), home: f[5] ?? '', shell: f[6] ?? '' });
  }
  return entries;
}

/** name:password:gid:member,member */
export function parseGroup(text: string): GroupEntry[] {
  const entries: GroupEntry[] = [];
  for (const line of lines(text)) {
    const f = line.split(':');
    const [name = '', , gid = '', members = ''] = f;
    if (f.length < 3 || name === '' || !isNumeric(gid)) continue;
    const list = members
      .split(',')
      .map((m) => m.trim())
      .filter((m) => m !== '');
    entries.push({ name, gid: Number(gid), members: list });
  }
  return entries;
}

function lines(text: string): string[] {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
}
