/**
 * CPU, memory and task figures of a container's or a pod's cgroup, read from its files (v1 or
 * v2), computed the way kubelet's cAdvisor and containerd's CRI stats do: working set = usage -
 * inactive file pages, floored at 0, since inactive page cache can be reclaimed without pressure.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { BerthError } from '../errors.js';
import { readCgroupPressure, type CgroupPressure } from './pressure.js';
import type { CgroupHost } from './probe.js';

/** All counters are int64 on the CRI wire, hence bigint. */
export interface CgroupStats {
  /** Cumulative CPU time of every process in the cgroup, in nanoseconds. */
  cpuUsageNs: bigint;
  /** Memory charged to the cgroup, page cache included. */
  memoryUsageBytes: bigint;
  workingSetBytes: bigint;
  /** Anonymous memory (v1 total_rss, v2 anon). */
  rssBytes: bigint;
  pageFaults: bigint;
  majorPageFaults: bigint;
  /** v2's pressure files; null on v1 and hybrid, which keep no PSI per cgroup. */
  pressure: CgroupPressure | null;
  /**
   * v2's memory.swap.* files; null on v1 and hybrid, and where the kernel does not account swap
   * to cgroups (then the files are missing). Without a swap device the usage is 0.
   */
  swap: CgroupSwap | null;
}

export interface CgroupSwap {
  usageBytes: bigint;
  /** Null when memory.swap.max is "max". */
  limitBytes: bigint | null;
}

/** What a reader must know of the host: where the hierarchies are, and which version they are. */
export type CgroupLayout = Pick<CgroupHost, 'root' | 'version'>;

/**
 * The directory of cgroup `rel` (a path below the hierarchies' roots) in `controller`'s hierarchy:
 * v1 (hybrid too) mounts one hierarchy per controller set, v2 one for all.
 */
export function controllerDir(layout: CgroupLayout, controller: string, rel: string): string {
  return layout.version === 'v2' ? join(layout.root, rel) : join(layout.root, controller, rel);
}

/**
 * The counters of cgroup `rel`, or null when the cgroup is gone (the container was deleted, or is
 * being deleted while we read). A v2 cgroup without the memory or cpu controller enabled also
 * reads as null, since its files are missing too.
 */
export async function readCgroupStatsAt(layout: CgroupLayout, rel: string): Promise<CgroupStats | null> {
  return unlessGone(() => (layout.version === 'v2' ? readV2(layout, rel) : readV1(layout, rel)));
}

/**
 * Figures beyond CgroupStats, for pod stats (process count, room under the limit) and metrics (cpu
 * split): separate files, read only where they are reported.
 */
export interface CgroupDetail {
  cpuUserNs: bigint;
  cpuSystemNs: bigint;
  /** Null when the cgroup has no memory limit. */
  memoryLimitBytes: bigint | null;
  /** Tasks (threads included) in the cgroup and its descendants, as pids.current counts them. */
  processCount: bigint;
}

/** v1 cpuacct.stat counts in USER_HZ ticks, which is 100 on every Linux architecture berth runs on. */
const NS_PER_USER_HZ_TICK = 10_000_000n;
/** v1 reports "no limit" as the largest page-aligned int64; anything above 2^62 is treated so. */
const UNLIMITED_V1 = 1n << 62n;

/** The cgroup's CgroupDetail, or null when it is gone. */
export async function readCgroupDetailAt(layout: CgroupLayout, rel: string): Promise<CgroupDetail | null> {
  return unlessGone(() => (layout.version === 'v2' ? readDetailV2(layout, rel) : readDetailV1(layout, rel)));
}

async function readDetailV1(layout: CgroupLayout, rel: string): Promise<CgroupDetail> {
  const [cpuStat, limit, pids] = await Promise.all([
    readFile(join(controllerDir(layout, 'cpuacct', rel), 'cpuacct.stat'), 'utf8'),
    readFile(join(controllerDir(layout, 'memory', rel), 'memory.limit_in_bytes'), 'utf8'),
    readFile(join(controllerDir(layout, 'pids', rel), 'pids.current'), 'utf8'),
  ]);
  const cpu = parseFlatKeyed(cpuStat);
  const limitBytes = parseCounter(limit, 'memory.limit_in_bytes');
  return {
    cpuUserNs: (cpu.get('user') ?? 0n) * NS_PER_USER_HZ_TICK,
    cpuSystemNs: (cpu.get('system') ?? 0n) * NS_PER_USER_HZ_TICK,
    memoryLimitBytes: limitBytes >= UNLIMITED_V1 ? null : limitBytes,
    processCount: parseCounter(pids, 'pids.current'),
  };
}

