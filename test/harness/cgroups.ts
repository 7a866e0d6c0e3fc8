/** Cgroups tests made for their containers, removed again. */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  cgroupManager,
  cpuWeightOf,
  type CgroupManager,
  type WeightConversion,
} from '../../src/cgroups/index.js';
import { parseFeatures } from '../../src/runtime/runc.js';
import { weightConversionOf } from '../../src/runtime/weight-conversion.js';
import type { CgroupDriver } from '../../src/cgroups/driver.js';
import { probeCgroupHost } from '../../src/cgroups/probe.js';

const CGROUP_ROOT = '/sys/fs/cgroup';

/** The host mounts the unified hierarchy alone (a v2 node), not v1's per controller. */
export const CGROUP_V2 = existsSync(join(CGROUP_ROOT, 'cgroup.controllers'));

/** A cgroupfs-driver cgroup (`parent/name`, as in a spec's cgroupsPath) as its limits stand now. */
export interface LiveLimits {
  memoryLimitBytes: number;
  /** v1: cpu.shares as written; v2: cpu.weight, which runc derives from the shares. */
  cpu: { shares: number } | { weight: number };
}

export async function liveLimits(path: string): Promise<LiveLimits> {
  const read = async (...parts: string[]): Promise<string> =>
    (await readFile(join(CGROUP_ROOT, ...parts), 'utf8')).trim();
  if (CGROUP_V2) {
    return {
      memoryLimitBytes: Number(await read(path, 'memory.max')),
      cpu: { weight: Number(await read(path, 'cpu.weight')) },
    };
  }
  return {
    memoryLimitBytes: Number(await read('memory', path, 'memory.limit_in_bytes')),
    cpu: { shares: Number(await read('cpu', path, 'cpu.shares')) },
  };
}

/**
 * What the runc test daemons run (the one in PATH) writes to cpu.weight on v2 for CRI's cpu shares:
 * the formula of its version, as berth picks it for a pod's cgroup.
 */
export function runcWeightOfShares(shares: number): number {
  return shares === 0 ? 0 : cpuWeightOf(shares, runcConversion());
}

let conversion: WeightConversion | undefined;
function runcConversion(): WeightConversion {
  conversion ??= weightConversionOf(runcVersionInPath()).conversion;
  return conversion;
}

/** The version `runc features` of the runc in PATH names, read as berthd reads it. */
export function runcVersionInPath(): string | undefined {
  return parseFeatures(execFileSync('runc', ['features'], { encoding: 'utf8', timeout: 60_000 })).runcVersion;
}

/** The cpu limit `liveLimits` reads back for `shares`, on this host's cgroup version. */
export function expectedCpu(shares: number): LiveLimits['cpu'] {
  return CGROUP_V2 ? { weight: runcWeightOfShares(shares) } : { shares };
}

/** Sets a cgroup's memory limit as kubelet does for a pod's cgroup (cgroupfs driver). */
export async function setMemoryLimit(path: string, bytes: number): Promise<void> {
  const file = CGROUP_V2
    ? join(CGROUP_ROOT, path, 'memory.max')
    : join(CGROUP_ROOT, 'memory', path, 'memory.limit_in_bytes');
  await writeFile(file, String(bytes));
}

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
  const hierarchies = CGROUP_V2 ? [''] : await readdir(CGROUP_ROOT).catch(() => [] as string[]);
  return hierarchies.filter((hierarchy) => existsSync(join(CGROUP_ROOT, hierarchy, path)));
}

/** The manager berthd would build over this host's cgroups, for tests that read or name them. */
export async function hostCgroups(driver: CgroupDriver = 'cgroupfs'): Promise<CgroupManager> {
  return cgroupManager(driver, await probeCgroupHost());
}
