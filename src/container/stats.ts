import { join } from 'node:path';
import { containerDir } from '../imagestore/rootfs.js';
import type { Container } from '../model/container.js';
import { directoryUsage } from '../stats/disk.js';
import { nowNanos } from '../time.js';
import type { ContainerServiceDeps } from './context.js';
import { findContainer, hasProcess, selectContainers } from './lookup.js';
import type { ContainerFilter, ContainerStatsView } from './types.js';
import { cgroupUsageViews } from './usage.js';

/** ContainerStats and ListContainerStats: cgroup and writable-layer usage. */
export class ContainerStatsReader {
  constructor(private readonly deps: ContainerServiceDeps) {}

  async stats(idOrPrefix: string): Promise<ContainerStatsView> {
    return this.statsOf(findContainer(this.deps.store, idOrPrefix));
  }

  async listStats(filter: ContainerFilter): Promise<ContainerStatsView[]> {
    return Promise.all(selectContainers(this.deps.store, filter).map((c) => this.statsOf(c)));
  }

  private async statsOf(container: Container): Promise<ContainerStatsView> {
    const { config } = this.deps;
    const { spec } = container;
    const [cgroup, disk] = await Promise.all([
      hasProcess(container) ? this.deps.cgroups.readStats(container.cgroupsPath) : null,
      directoryUsage(join(containerDir(container.id, config.rootDir), 'upper')).catch(() => null),
    ]);
    const timestamp = nowNanos();
    return {
      id: container.id,
      podSandboxId: container.sandboxId,
      metadata: spec.metadata,
      labels: spec.labels,
      annotations: spec.annotations,
      ...(cgroup ? cgroupUsageViews(cgroup, timestamp) : { cpu: null, memory: null, swap: null, io: null }),
      writableLayer: disk
        ? {
            timestamp,
            mountpoint: config.rootDir,
            usedBytes: disk.bytes.toString(),
            inodesUsed: disk.inodes.toString(),
          }
        : null,
    };
  }
}
