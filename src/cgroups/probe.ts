/**
 * What the host's cgroup filesystems are, read once at start-up: every path and reader depends on
 * it, and hierarchies are mounted at boot and do not change under a running node.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readMountInfo, type MountInfoEntry } from '../mounts/mountinfo.js';

/**
 * v1: one hierarchy per controller set. v2: the unified hierarchy at the root. hybrid: v1's
 * hierarchies with an unified one beside them (at <root>/unified), which systemd uses to track
 * processes; its controllers are all in v1, so berth treats it as v1 for paths and readers.
 */
export type CgroupVersion = 'v1' | 'v2' | 'hybrid';

export interface CgroupHost {
  /** Where the cgroup filesystems are mounted: /sys/fs/cgroup, or a fake tree in tests. */
  root: string;
  version: CgroupVersion;
  /** The controllers berth can use: v2's root cgroup.controllers, or v1's mounted hierarchies. */
  controllers: string[];
  /** Every cgroup filesystem mounted below the root. */
  mountPoints: string[];
}

export const CGROUP_ROOT = '/sys/fs/cgroup';

/** v1 hierarchies that are not controllers: systemd's named one, and hybrid's unified one. */
const NOT_CONTROLLERS = new Set(['systemd', 'unified']);

export async function probeCgroupHost(
  opts: { root?: string; mounts?: readonly MountInfoEntry[] } = {},
): Promise<CgroupHost> {
  const root = opts.root ?? CGROUP_ROOT;
  const [found, mounts] = await Promise.all([versionAt(root), opts.mounts ?? readMountInfo()]);
  const mountPoints = mounts
    .filter((m) => (m.fsType === 'cgroup' || m.fsType === 'cgroup2') && isBelow(m.mountPoint, root))
    .map((m) => m.mountPoint);
  return { root, ...found, mountPoints };
}

async function versionAt(root: string): Promise<Pick<CgroupHost, 'version' | 'controllers'>> {
  // Every cgroup of the unified hierarchy, its root included, has cgroup.controllers; a missing
  // file is the answer (not v2 here), not a failure.
  const unified = await readFile(join(root, 'cgroup.controllers'), 'utf8').catch(() => null);
  if (unified !== null) return { version: 'v2', controllers: unified.split(/\s+/).filter((c) => c !== '') };
  const beside = await readFile(join(root, 'unified', 'cgroup.controllers'), 'utf8').catch(() => null);
  return { version: beside === null ? 'v1' : 'hybrid', controllers: await v1Controllers(root) };
}

/**
 * Mounted v1 hierarchies are named after their controllers ("cpu,cpuacct", often with a symlink
 * per controller beside it), as hierarchy.ts's mountOf relies on too.
 */
async function v1Controllers(root: string): Promise<string[]> {
  const names = await readdir(root);
  const controllers = names.flatMap((name) => name.split(',')).filter((c) => !NOT_CONTROLLERS.has(c));
  return [...new Set(controllers)].sort();
}

function isBelow(path: string, root: string): boolean {
  return path === root || path.startsWith(`${root}/`);
}
