/** What the pod stats and metrics RPCs report; src/cri maps them to the wire form. */
import type { ContainerStatsView } from '../container/types.js';
import type { CpuUsageView, IoUsageView, MemoryUsageView } from '../container/usage.js';
import type { PodMetadata } from '../model/sandbox.js';

/** Counters as decimal strings (int64/uint64 on the wire); timestamps in ns since the epoch. */
export interface InterfaceStatsView {
  name: string;
  rxBytes: string;
  rxErrors: string;
  txBytes: string;
  txErrors: string;
}

export interface PodStatsView {
  id: string;
  metadata: PodMetadata;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  cpu:
    | (CpuUsageView & {
        /** Null on the first sample of a pod (the rate needs two). */
        usageNanoCores: string | null;
      })
    | null;
  /** A container's figures, plus what is left under the pod's limit (null when it has none). */
  memory: (MemoryUsageView & { availableBytes: string | null }) | null;
  /** The pod cgroup's io pressure. There is no pod-level swap in CRI: kubelet sums the containers'. */
  io: IoUsageView | null;
  /** Null for host-network pods, which have no interfaces of their own. */
  network: {
    timestamp: string;
    defaultInterface: InterfaceStatsView;
    interfaces: InterfaceStatsView[];
  } | null;
  process: { timestamp: string; processCount: string } | null;
  containers: ContainerStatsView[];
}

export interface PodStatsFilter {
  /** Exact id or unique prefix. */
  id?: string;
  labelSelector?: Record<string, string>;
}

export type MetricType = 'COUNTER' | 'GAUGE';

export interface MetricDescriptor {
  name: string;
  help: string;
  /** The order label values follow in every metric of this name. */
  labelKeys: string[];
}

export interface MetricSample {
  name: string;
  timestamp: string;
  type: MetricType;
  labelValues: string[];
  value: string;
}

export interface PodMetrics {
  podSandboxId: string;
  metrics: MetricSample[];
  containerMetrics: { containerId: string; metrics: MetricSample[] }[];
}
