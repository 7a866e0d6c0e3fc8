/**
 * A pod's limits as a whole, from what it asked: its resources (kubelet's sum over its containers)
 * with its overhead (what the runtime class costs) added, as kubelet sizes a pod cgroup it makes.
 */
import { cpuWeightOf, MAX_SHARES, type WeightConversion } from '../cgroups/index.js';
import { DEFAULT_CPU_PERIOD, type PodCgroupLimits } from '../cgroups/pod-cgroup.js';
import type { ContainerResources } from '../model/container.js';
import type { PodResources } from '../model/sandbox.js';

/**
 * A limit of the pod's resources that is unset (0, or -1 for the quota) leaves the pod unlimited
 * in it: the overhead only adds to a limit, it never makes one. The quotas are added over the
 * resources' period (else the overhead's, else the kernel's), each scaled to it. The shares become
 * a v2 weight as the pod's runtime turns its containers' into one (`conversion`).
 */
export function podLimits(asked: PodResources | null, conversion: WeightConversion): PodCgroupLimits {
  const r = asked?.resources ?? null;
  const o = asked?.overhead ?? null;
  const cpuPeriod = r?.cpuPeriod || o?.cpuPeriod || DEFAULT_CPU_PERIOD;
  const cpuShares = Math.min((r?.cpuShares ?? 0) + (o?.cpuShares ?? 0), MAX_SHARES);
  return {
    memoryBytes: r && r.memoryLimitBytes > 0 ? r.memoryLimitBytes + Math.max(o?.memoryLimitBytes ?? 0, 0) : 0,
    cpuPeriod,
    cpuQuota: r && r.cpuQuota > 0 ? quotaOver(r, cpuPeriod) + quotaOver(o, cpuPeriod) : 0,
    cpuShares,
    cpuWeight: cpuWeightOf(cpuShares, conversion),
    cpusetCpus: r?.cpusetCpus ?? '',
    cpusetMems: r?.cpusetMems ?? '',
    unified: r?.unified ?? {},
  };
}

/** `limits`' quota per `period` µs; none counts as none. */
function quotaOver(limits: ContainerResources | null, period: number): number {
  if (!limits || limits.cpuQuota <= 0) return 0;
  const own = limits.cpuPeriod || DEFAULT_CPU_PERIOD;
  return Math.ceil((limits.cpuQuota * period) / own);
}
