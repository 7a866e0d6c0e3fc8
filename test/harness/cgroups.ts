/** Cgroups tests made for their containers, removed again. */
import { existsSync } from 'node:fs';
import { readdir, rmdir } from 'node:fs/promises';
import { join } from 'node:path';
import { cgroupManager, type CgroupManager } from '../../src/cgroups/index.js';
import type { CgroupDriver } from '../../src/cgroups/driver.js';
import { probeCgroupHost } from '../../src/cgroups/probe.js';

const CGROUP_ROOT = '/sys/fs/cgroup';

/**
 * Removes the cgroup `name` at the top of every hierarchy (v1 has one per controller, v2 one in
 * all), children first. runc removes a container's own cgroup but not the parents a test put it
 * under; rmdir takes only cgroups no process is in, so a live container's are left alone.
 */
export async function removeCgroupTree(name: string): Promise<void> {
  for (const hierarchy of await readdir(CGROUP_ROOT).catch(() => [] as string[])) {
    const top = join(CGROUP_ROOT, hierarchy, name);
    if (existsSync(top)) await removeDirTree(top);
  }
}

/** The names of the cgroups at the top of any hierarchy. */
export async function cgroupNames(): Promise<string[]> {
  const names = new Set<string>();
  for (const hierarchy of await readdir(CGROUP_ROOT).catch(() => [] as string[])) {
    const entries = await readdir(join(CGROUP_ROOT, hierarchy), { withFileTypes: true }).catch(() => []);
    for (const e of entries) if (e.isDirectory()) names.add(e.name);
  }
  return [...names];
}

async function removeDirTree(dir: string): Promise<void> {
  for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    if (e.isDirectory()) await removeDirTree(join(dir, e.name));
  }
  await rmdir(dir).catch(() => undefined);
}

/**
 * The hierarchies in which a cgroup at `path` (a cgroupfs cgroupsPath, as berth gives runc) still
 * exists: a removed container must leave none.
 */
export async function hierarchiesHolding(path: string): Promise<string[]> {
  const hierarchies = await readdir(CGROUP_ROOT).catch(() => [] as string[]);
  return hierarchies.filter((hierarchy) => existsSync(join(CGROUP_ROOT, hierarchy, path)));
}

/** The manager berthd would build over this host's cgroups, for tests that read or name them. */
export async function hostCgroups(driver: CgroupDriver = 'cgroupfs'): Promise<CgroupManager> {
  return cgroupManager(driver, await probeCgroupHost());
}
