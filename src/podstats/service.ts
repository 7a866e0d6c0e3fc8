import type { Sandbox } from '../model/sandbox.js';
import { matchesLabels } from '../operation/lookup.js';
import { findSandbox } from '../sandbox/lookup.js';
import type { CgroupDetail, CgroupStats } from '../cgroups/stats.js';
import { cgroupUsageViews, remainingBytes } from '../container/usage.js';
import { CounterRate } from '../stats/rate.js';
import { podMetrics, metricDescriptors } from './metrics.js';
import { readPod, type PodReaderDeps, type PodReading } from './reading.js';
import type {
  InterfaceStatsView,
  MetricDescriptor,
  PodMetrics,
  PodStatsFilter,
  PodStatsView,
} from './types.js';
import type { InterfaceCounters } from '../netns/counters.js';

export type PodStatsDeps = PodReaderDeps;

/**
 * PodSandboxStats, ListPodSandboxStats and the CRI metrics: pod cgroup, network namespace and
 * container figures. The previous cpu sample of each pod is kept here, for usage_nano_cores.
 */
export class PodStatsService {
  private readonly cpuRate = new CounterRate();

  constructor(private readonly deps: PodStatsDeps) {}

  /** One pod by id or unique prefix (NotFound when none); a stopped pod has no pod-level figures. */
  async stats(idOrPrefix: string): Promise<PodStatsView> {
    return this.toStats(await readPod(this.deps, findSandbox(this.deps.store, idOrPrefix, false)));
  }

  /** The ready pods the filter selects; an id that matches none selects nothing. */
  async listStats(filter: PodStatsFilter): Promise<PodStatsView[]> {
    return (await this.readReady(filter)).map((r) => this.toStats(r));
  }

  metricDescriptors(): MetricDescriptor[] {
    return metricDescriptors();
  }

  async listMetrics(): Promise<PodMetrics[]> {
    return (await this.readReady({})).map(podMetrics);
  }

  private readReady(filter: PodStatsFilter): Promise<PodReading[]> {
    this.cpuRate.retain(new Set(this.deps.store.sandboxes.list().map((s) => s.id)));
    return Promise.all(
      this.select(filter)
        .filter((sandbox) => sandbox.state === 'READY')
        .filter((sandbox) => matchesLabels(sandbox.spec.labels, filter.labelSelector))
        .map((sandbox) => readPod(this.deps, sandbox)),
    );
  }

  private select(filter: PodStatsFilter): Sandbox[] {
    if (!filter.id) return this.deps.store.sandboxes.list();
    const found = findSandbox(this.deps.store, filter.id, true);
    return found ? [found] : [];
  }

  private toStats(reading: PodReading): PodStatsView {
    const { sandbox, timestamp, cgroup, detail } = reading;
    const { spec } = sandbox;
    return {
      id: sandbox.id,
      metadata: spec.metadata,
      labels: spec.labels,
      annotations: spec.annotations,
      ...(cgroup ? this.usage(sandbox.id, cgroup, detail, timestamp) : { cpu: null, memory: null, io: null }),
      network: networkStats(timestamp, reading.interfaces),
      process: detail ? { timestamp, processCount: detail.processCount.toString() } : null,
      containers: reading.containers.map((c) => c.stats),
    };
  }

  /** The pod cgroup's figures: a container's, with the cpu rate and the room under the pod's limit. */
  private usage(
    podId: string,
    cgroup: CgroupStats,
    detail: CgroupDetail | null,
    timestamp: string,
  ): Pick<PodStatsView, 'cpu' | 'memory' | 'io'> {
    const { cpu, memory, io } = cgroupUsageViews(cgroup, timestamp);
    const nanoCores = this.cpuRate.sample(podId, cgroup.cpuUsageNs, BigInt(timestamp));
    return {
      cpu: { ...cpu, usageNanoCores: nanoCores === null ? null : nanoCores.toString() },
      memory: {
        ...memory,
        availableBytes: remainingBytes(detail?.memoryLimitBytes ?? null, cgroup.workingSetBytes),
      },
      io,
    };
  }
}

/** eth0 is the default interface, as kubelet's CNI names it; else the first one, as containerd does. */
function networkStats(timestamp: string, interfaces: InterfaceCounters[] | null): PodStatsView['network'] {
  if (!interfaces) return null;
  const views = interfaces.map(interfaceView);
  const defaultInterface = views.find((i) => i.name === 'eth0') ?? views[0];
  return defaultInterface ? { timestamp, defaultInterface, interfaces: views } : null;
}

function interfaceView(i: InterfaceCounters): InterfaceStatsView {
  return {
    name: i.name,
    rxBytes: i.rxBytes.toString(),
    rxErrors: i.rxErrors.toString(),
    txBytes: i.txBytes.toString(),
    txErrors: i.txErrors.toString(),
  };
}