async function readDetailV2(layout: CgroupLayout, rel: string): Promise<CgroupDetail> {
  const dir = join(layout.root, rel);
  const [cpuStat, max, pids] = await Promise.all([
    readFile(join(dir, 'cpu.stat'), 'utf8'),
    readFile(join(dir, 'memory.max'), 'utf8'),
    readFile(join(dir, 'pids.current'), 'utf8'),
  ]);
  const cpu = parseFlatKeyed(cpuStat);
  return {
    cpuUserNs: (cpu.get('user_usec') ?? 0n) * 1000n,
    cpuSystemNs: (cpu.get('system_usec') ?? 0n) * 1000n,
    memoryLimitBytes: parseLimitV2(max, 'memory.max'),
    processCount: parseCounter(pids, 'pids.current'),
  };
}

async function unlessGone<T>(read: () => Promise<T>): Promise<T | null> {
  try {
    return await read();
  } catch (err) {
    if (isGone(err)) return null;
    throw err;
  }
}

async function readV1(layout: CgroupLayout, rel: string): Promise<CgroupStats> {
  const memDir = controllerDir(layout, 'memory', rel);
  const [cpu, usage, statText] = await Promise.all([
    readFile(join(controllerDir(layout, 'cpuacct', rel), 'cpuacct.usage'), 'utf8'),
    readFile(join(memDir, 'memory.usage_in_bytes'), 'utf8'),
    readFile(join(memDir, 'memory.stat'), 'utf8'),
  ]);
  const stat = parseFlatKeyed(statText);
  // The total_ keys include descendants, which is what a container's cgroup should report.
  const memoryUsageBytes = parseCounter(usage, 'memory.usage_in_bytes');
  return {
    cpuUsageNs: parseCounter(cpu, 'cpuacct.usage'),
    memoryUsageBytes,
    workingSetBytes: workingSet(memoryUsageBytes, stat.get('total_inactive_file') ?? 0n),
    rssBytes: stat.get('total_rss') ?? 0n,
    pageFaults: stat.get('total_pgfault') ?? 0n,
    majorPageFaults: stat.get('total_pgmajfault') ?? 0n,
    pressure: null,
    swap: null,
  };
}

async function readV2(layout: CgroupLayout, rel: string): Promise<CgroupStats> {
  const dir = join(layout.root, rel);
  const [cpuText, current, memText, pressure, swap] = await Promise.all([
    readFile(join(dir, 'cpu.stat'), 'utf8'),
    readFile(join(dir, 'memory.current'), 'utf8'),
    readFile(join(dir, 'memory.stat'), 'utf8'),
    readCgroupPressure(dir),
    readSwapV2(dir),
  ]);
  const cpu = parseFlatKeyed(cpuText);
  const mem = parseFlatKeyed(memText);
  const memoryUsageBytes = parseCounter(current, 'memory.current');
  return {
    cpuUsageNs: (cpu.get('usage_usec') ?? 0n) * 1000n,
    memoryUsageBytes,
    workingSetBytes: workingSet(memoryUsageBytes, mem.get('inactive_file') ?? 0n),
    rssBytes: mem.get('anon') ?? 0n,
    pageFaults: mem.get('pgfault') ?? 0n,
    majorPageFaults: mem.get('pgmajfault') ?? 0n,
    pressure,
    swap,
  };
}

/** Null where the kernel does not account swap to cgroups: it creates no memory.swap.* files then. */
async function readSwapV2(dir: string): Promise<CgroupSwap | null> {
  const [current, max] = await Promise.all(
    ['memory.swap.current', 'memory.swap.max'].map((file) =>
      readFile(join(dir, file), 'utf8').catch((err: unknown) => {
        if ((err as NodeJS.ErrnoException | null)?.code === 'ENOENT') return null;
        throw err;
      }),
    ),
  );
  if (current === null || current === undefined || max === null || max === undefined) return null;
  return {
    usageBytes: parseCounter(current, 'memory.swap.current'),
    limitBytes: parseLimitV2(max, 'memory.swap.max'),
  };
}

function workingSet(usage: bigint, inactiveFile: bigint): bigint {
  return usage > inactiveFile ? usage - inactiveFile : 0n;
}

/** "key value" lines (memory.stat, cpu.stat); lines that do not parse are skipped. */
export function parseFlatKeyed(text: string): Map<string, bigint> {
  const out = new Map<string, bigint>();
  for (const line of text.split('\n')) {
    const m = /^(\S+)\s+(\d+)\s*$/.exec(line);
    if (m?.[1] !== undefined && m[2] !== undefined) out.set(m[1], BigInt(m[2]));
  }
  return out;
}

function parseCounter(text: string, file: string): bigint {
  const t = text.trim();
  if (!/^\d+$/.test(t)) throw new BerthError(`${file}: expected an unsigned integer, got "${t}"`);
  return BigInt(t);
}

/** v2 limit files say "max" for no limit. */
function parseLimitV2(text: string, file: string): bigint | null {
  return text.trim() === 'max' ? null : parseCounter(text, file);
}

/** A removed cgroup's files vanish (ENOENT) or, mid-removal, refuse to be read (ENODEV). */
function isGone(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === 'ENOENT' || code === 'ENODEV' || code === 'ESRCH';
}
