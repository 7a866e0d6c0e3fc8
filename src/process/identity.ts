/**
 * The user and groups a live process has, as the process itself sees them: kubelet reports a
 * container's in the pod's status (KEP-3619), and what the process really has is the answer even
 * when the program changed them after the start (as su does, or a server dropping its groups).
 */
import { readFile } from 'node:fs/promises';

export interface ProcessIdentity {
  uid: number;
  gid: number;
  /** Its supplementary groups, as the kernel keeps them (sorted). */
  groups: number[];
}

/** One line of a uid_map or gid_map, read back: `length` ids from `inside` are `outside` here. */
interface IdRange {
  inside: number;
  outside: number;
  length: number;
}

/**
 * The real uid and gid and the groups of process `pid`, in its own user namespace; null when it
 * is gone or unreadable.
 */
export async function processIdentity(pid: number): Promise<ProcessIdentity | null> {
  if (pid <= 0) return null;
  try {
    const [status = '', uidMap = '', gidMap = ''] = await Promise.all(
      ['status', 'uid_map', 'gid_map'].map((file) => readFile(`/proc/${pid}/${file}`, 'utf8')),
    );
    return identityFrom(status, uidMap, gidMap);
  } catch {
    return null;
  }
}

/**
 * From the process's /proc status and id maps, as read here: /proc shows ids as the reader's user
 * namespace sees them, and the maps say which of the process's own ids those are.
 */
export function identityFrom(status: string, uidMap: string, gidMap: string): ProcessIdentity | null {
  const fields = statusFields(status);
  const uid = firstId(fields.get('Uid'));
  const gid = firstId(fields.get('Gid'));
  if (uid === null || gid === null) return null;
  const uids = parseIdMap(uidMap);
  const gids = parseIdMap(gidMap);
  const groups = ids(fields.get('Groups') ?? '').map((g) => inside(g, gids));
  return { uid: inside(uid, uids), gid: inside(gid, gids), groups };
}

/** Every id of a process: real, effective, saved and filesystem uids and gids, and its groups. */
export interface ProcessCredentials {
  uids: number[];
  gids: number[];
  groups: number[];
}

/**
 * All four uids and gids of the `Uid:` and `Gid:` lines and the `Groups:`, each back in the
 * process's own namespace (as identityFrom); null when a line is missing or short.
 */
export function credentialsFrom(status: string, uidMap: string, gidMap: string): ProcessCredentials | null {
  const fields = statusFields(status);
  const uids = ids(fields.get('Uid') ?? '');
  const gids = ids(fields.get('Gid') ?? '');
  if (uids.length !== 4 || gids.length !== 4 || !fields.has('Groups')) return null;
  const uidRanges = parseIdMap(uidMap);
  const gidRanges = parseIdMap(gidMap);
  return {
    uids: uids.map((u) => inside(u, uidRanges)),
    gids: gids.map((g) => inside(g, gidRanges)),
    groups: ids(fields.get('Groups') ?? '').map((g) => inside(g, gidRanges)),
  };
}

function statusFields(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split('\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}

/** "Uid:" holds the real, effective, saved and filesystem ids: the real one is the process's user. */
function firstId(value: string | undefined): number | null {
  return ids(value ?? '')[0] ?? null;
}

function ids(value: string): number[] {
  return value
    .trim()
    .split(/\s+/)
    .filter((word) => /^\d+$/.test(word))
    .map(Number);
}

function parseIdMap(text: string): IdRange[] {
  return text
    .split('\n')
    .map(ids)
    .filter((line) => line.length === 3)
    .map(([inside = 0, outside = 0, length = 0]) => ({ inside, outside, length }));
}

/** An id as seen from this namespace, back to the process's own; one no range maps stays as it is. */
function inside(id: number, ranges: readonly IdRange[]): number {
  const range = ranges.find((r) => id >= r.outside && id < r.outside + r.length);
  return range ? range.inside + (id - range.outside) : id;
}
