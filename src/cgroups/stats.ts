/**
 * CPU, memory and task figures of a container's or a pod's cgroup, read from its files (v1 or
 * v2), computed the way kubelet's cAdvisor and containerd's CRI stats do: working set = usage -
 * inactive file pages, floored at 0, since inactive page cache can be reclaimed without pressure.
 */
import { access, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { BerthError, InvalidArgumentError } from '../errors.js';
import type { CgroupDriver } from './driver.js';

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
}

export interface CgroupReadOptions {
  /** Where the cgroup filesystems are mounted; tests point it at a fake tree. */
  root?: string;
}

const DEFAULT_ROOT = '/sys/fs/cgroup';

/**
 * The cgroup's path below each hierarchy's mount point, as runc derives it from the spec's
 * linux.cgroupsPath. cgroupfs: the path itself (berth always writes absolute ones; runc would
 * resolve a relative one against its own cgroup, which we cannot know, so those are refused).
 * systemd: "slice:prefix:name" names the scope "<prefix>-<name>.scope" (or the slice "<name>" when
 * it ends in ".slice") inside the expanded slice; an empty slice means system.slice, as in runc.
 */
export function cgroupRelativePath(cgroupsPath: string, driver: CgroupDriver): string {
  let path: string;
  if (driver === 'systemd') {
    const parts = cgroupsPath.split(':');
    if (parts.length !== 3) {
      throw new InvalidArgumentError('cgroupsPath', `"${cgroupsPath}" is not of the form slice:prefix:name`);
    }
    const [slice = '', prefix = '', name = ''] = parts;
    if (name === '') throw new InvalidArgumentError('cgroupsPath', `"${cgroupsPath}" has no name`);
    const unit = name.endsWith('.slice') ? name : `${prefix}-${name}.scope`;
    path = `${expandSlice(slice || 'system.slice')}/${unit}`;
  } else {
    if (!cgroupsPath.startsWith('/')) {
      throw new InvalidArgumentError('cgroupsPath', `"${cgroupsPath}" is not absolute`);
    }
    path = cgroupsPath.replace(/\/+$/, '');
  }
  if (path.split('/').some((seg) => seg === '..' || seg === '.')) {
    throw new InvalidArgumentError('cgroupsPath', `"${cgroupsPath}" has a "." or ".." component`);
  }
  return path.replace(/\/{2,}/g, '/');
}

/**
 * systemd's slice nesting made explicit: "a-b-c.slice" lives at "/a.slice/a-b.slice/a-b-c.slice",
 * and "-.slice" is the root (""), so a path built on it starts at the top.
 */
export function expandSlice(slice: string): string {
  const suffix = '.slice';
  if (!slice.endsWith(suffix) || slice.length === suffix.length || slice.includes('/')) {
    throw new InvalidArgumentError('cgroupsPath', `invalid slice name "${slice}"`);
  }
  const stem = slice.slice(0, -suffix.length);
  if (stem === '-') return '';
  const parts = stem.split('-');
  if (parts.some((p) => p === ''))
    throw new InvalidArgumentError('cgroupsPath', `invalid slice name "${slice}"`);
  return parts.map((_, i) => `/${parts.slice(0, i + 1).join('-')}${suffix}`).join('');
}

const versionByRoot = new Map<string, Promise<1 | 2>>();

/** 2 when the unified hierarchy is mounted at the root itself (its top has cgroup.controllers). */
export function cgroupVersion(root = DEFAULT_ROOT): Promise<1 | 2> {
  let v = versionByRoot.get(root);
  if (!v) {
    v = access(join(root, 'cgroup.controllers')).then(
      () => 2 as const,
      () => 1 as const,
    );
    versionByRoot.set(root, v);
  }
  return v;
}

/**
 * The cgroup's counters, or null when the cgroup is gone (the container was deleted, or is being
 * deleted while we read). A v2 cgroup without the memory or cpu controller enabled also reads
 * as null, since its files are missing too.
 */
export async function readCgroupStats(
  cgroupsPath: string,
  driver: CgroupDriver,
  opts: CgroupReadOptions = {},
): Promise<CgroupStats | null> {
  return readCgroupStatsAt(cgroupRelativePath(cgroupsPath, driver), opts);
}

/** readCgroupStats of a cgroup given by its path below the hierarchies' mount points. */
export async function readCgroupStatsAt(
  rel: string,
  opts: CgroupReadOptions = {},
): Promise<CgroupStats | null> {
  const root = opts.root ?? DEFAULT_ROOT;
  return unlessGone(async () =>
    (await cgroupVersion(root)) === 2 ? readV2(join(root, rel)) : readV1(root, rel),
  );
}

/**
 * The cgroup a pod's cgroup_parent names, below the hierarchies' mount points: a cgroupfs path
 * (kubelet's "/kubepods/burstable/pod<uid>"), or with systemd a slice expanded to its path.
 */
export function parentRelativePath(parent: string, driver: CgroupDriver): string {
  if (driver === 'systemd') return expandSlice(parent);
  return cgroupRelativePath(parent.startsWith('/') ? parent : `/${parent}`, driver);
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
export async function readCgroupDetailAt(
  rel: string,
  opts: CgroupReadOptions = {},
): Promise<CgroupDetail | null> {
  const root = opts.root ?? DEFAULT_ROOT;
  return unlessGone(async () =>
    (await cgroupVersion(root)) === 2 ? readDetailV2(join(root, rel)) : readDetailV1(root, rel),
  );
}

async function readDetailV1(root: string, rel: string): Promise<CgroupDetail> {
  const [cpuStat, limit, pids] = await Promise.all([
    readFile(join(root, 'cpuacct', rel, 'cpuacct.stat'), 'utf8'),
    readFile(join(root, 'memory', rel, 'memory.limit_in_bytes'), 'utf8'),
    readFile(join(root, 'pids', rel, 'pids.current'), 'utf8'),
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

async function readDetailV2(dir: string): Promise<CgroupDetail> {
  const [cpuStat, max, pids] = await Promise.all([
    readFile(join(dir, 'cpu.stat'), 'utf8'),
    readFile(join(dir, 'memory.max'), 'utf8'),
    readFile(join(dir, 'pids.current'), 'utf8'),
  ]);
  const cpu = parseFlatKeyed(cpuStat);
  return {
    cpuUserNs: (cpu.get('user_usec') ?? 0n) * 1000n,
    cpuSystemNs: (cpu.get('system_usec') ?? 0n) * 1000n,
    memoryLimitBytes: max.trim() === 'max' ? null : parseCounter(max, 'memory.max'),
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

async function readV1(root: string, rel: string): Promise<CgroupStats> {
  const memDir = join(root, 'memory', rel);
  const [cpu, usage, statText] = await Promise.all([
    readFile(join(root, 'cpuacct', rel, 'cpuacct.usage'), 'utf8'),
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
  };
}

async function readV2(dir: string): Promise<CgroupStats> {
  const [cpuText, current, memText] = await Promise.all([
    readFile(join(dir, 'cpu.stat'), 'utf8'),
    readFile(join(dir, 'memory.current'), 'utf8'),
    readFile(join(dir, 'memory.stat'), 'utf8'),
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

/** A removed cgroup's files vanish (ENOENT) or, mid-removal, refuse to be read (ENODEV). */
function isGone(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === 'ENOENT' || code === 'ENODEV' || code === 'ESRCH';
}
