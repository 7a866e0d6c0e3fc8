/**
 * A pod's own cgroup, which berth makes for a pod kubelet gave no cgroup parent: the limits set on
 * it as a whole, and, for the cgroupfs driver, the files those become on each cgroup version. The
 * cgroup bounds the infra and every container of the pod, which sit below it.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { FailedPreconditionError } from '../errors.js';
import { ensureCgroup } from './hierarchy.js';
import type { CgroupHost } from './probe.js';

/** What a pod's cgroup is set to, as a whole (sandbox/ sums a pod's resources and overhead into it). */
export interface PodCgroupLimits {
  /** 0: no limit. */
  memoryBytes: number;
  /** CFS period in µs; always set, so that a quota has one. */
  cpuPeriod: number;
  /** CFS quota in µs per period; 0: no limit. */
  cpuQuota: number;
  /** 0: the default weight. */
  cpuShares: number;
  /** cgroup v2's weight for cpuShares (the default for 0), by the pod's runtime's formula (cpu-weight.ts). */
  cpuWeight: number;
  /** '': as the parent's. */
  cpusetCpus: string;
  cpusetMems: string;
  /** cgroup v2 files and values, written as given. */
  unified: Record<string, string>;
}

/** The kernel's own defaults: a new cgroup's files hold them, and a lifted limit goes back to them. */
export const DEFAULT_CPU_PERIOD = 100_000;
const DEFAULT_SHARES = 1024;

/** One file to write, in the hierarchy of `controller` (v1), or in the unified one (controller ''). */
interface LimitFile {
  controller: string;
  file: string;
  value: string;
}

/**
 * Whether `limits` set nothing: what a new cgroup's files hold already, so that a pod that asks
 * for nothing (most of them) costs no writes.
 */
export function setsNothing(limits: PodCgroupLimits): boolean {
  return (
    limits.memoryBytes === 0 &&
    limits.cpuQuota === 0 &&
    limits.cpuShares === 0 &&
    limits.cpuPeriod === DEFAULT_CPU_PERIOD &&
    limits.cpusetCpus === '' &&
    limits.cpusetMems === '' &&
    Object.keys(limits.unified).length === 0
  );
}

/** The files `limits` are on this host's version, in the order they are written. */
export function limitFiles(host: Pick<CgroupHost, 'version'>, limits: PodCgroupLimits): LimitFile[] {
  if (host.version === 'v2') {
    const quota = limits.cpuQuota > 0 ? String(limits.cpuQuota) : 'max';
    return [
      {
        controller: '',
        file: 'memory.max',
        value: limits.memoryBytes > 0 ? String(limits.memoryBytes) : 'max',
      },
      { controller: '', file: 'cpu.max', value: `${quota} ${limits.cpuPeriod}` },
      { controller: '', file: 'cpu.weight', value: String(limits.cpuWeight) },
      ...cpusetFiles('', limits),
      ...Object.entries(limits.unified).map(([file, value]) => ({ controller: '', file, value })),
    ];
  }
  return [
    {
      controller: 'memory',
      file: 'memory.limit_in_bytes',
      value: limits.memoryBytes > 0 ? String(limits.memoryBytes) : '-1',
    },
    { controller: 'cpu', file: 'cpu.cfs_period_us', value: String(limits.cpuPeriod) },
    {
      controller: 'cpu',
      file: 'cpu.cfs_quota_us',
      value: limits.cpuQuota > 0 ? String(limits.cpuQuota) : '-1',
    },
    { controller: 'cpu', file: 'cpu.shares', value: String(limits.cpuShares || DEFAULT_SHARES) },
    ...cpusetFiles('cpuset', limits),
  ];
}

/** Only as asked: an empty cpuset is the parent's, which a new cgroup starts with (ensureCgroup). */
function cpusetFiles(controller: string, limits: PodCgroupLimits): LimitFile[] {
  return [
    ...(limits.cpusetCpus ? [{ controller, file: 'cpuset.cpus', value: limits.cpusetCpus }] : []),
    ...(limits.cpusetMems ? [{ controller, file: 'cpuset.mems', value: limits.cpusetMems }] : []),
  ];
}

/**
 * Makes the cgroup `rel` in every hierarchy. On v2, each cgroup on the way down (and `rel` itself,
 * for the containers below it) gets every controller its parent offers enabled for its children,
 * as runc does for a container's: the limits written below need them.
 */
export async function makePodCgroup(host: CgroupHost, rel: string): Promise<void> {
  for (const mountPoint of host.mountPoints) await ensureCgroup(mountPoint, rel);
  if (host.version !== 'v2') return;
  const parts = rel.split('/').filter((p) => p !== '');
  for (let depth = 0; depth <= parts.length; depth++) {
    const dir = join(host.root, ...parts.slice(0, depth));
    const offered = (await readFile(join(dir, 'cgroup.controllers'), 'utf8')).split(/\s+/).filter(Boolean);
    const enabled = new Set((await readFile(join(dir, 'cgroup.subtree_control'), 'utf8')).split(/\s+/));
    const missing = offered.filter((c) => !enabled.has(c));
    if (missing.length > 0) {
      await writeFile(join(dir, 'cgroup.subtree_control'), missing.map((c) => `+${c}`).join(' '));
    }
  }
}

/** Writes `files` into the cgroup `rel`: each in its controller's hierarchy on v1. */
export async function writeLimitFiles(host: CgroupHost, rel: string, files: LimitFile[]): Promise<void> {
  for (const { controller, file, value } of files) {
    const mountPoint = controller === '' ? host.root : hierarchyOf(host, controller);
    await writeFile(join(mountPoint, rel, file), value).catch((err: NodeJS.ErrnoException) => {
      // A well-formed value the kernel will not take here (CPUs the node lacks, a cpuset its
      // containers' cpusets are not inside of, a limit below what is in use): the node's state
      // decides, so the caller hears that, with the kernel's word for it.
      throw new FailedPreconditionError(
        `the kernel refused the pod cgroup's ${file} = ${value}: ${err.code ?? err.message}`,
      );
    });
  }
}

function hierarchyOf(host: CgroupHost, controller: string): string {
  const found = host.mountPoints.find((m) => basename(m).split(',').includes(controller));
  if (found === undefined) throw new Error(`the ${controller} cgroup controller is not mounted`);
  return found;
}
