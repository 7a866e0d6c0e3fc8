/** The kernel's mount table (/proc/self/mountinfo): parsing it, and finding a path's mount in it. */
import { readFile, realpath } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** One line of /proc/self/mountinfo, reduced to what berth needs. */
export interface MountInfoEntry {
  mountId: number;
  parentId: number;
  mountPoint: string;
  /** The mount's own options (`ro,nosuid,nodev,relatime`), not its superblock's. */
  mountOptions: string;
  /** Optional fields such as `shared:1` or `master:2`; empty means private. */
  optionalFields: string[];
  fsType: string;
}

const SELF_MOUNT_INFO = '/proc/self/mountinfo';

/** The kernel escapes space, tab, newline and backslash in paths as three octal digits (`\040`). */
export function unescapeMountPath(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_m, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

export function parseMountInfo(text: string): MountInfoEntry[] {
  const entries: MountInfoEntry[] = [];
  for (const line of text.split('\n')) {
    const fields = line.split(' ');
    const sep = fields.indexOf('-', 6);
    if (fields.length < 10 || sep < 0) continue;
    entries.push({
      mountId: Number(fields[0]),
      parentId: Number(fields[1]),
      mountPoint: unescapeMountPath(fields[4] ?? ''),
      mountOptions: fields[5] ?? '',
      optionalFields: fields.slice(6, sep),
      fsType: fields[sep + 1] ?? '',
    });
  }
  return entries;
}

/** `path` lets a test hand in a table of its own. */
export async function readMountInfo(path = SELF_MOUNT_INFO): Promise<MountInfoEntry[]> {
  return parseMountInfo(await readFile(path, 'utf8'));
}

/**
 * mountinfo lists canonical paths, so a caller's path through a symlink (/var/run → /run) must be
 * resolved first. Only the parent is resolved: the last component may be missing, or be a mount
 * point whose own target we must not follow.
 */
export async function canonicalPath(path: string): Promise<string | null> {
  try {
    return join(await realpath(dirname(path)), basename(path));
  } catch {
    return null;
  }
}

/** The topmost mount on `mountPoint` (later lines stack over earlier ones), if any. */
export function topMount(entries: readonly MountInfoEntry[], mountPoint: string): MountInfoEntry | undefined {
  let top: MountInfoEntry | undefined;
  for (const e of entries) if (e.mountPoint === mountPoint) top = e;
  return top;
}

/** The mount `path` (a real path) lives on: the longest mount point prefix, topmost when stacked. */
export function mountContaining(table: readonly MountInfoEntry[], path: string): MountInfoEntry | undefined {
  let best: MountInfoEntry | undefined;
  for (const e of table) {
    const mp = e.mountPoint;
    const contains = mp === '/' || path === mp || path.startsWith(`${mp}/`);
    // Later lines stack over earlier ones on the same mount point, so >= keeps the topmost.
    if (contains && (!best || mp.length >= best.mountPoint.length)) best = e;
  }
  return best;
}

/** A mount's propagation from its optional fields: shared:N, master:N (a slave), or neither. */
export function propagationOf(entry: MountInfoEntry): 'shared' | 'slave' | 'private' {
  if (entry.optionalFields.some((f) => f.startsWith('shared:'))) return 'shared';
  return entry.optionalFields.some((f) => f.startsWith('master:')) ? 'slave' : 'private';
}
