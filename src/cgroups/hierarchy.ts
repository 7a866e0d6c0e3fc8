/**
 * Where a process sits in the cgroup hierarchies, and moving processes between cgroups by path.
 * Works on cgroup v1 (one hierarchy per controller set, plus named ones such as name=systemd), on
 * v2, and on hybrid hosts that mount both; it writes cgroupfs directly, with no systemd involved.
 */
import { mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { readMountInfo, type MountInfoEntry } from '../mounts/mountinfo.js';
import { killQuietly } from '../process/index.js';

export interface CgroupMembership {
  /** Where the hierarchy is mounted, e.g. /sys/fs/cgroup/memory or /sys/fs/cgroup/unified. */
  mountPoint: string;
  /** The process's cgroup, relative to the hierarchy's root ("/" for the root). */
  path: string;
}

/** One line of /proc/<pid>/cgroup: "id:controllers:path"; v2 has id 0 and no controllers. */
interface CgroupLine {
  controllers: string;
  path: string;
}

export function parseProcCgroup(text: string): CgroupLine[] {
  const lines: CgroupLine[] = [];
  for (const line of text.split('\n')) {
    const first = line.indexOf(':');
    const second = line.indexOf(':', first + 1);
    if (first < 0 || second < 0) continue;
    lines.push({ controllers: line.slice(first + 1, second), path: line.slice(second + 1) });
  }
  return lines;
}

/**
 * The mount of the hierarchy a /proc/<pid>/cgroup line names. v1 mounts are named after their
 * controllers ("cpu,cpuacct", "systemd" for name=systemd), the way systemd and every distribution
 * mount them; mountinfo's entries carry no controller list to match on.
 */
export function mountOf(line: CgroupLine, mounts: readonly MountInfoEntry[]): string | null {
  if (line.controllers === '') {
    return mounts.find((m) => m.fsType === 'cgroup2')?.mountPoint ?? null;
  }
  const name = line.controllers.replace(/^name=/, '');
  return mounts.find((m) => m.fsType === 'cgroup' && basename(m.mountPoint) === name)?.mountPoint ?? null;
}

/** Every mounted hierarchy `pid` is in, with its cgroup there; hierarchies not mounted are left out. */
export async function membershipsOf(
  pid: number | 'self',
  /** The mount table, when the caller asks about many processes: read once, not once each. */
  mountTable?: readonly MountInfoEntry[],
): Promise<CgroupMembership[]> {
  const [text, mounts] = await Promise.all([
    readFile(`/proc/${pid}/cgroup`, 'utf8'),
    mountTable ?? readMountInfo(),
  ]);
  const memberships: CgroupMembership[] = [];
  for (const line of parseProcCgroup(text)) {
    const mountPoint = mountOf(line, mounts);
    if (mountPoint !== null) memberships.push({ mountPoint, path: line.path });
  }
  return memberships;
}

/**
 * Makes the cgroup `name` (relative to the root) in the hierarchy mounted at `mountPoint`. A new
 * v1 cpuset cgroup has no cpus or memory nodes, and no process may join it until it has: it gets
 * its parent's.
 */
export async function ensureCgroup(mountPoint: string, name: string): Promise<string> {
  const dir = join(mountPoint, name);
  // As runc makes a container's: only root may create cgroups below berth's.
  await mkdir(dir, { recursive: true, mode: 0o755 });
  if (basename(mountPoint).split(',').includes('cpuset')) {
    for (const file of ['cpuset.cpus', 'cpuset.mems']) {
      const own = await readFile(join(dir, file), 'utf8');
      if (own.trim() === '')
        await writeFile(join(dir, file), await readFile(join(dirname(dir), file), 'utf8'));
    }
  }
  return dir;
}

/** Moves the whole process `pid` (every thread) into the cgroup at `dir`. */
export async function moveProcess(pid: number, dir: string): Promise<void> {
  await writeFile(join(dir, 'cgroup.procs'), `${pid}\n`);
}

/** The pids in the cgroup at `dir`. */
export async function processesIn(dir: string): Promise<number[]> {
  const text = await readFile(join(dir, 'cgroup.procs'), 'utf8');
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map(Number);
}

/**
 * Removes the cgroup `rel` (a path below each hierarchy's root) from every mounted hierarchy,
 * children first, killing whatever still runs in it. For a container's own cgroup only: what a
 * runc killed before it recorded its container leaves behind (its init, waiting in the cgroup),
 * which `runc delete` cannot find. A cgroup already gone is fine; one whose processes have not
 * gone by `timeoutMs` (stuck in the kernel) rejects, so that the caller keeps a record to retry.
 */
export async function removeCgroupEverywhere(
  rel: string,
  timeoutMs: number,
  /** Where the hierarchies are mounted, as probed at start-up (CgroupHost.mountPoints). */
  mountPoints: readonly string[],
): Promise<void> {
  const parts = rel.split('/').filter((p) => p !== '');
  if (parts.length === 0 || parts.includes('..')) {
    throw new Error(`refusing to remove cgroup "${rel}": not a cgroup below the root`);
  }
  const deadline = Date.now() + timeoutMs;
  const dirs = [...new Set(mountPoints.map((mountPoint) => join(mountPoint, ...parts)))];
  await Promise.all(dirs.map((dir) => removeCgroupDir(dir, deadline)));
}

async function removeCgroupDir(dir: string, deadline: number): Promise<void> {
  const entries = await readdir(dir, { withFileTypes: true }).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return null;
    throw err;
  });
  if (entries === null) return;
  for (const entry of entries) {
    if (entry.isDirectory()) await removeCgroupDir(join(dir, entry.name), deadline);
  }
  for (;;) {
    try {
      await rmdir(dir);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      if (code !== 'EBUSY' || Date.now() > deadline) throw err;
    }
    for (const pid of await processesIn(dir).catch(() => [] as number[])) killQuietly(pid);
    // A killed process leaves its cgroups as it exits, a moment after the signal.
    await sleep(20);
  }
}
