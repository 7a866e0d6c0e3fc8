/**
 * The cAdvisor-compatible metrics kubelet serves on /metrics/cadvisor when it takes them from the
 * CRI, with the names, help texts and label keys CRI-O publishes. kubelet adds no labels of its
 * own, so namespace, pod and container are among the keys; pod-level metrics (the network, which
 * belongs to the pod, not to a container) carry container "POD" and no image, as CRI-O's do.
 */
import type { CgroupDetail } from '../cgroups/stats.js';
import type { PressureView } from '../container/usage.js';
import type { ContainerReading, PodReading } from './reading.js';
import type { MetricDescriptor, MetricSample, MetricType, PodMetrics } from './types.js';

const BASE_KEYS = ['id', 'image', 'namespace', 'pod', 'container'];
/** cAdvisor under kubelet reports one cpu series, labelled "total". */
const CPU_KEYS = [...BASE_KEYS, 'cpu'];
const INTERFACE_KEYS = [...BASE_KEYS, 'interface'];
const POD_CONTAINER_NAME = 'POD';
const NS_PER_SECOND = 1_000_000_000n;
/** PSI totals are in microseconds. */
const US_PER_SECOND = 1_000_000n;

interface MetricDefinition extends MetricDescriptor {
  type: MetricType;
}

function define(name: string, help: string, type: MetricType, labelKeys = BASE_KEYS): MetricDefinition {
  return { name, help, type, labelKeys };
}

const METRICS = {
  cpuUsage: define(
    'container_cpu_usage_seconds_total',
    'Cumulative CPU time consumed in seconds.',
    'COUNTER',
    CPU_KEYS,
  ),
  cpuUser: define(
    'container_cpu_user_seconds_total',
    'Cumulative user CPU time consumed in seconds.',
    'COUNTER',
  ),
  cpuSystem: define(
    'container_cpu_system_seconds_total',
    'Cumulative system CPU time consumed in seconds.',
    'COUNTER',
  ),
  memoryUsage: define(
    'container_memory_usage_bytes',
    'Current memory usage in bytes, including all memory regardless of when it was accessed',
    'GAUGE',
  ),
  workingSet: define('container_memory_working_set_bytes', 'Current working set in bytes.', 'GAUGE'),
  rss: define('container_memory_rss', 'Size of RSS in bytes.', 'GAUGE'),
  swap: define('container_memory_swap', 'Container swap usage in bytes.', 'GAUGE'),
  processes: define('container_processes', 'Number of processes running inside the container.', 'GAUGE'),
  rxBytes: define(
    'container_network_receive_bytes_total',
    'Cumulative count of bytes received',
    'COUNTER',
    INTERFACE_KEYS,
  ),
  rxPackets: define(
    'container_network_receive_packets_total',
    'Cumulative count of packets received',
    'COUNTER',
    INTERFACE_KEYS,
  ),
  rxDropped: define(
    'container_network_receive_packets_dropped_total',
    'Cumulative count of packets dropped while receiving',
    'COUNTER',
    INTERFACE_KEYS,
  ),
  rxErrors: define(
    'container_network_receive_errors_total',
    'Cumulative count of errors encountered while receiving',
    'COUNTER',
    INTERFACE_KEYS,
  ),
  txBytes: define(
    'container_network_transmit_bytes_total',
    'Cumulative count of bytes transmitted',
    'COUNTER',
    INTERFACE_KEYS,
  ),
  txPackets: define(
    'container_network_transmit_packets_total',
    'Cumulative count of packets transmitted',
    'COUNTER',
    INTERFACE_KEYS,
  ),
  txDropped: define(
    'container_network_transmit_packets_dropped_total',
    'Cumulative count of packets dropped while transmitting',
    'COUNTER',
    INTERFACE_KEYS,
  ),
  txErrors: define(
    'container_network_transmit_errors_total',
    'Cumulative count of errors encountered while transmitting',
    'COUNTER',
    INTERFACE_KEYS,
  ),
} satisfies Record<string, MetricDefinition>;

type PressureResource = 'cpu' | 'memory' | 'io';

/**
 * cAdvisor's PSI counters, in seconds: "waiting" is the kernel's "some" line (at least one task
 * stalled), "stalled" its "full" line (every task at once).
 */
