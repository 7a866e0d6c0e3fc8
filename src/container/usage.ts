/**
 * A cgroup's figures as the stats RPCs report them, for a container and (with the pod's additions)
 * a pod: counters as decimal strings, timestamps in ns since the epoch. What the kernel does not
 * keep (PSI and swap on cgroup v1, swap without swap accounting) is null, never a zero: kubelet
 * reads an unset CRI field as unknown, and a zero as a measurement.
 */
import type { CgroupStats, CgroupSwap } from '../cgroups/stats.js';
import type { Pressure, PressureLine } from '../cgroups/pressure.js';

/** PsiData: the total in microseconds, the averages in percent, as the kernel and CRI give them. */
export interface PressureLineView {
  total: string;
  avg10: number;
  avg60: number;
  avg300: number;
}

export interface PressureView {
  some: PressureLineView | null;
  full: PressureLineView | null;
}

export interface CpuUsageView {
  timestamp: string;
  usageCoreNanoSeconds: string;
  psi: PressureView | null;
}

export interface MemoryUsageView {
  timestamp: string;
  workingSetBytes: string;
  usageBytes: string;
  rssBytes: string;
  pageFaults: string;
  majorPageFaults: string;
  psi: PressureView | null;
}

export interface SwapUsageView {
  timestamp: string;
  usageBytes: string;
  /** What is left under memory.swap.max; null when swap is not limited. */
  availableBytes: string | null;
}

/** IoUsage carries nothing but PSI, so there is none without it. */
export interface IoUsageView {
  timestamp: string;
  psi: PressureView;
}

export interface CgroupUsageViews {
  cpu: CpuUsageView;
  memory: MemoryUsageView;
  swap: SwapUsageView | null;
  io: IoUsageView | null;
}

export function cgroupUsageViews(cgroup: CgroupStats, timestamp: string): CgroupUsageViews {
  const pressure = cgroup.pressure;
  const io = pressureView(pressure?.io ?? null);
  return {
    cpu: {
      timestamp,
      usageCoreNanoSeconds: cgroup.cpuUsageNs.toString(),
      psi: pressureView(pressure?.cpu ?? null),
    },
    memory: {
      timestamp,
      workingSetBytes: cgroup.workingSetBytes.toString(),
      usageBytes: cgroup.memoryUsageBytes.toString(),
      rssBytes: cgroup.rssBytes.toString(),
      pageFaults: cgroup.pageFaults.toString(),
      majorPageFaults: cgroup.majorPageFaults.toString(),
      psi: pressureView(pressure?.memory ?? null),
    },
    swap: cgroup.swap ? swapView(cgroup.swap, timestamp) : null,
    io: io ? { timestamp, psi: io } : null,
  };
}

/** What is left under `limit` after `used`, floored at 0; null without a limit. */
export function remainingBytes(limit: bigint | null, used: bigint): string | null {
  return limit === null ? null : (limit > used ? limit - used : 0n).toString();
}

function swapView(swap: CgroupSwap, timestamp: string): SwapUsageView {
  return {
    timestamp,
    usageBytes: swap.usageBytes.toString(),
    availableBytes: remainingBytes(swap.limitBytes, swap.usageBytes),
  };
}

function pressureView(p: Pressure | null): PressureView | null {
  return p ? { some: lineView(p.some), full: lineView(p.full) } : null;
}

function lineView(line: PressureLine | null): PressureLineView | null {
  return line
    ? { total: line.totalUs.toString(), avg10: line.avg10, avg60: line.avg60, avg300: line.avg300 }
    : null;
}
