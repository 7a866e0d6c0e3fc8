/**
 * Stats and metrics to the wire: containers' stats (ContainerStats, ListContainerStats, and inside
 * a pod's stats), pods' stats, and the CRI metrics.
 */
import type { ContainerStatsView } from '../container/types.js';
import type {
  CpuUsageView,
  IoUsageView,
  PressureLineView,
  PressureView,
  SwapUsageView,
} from '../container/usage.js';
import type { PodStatsService } from '../podstats/service.js';
import type { InterfaceStatsView, MetricSample, PodStatsFilter, PodStatsView } from '../podstats/types.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import type { UnaryHandlers } from './handler.js';
import type { Received, Sent } from './messages.js';
import { requireId, selectorFilter } from './validate.js';

export function podStatsHandlers(pods: PodStatsService) {
  return {
    PodSandboxStats: async (req) => ({
      stats: toWirePodStats(await pods.stats(requireId('pod_sandbox_id', req.pod_sandbox_id))),
    }),
    ListPodSandboxStats: async (req, { signal }) => ({
      stats: (await pods.listStats(toPodStatsFilter(req), signal)).map(toWirePodStats),
    }),
    ListMetricDescriptors: async () => ({
      descriptors: pods
        .metricDescriptors()
        .map((d) => ({ name: d.name, help: d.help, label_keys: d.labelKeys })),
    }),
    ListPodSandboxMetrics: async (_req, { signal }) => ({
      pod_metrics: (await pods.listMetrics(signal)).map((p) => ({
        pod_sandbox_id: p.podSandboxId,
        metrics: p.metrics.map(toWireMetric),
        container_metrics: p.containerMetrics.map((c) => ({
          container_id: c.containerId,
          metrics: c.metrics.map(toWireMetric),
        })),
      })),
    }),
  } satisfies UnaryHandlers<RuntimeServiceHandlers>;
}

export function toPodStatsFilter(req: Received<'ListPodSandboxStatsRequest'>): PodStatsFilter {
  const f = req.filter;
  if (!f) return {};
  return {
    ...(f.id ? { id: f.id } : {}),
    ...selectorFilter(f.label_selector),
  };
}

export function toWirePodStats(s: PodStatsView) {
  return {
    attributes: {
      id: s.id,
      metadata: {
        name: s.metadata.name,
        uid: s.metadata.uid,
        namespace: s.metadata.namespace,
        attempt: s.metadata.attempt,
      },
      labels: s.labels,
      annotations: s.annotations,
    },
    linux: {
      cpu: s.cpu
        ? {
            ...toWireCpu(s.cpu),
            usage_nano_cores: s.cpu.usageNanoCores === null ? null : { value: s.cpu.usageNanoCores },
          }
        : null,
      memory: s.memory
        ? {
            ...toWireMemory(s.memory),
            available_bytes: s.memory.availableBytes === null ? null : { value: s.memory.availableBytes },
          }
        : null,
      network: s.network
        ? {
            timestamp: s.network.timestamp,
            default_interface: toWireInterface(s.network.defaultInterface),
            interfaces: s.network.interfaces.map(toWireInterface),
          }
        : null,
      process: s.process
        ? { timestamp: s.process.timestamp, process_count: { value: s.process.processCount } }
        : null,
      containers: s.containers.map(toWireStats),
      io: toWireIo(s.io),
    },
  } satisfies Sent<'PodSandboxStats'>;
}

function toWireInterface(i: InterfaceStatsView) {
  return {
    name: i.name,
    rx_bytes: { value: i.rxBytes },
    rx_errors: { value: i.rxErrors },
    tx_bytes: { value: i.txBytes },
    tx_errors: { value: i.txErrors },
  } satisfies Sent<'NetworkInterfaceUsage'>;
}

function toWireMemory(m: NonNullable<ContainerStatsView['memory']>) {
  return {
    timestamp: m.timestamp,
    working_set_bytes: { value: m.workingSetBytes },
    usage_bytes: { value: m.usageBytes },
    rss_bytes: { value: m.rssBytes },
    page_faults: { value: m.pageFaults },
    major_page_faults: { value: m.majorPageFaults },
    psi: toWirePsi(m.psi),
  } satisfies Sent<'MemoryUsage'>;
}

function toWireCpu(c: CpuUsageView) {
  return {
    timestamp: c.timestamp,
    usage_core_nano_seconds: { value: c.usageCoreNanoSeconds },
    psi: toWirePsi(c.psi),
  } satisfies Sent<'CpuUsage'>;
}

function toWireIo(io: IoUsageView | null) {
  return io ? ({ timestamp: io.timestamp, psi: toWirePsi(io.psi) } satisfies Sent<'IoUsage'>) : null;
}

function toWireSwap(swap: SwapUsageView | null) {
  if (!swap) return null;
  return {
    timestamp: swap.timestamp,
    swap_usage_bytes: { value: swap.usageBytes },
    swap_available_bytes: swap.availableBytes === null ? null : { value: swap.availableBytes },
  } satisfies Sent<'SwapUsage'>;
}

/** Both are in the kernel's units already: the total in microseconds, the averages in percent. */
function toWirePsi(p: PressureView | null) {
  if (!p) return null;
  const line = (l: PressureLineView | null) =>
    l
      ? ({ Total: l.total, Avg10: l.avg10, Avg60: l.avg60, Avg300: l.avg300 } satisfies Sent<'PsiData'>)
      : null;
  return { Some: line(p.some), Full: line(p.full) } satisfies Sent<'PsiStats'>;
}

function toWireMetric(m: MetricSample) {
  return {
    name: m.name,
    timestamp: m.timestamp,
    metric_type: m.type,
    label_values: m.labelValues,
    value: { value: m.value },
  } satisfies Sent<'Metric'>;
}

export function toWireStats(s: ContainerStatsView) {
  return {
    attributes: {
      id: s.id,
      metadata: { name: s.metadata.name, attempt: s.metadata.attempt },
      labels: s.labels,
      annotations: s.annotations,
    },
    cpu: s.cpu ? toWireCpu(s.cpu) : null,
    memory: s.memory ? toWireMemory(s.memory) : null,
    swap: toWireSwap(s.swap),
    io: toWireIo(s.io),
    writable_layer: s.writableLayer
      ? {
          timestamp: s.writableLayer.timestamp,
          fs_id: { mountpoint: s.writableLayer.mountpoint },
          used_bytes: { value: s.writableLayer.usedBytes },
          inodes_used: { value: s.writableLayer.inodesUsed },
        }
      : null,
  } satisfies Sent<'ContainerStats'>;
}