const PRESSURE = (
  [
    ['cpu', 'CPU'],
    ['memory', 'memory'],
    ['io', 'I/O'],
  ] as const
).map(([resource, what]) => ({
  resource,
  waiting: define(
    `container_pressure_${resource}_waiting_seconds_total`,
    `Total time in seconds that at least one task of the container waited for ${what}.`,
    'COUNTER',
  ),
  stalled: define(
    `container_pressure_${resource}_stalled_seconds_total`,
    `Total time in seconds that no task of the container could run for want of ${what}.`,
    'COUNTER',
  ),
}));

/** Every metric ListPodSandboxMetrics may return, as ListMetricDescriptors lists them. */
export function metricDescriptors(): MetricDescriptor[] {
  const all = [...Object.values(METRICS), ...PRESSURE.flatMap((p) => [p.waiting, p.stalled])];
  return all.map(({ name, help, labelKeys }) => ({
    name,
    help,
    labelKeys: [...labelKeys],
  }));
}

/** The metrics of one pod reading: the network at pod level, the rest per running container. */
export function podMetrics(reading: PodReading): PodMetrics {
  const { sandbox, timestamp } = reading;
  const base = (id: string, image: string, container: string): string[] => [
    id,
    image,
    sandbox.namespace,
    sandbox.name,
    container,
  ];
  const sample = (def: MetricDefinition, labels: string[], value: bigint): MetricSample => ({
    name: def.name,
    timestamp,
    type: def.type,
    labelValues: labels,
    value: value.toString(),
  });

  const podLabels = base(sandbox.id, '', POD_CONTAINER_NAME);
  const metrics = (reading.interfaces ?? []).flatMap((i) => {
    const labels = [...podLabels, i.name];
    return [
      sample(METRICS.rxBytes, labels, i.rxBytes),
      sample(METRICS.rxPackets, labels, i.rxPackets),
      sample(METRICS.rxDropped, labels, i.rxDropped),
      sample(METRICS.rxErrors, labels, i.rxErrors),
      sample(METRICS.txBytes, labels, i.txBytes),
      sample(METRICS.txPackets, labels, i.txPackets),
      sample(METRICS.txDropped, labels, i.txDropped),
      sample(METRICS.txErrors, labels, i.txErrors),
    ];
  });

  const containerMetrics = reading.containers.flatMap((c) => {
    const detail = c.detail;
    if (detail === null) return [];
    const { container } = c;
    const image = container.spec.userSpecifiedImage || container.imageName;
    const labels = base(container.id, image, container.spec.metadata.name);
    return [{ containerId: container.id, metrics: containerSamples(c, detail, labels, sample) }];
  });
  return { podSandboxId: sandbox.id, metrics, containerMetrics };
}

function containerSamples(
  { stats }: ContainerReading,
  detail: CgroupDetail,
  labels: string[],
  sample: (def: MetricDefinition, labels: string[], value: bigint) => MetricSample,
): MetricSample[] {
  // Metric values are uint64: seconds are whole, as CRI-O truncates them too.
  const seconds = (ns: bigint): bigint => ns / NS_PER_SECOND;
  const out = [
    sample(METRICS.cpuUser, labels, seconds(detail.cpuUserNs)),
    sample(METRICS.cpuSystem, labels, seconds(detail.cpuSystemNs)),
    sample(METRICS.processes, labels, detail.processCount),
  ];
  if (stats.cpu) {
    out.push(sample(METRICS.cpuUsage, [...labels, 'total'], seconds(BigInt(stats.cpu.usageCoreNanoSeconds))));
  }
  if (stats.memory) {
    out.push(
      sample(METRICS.memoryUsage, labels, BigInt(stats.memory.usageBytes)),
      sample(METRICS.workingSet, labels, BigInt(stats.memory.workingSetBytes)),
      sample(METRICS.rss, labels, BigInt(stats.memory.rssBytes)),
    );
  }
  if (stats.swap) out.push(sample(METRICS.swap, labels, BigInt(stats.swap.usageBytes)));
  const psi: Record<PressureResource, PressureView | null> = {
    cpu: stats.cpu?.psi ?? null,
    memory: stats.memory?.psi ?? null,
    io: stats.io?.psi ?? null,
  };
  for (const { resource, waiting, stalled } of PRESSURE) {
    const p = psi[resource];
    if (p?.some) out.push(sample(waiting, labels, BigInt(p.some.total) / US_PER_SECOND));
    if (p?.full) out.push(sample(stalled, labels, BigInt(p.full.total) / US_PER_SECOND));
  }
  return out;
}
