/**
 * One reading of a pod: its cgroup, its network namespace's interfaces and its containers, taken
 * once and turned into both the stats and the metrics RPCs' answers, so the two agree.
 */
import type { ContainerStatsReader } from '../container/stats.js';
import { hasProcess } from '../container/lookup.js';
import type { ContainerStatsView } from '../container/types.js';
import type { Container } from '../model/container.js';
import { podCgroupParent, type Sandbox } from '../model/sandbox.js';
import { readInterfaceCounters, type InterfaceCounters } from '../netns/counters.js';
import type { CgroupManager } from '../cgroups/index.js';
import type { CgroupDetail, CgroupStats } from '../cgroups/stats.js';
import type { Store } from '../store/index.js';
import { nowNanos } from '../time.js';

export interface PodReaderDeps {
  store: Store;
  containerStats: Pick<ContainerStatsReader, 'listStats'>;
  cgroups: CgroupManager;
  /** For reading a namespace's counters with nsenter when no process of it is known. */
  timeoutMs: number;
}

export interface ContainerReading {
  container: Container;
  stats: ContainerStatsView;
  /** Null when the container has no process (created cgroups only hold one while it runs). */
  detail: CgroupDetail | null;
}

export interface PodReading {
  sandbox: Sandbox;
  timestamp: string;
  /** Null when the pod is not ready, or its cgroup is gone. */
  cgroup: CgroupStats | null;
  detail: CgroupDetail | null;
  /** The pod's own interfaces (loopback left out); null for host-network or stopped pods. */
  interfaces: InterfaceCounters[] | null;
  containers: ContainerReading[];
}

export async function readPod(deps: PodReaderDeps, sandbox: Sandbox): Promise<PodReading> {
  const ready = sandbox.state === 'READY';
  const records = new Map(deps.store.containers.listBySandbox(sandbox.id).map((c) => [c.id, c]));
  const [usage, interfaces, containerStats] = await Promise.all([
    ready ? readPodCgroup(deps, sandbox, [...records.values()]) : null,
    ready ? readPodInterfaces(deps, sandbox, [...records.values()]) : null,
    deps.containerStats.listStats({ podSandboxId: sandbox.id }),
  ]);
  const containers = await Promise.all(
    containerStats.flatMap((stats) => {
      const container = records.get(stats.id);
      if (!container) return [];
      return [readContainerDetail(deps, container).then((detail) => ({ container, stats, detail }))];
    }),
  );
  return {
    sandbox,
    timestamp: nowNanos(),
    cgroup: usage?.stats ?? null,
    detail: usage?.detail ?? null,
    interfaces: interfaces?.filter((i) => i.name !== 'lo') ?? null,
    containers,
  };
}

async function readPodInterfaces(
  deps: PodReaderDeps,
  sandbox: Sandbox,
  containers: Container[],
): Promise<InterfaceCounters[] | null> {
  const hasNetwork = (s: Sandbox | undefined): s is Sandbox & { netnsPath: string } =>
    s?.state === 'READY' && s.networkState === 'READY' && s.netnsPath !== null && !s.hostNetwork;
  if (!hasNetwork(sandbox)) return null;
  try {
    return await readInterfaceCounters(sandbox.netnsPath, {
      pid: processInPod(sandbox, containers),
      timeoutMs: deps.timeoutMs,
    });
  } catch (err) {
    // A pod stopped while it was read has no network any more; that is not a failure of the list.
    if (hasNetwork(deps.store.sandboxes.get(sandbox.id))) throw err;
    return null;
  }
}

/**
 * A process likely in the pod's netns, whose /proc entry spares an nsenter: the infra, or else a
 * running container (the counters reader checks it really is in the netns). 0 for none.
 */
function processInPod(sandbox: Sandbox, containers: Container[]): number {
  if (sandbox.infra) return sandbox.pid;
  return containers.find((c) => hasProcess(c) && c.pid > 0)?.pid ?? 0;
}

async function readContainerDetail(deps: PodReaderDeps, container: Container): Promise<CgroupDetail | null> {
  if (!hasProcess(container)) return null;
  const { cgroups } = deps;
  return cgroups.readDetailAt(cgroups.relativePath(container.cgroupsPath));
}

/**
 * The pod's cgroup is its cgroup_parent, which kubelet creates per pod, or the one berth made for
 * it. Pods from before berth made its own have neither: the infra (if the pod runs one) and the
 * containers sit side by side in berth's own shared parent, so the pod's figures are the sum of
 * their cgroups (every figure summed is additive; there is no pod-wide limit then).
 */
async function readPodCgroup(
  deps: PodReaderDeps,
  sandbox: Sandbox,
  containers: Container[],
): Promise<{ stats: CgroupStats; detail: CgroupDetail | null } | null> {
  const { cgroups } = deps;
  const parent = podCgroupParent(sandbox);
  if (parent !== '') {
    const rel = cgroups.podPath(parent);
    const [stats, detail] = await Promise.all([cgroups.readStatsAt(rel), cgroups.readDetailAt(rel)]);
    return stats ? { stats, detail } : null;
  }
  const members = [
    ...(sandbox.infra ? [cgroups.cgroupsPath('', sandbox.id)] : []),
    ...containers.filter(hasProcess).map((c) => c.cgroupsPath),
  ].map((path) => cgroups.relativePath(path));
  // A pod without infra and without running containers has no process to account for: it uses nothing.
  if (members.length === 0) return { stats: sumStats([]), detail: sumDetails([]) };
  const [stats, details] = await Promise.all([
    Promise.all(members.map((rel) => cgroups.readStatsAt(rel))),
    Promise.all(members.map((rel) => cgroups.readDetailAt(rel))),
  ]);
  const found = stats.filter((s): s is CgroupStats => s !== null);
  if (found.length === 0) return null;
  const foundDetails = details.filter((d): d is CgroupDetail => d !== null);
  return { stats: sumStats(found), detail: foundDetails.length === 0 ? null : sumDetails(foundDetails) };
}

function sumStats(found: CgroupStats[]): CgroupStats {
  return {
    cpuUsageNs: sum(found, (s) => s.cpuUsageNs),
    memoryUsageBytes: sum(found, (s) => s.memoryUsageBytes),
    workingSetBytes: sum(found, (s) => s.workingSetBytes),
    rssBytes: sum(found, (s) => s.rssBytes),
    pageFaults: sum(found, (s) => s.pageFaults),
    majorPageFaults: sum(found, (s) => s.majorPageFaults),
    // Stall time does not add up across cgroups (two stalled at once are one stalled pod), and CRI
    // reports no pod-level swap: unknown, rather than a wrong figure.
    pressure: null,
    swap: null,
  };
}

function sumDetails(details: CgroupDetail[]): CgroupDetail {
  return {
    cpuUserNs: sum(details, (d) => d.cpuUserNs),
    cpuSystemNs: sum(details, (d) => d.cpuSystemNs),
    memoryLimitBytes: null,
    processCount: sum(details, (d) => d.processCount),
  };
}

function sum<T>(items: T[], figure: (item: T) => bigint): bigint {
  return items.reduce((total, item) => total + figure(item), 0n);
}
