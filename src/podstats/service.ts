import type { Sandbox } from '../model/sandbox.js';
import { matchesLabels } from '../operation/lookup.js';
import { findSandbox } from '../sandbox/lookup.js';
import type { CgroupDetail, CgroupStats } from '../cgroups/stats.js';
import { cgroupUsageViews, remainingBytes } from '../container/usage.js';
import { Limiter } from '../kit/limiter.js';
import { SingleFlight } from '../kit/single-flight.js';
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
 * Pods read at once, by all calls together. A pod's reading holds about ten descriptors while it
 * runs (its cgroup files, an nsenter's pipes): 1,000 pods read all at once took 10,000, and three
 * lists at once ran berthd out of them. Sixteen keep both cores busy with nsenters.
 */
export const PODS_READ_AT_ONCE = 16;

/** A pod's reading with its cpu rate, sampled once per reading however many callers share it. */
interface RatedReading extends PodReading {
  nanoCores: bigint | null;
}

/**
 * PodSandboxStats, ListPodSandboxStats and the CRI metrics: pod cgroup, network namespace and
 * container figures. The previous cpu sample of each pod is kept here, for usage_nano_cores.
 * Calls that want a pod while it is being read share that reading: fifty stats streams opened
 * together read each pod once, not fifty times.
 */
export class PodStatsService {
  private readonly cpuRate = new CounterRate();
  private readonly reads = new Limiter(PODS_READ_AT_ONCE);
  private readonly readings = new SingleFlight<RatedReading>();

  constructor(private readonly deps: PodStatsDeps) {}

  /** One pod by id or unique prefix (NotFound when none); a stopped pod has no pod-level figures. */
  async stats(idOrPrefix: string): Promise<PodStatsView> {
    return this.toStats(await this.read(findSandbox(this.deps.store, idOrPrefix, false)));
  }

  /**
   * The ready pods the filter selects; an id that matches none selects nothing. Once `signal` is
   * aborted (the client is gone) no further pod is read.
   */
  async listStats(filter: PodStatsFilter, signal?: AbortSignal): Promise<PodStatsView[]> {
    return (await this.readReady(filter, signal)).map((r) => this.toStats(r));
  }

  metricDescriptors(): MetricDescriptor[] {
    return metricDescriptors();
  }

  async listMetrics(signal?: AbortSignal): Promise<PodMetrics[]> {
    return (await this.readReady({}, signal)).map(podMetrics);
  }

  private readReady(filter: PodStatsFilter, signal: AbortSignal | undefined): Promise<RatedReading[]> {
    this.cpuRate.retain(new Set(this.deps.store.sandboxes.list().map((s) => s.id)));
    return Promise.all(
      this.select(filter)
        .filter((sandbox) => sandbox.state === 'READY')
        .filter((sandbox) => matchesLabels(sandbox.spec.labels, filter.labelSelector))
        .map((sandbox) => this.read(sandbox, signal)),
    );
  }

  /** The pod's reading, shared with the calls that want it at the same time; `signal` is the caller's. */
  private read(sandbox: Sandbox, signal?: AbortSignal): Promise<RatedReading> {
    return this.readings.run(
      sandbox.id,
      (shared) =>
        this.reads.run(async () => {
          const reading = await readPod(this.deps, sandbox);
          const { cgroup, timestamp } = reading;
          const nanoCores = cgroup
            ? this.cpuRate.sample(sandbox.id, cgroup.cpuUsageNs, BigInt(timestamp))
            : null;
          return { ...reading, nanoCores };
        }, shared),
      signal,
    );
  }

  private select(filter: PodStatsFilter): Sandbox[] {
    if (!filter.id) return this.deps.store.sandboxes.list();
    const found = findSandbox(this.deps.store, filter.id, true);
    return found ? [found] : [];
  }

  private toStats(reading: RatedReading): PodStatsView {
    const { sandbox, timestamp, cgroup, detail, nanoCores } = reading;
    const { spec } = sandbox;
    return {
      id: sandbox.id,
      metadata: spec.metadata,
      labels: spec.labels,
      annotations: spec.annotations,
      ...(cgroup ? usage(cgroup, detail, timestamp, nanoCores) : { cpu: null, memory: null, io: null }),
      network: networkStats(timestamp, reading.interfaces),
      process: detail ? { timestamp, processCount: detail.processCount.toString() } : null,
      containers: reading.containers.map((c) => c.stats),
    };
  }
}

/** The pod cgroup's figures: a container's, with the cpu rate and the room under the pod's limit. */
function usage(
  cgroup: CgroupStats,
  detail: CgroupDetail | null,
  timestamp: string,
  nanoCores: bigint | null,
): Pick<PodStatsView, 'cpu' | 'memory' | 'io'> {
  const { cpu, memory, io } = cgroupUsageViews(cgroup, timestamp);
  return {
    cpu: { ...cpu, usageNanoCores: nanoCores === null ? null : nanoCores.toString() },
    memory: {
      ...memory,
      availableBytes: remainingBytes(detail?.memoryLimitBytes ?? null, cgroup.workingSetBytes),
    },
    io,
  };
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
