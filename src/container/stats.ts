import { join } from 'node:path';
import { containerDir } from '../imagestore/rootfs.js';
import { Limiter } from '../kit/limiter.js';
import type { Container } from '../model/container.js';
import { directoryUsage, type DirectoryUsage } from '../stats/disk.js';
import { nowNanos } from '../time.js';
import type { ContainerServiceDeps } from './context.js';
import { findContainer, hasProcess, selectContainers } from './lookup.js';
import type { ContainerFilter, ContainerStatsView, WritableLayersUsage } from './types.js';
import { cgroupUsageViews } from './usage.js';

/**
 * Containers read at once, by all calls together (lists, pods' stats, ImageFsInfo): each holds its
 * cgroup files and its layer walk's directory open while it runs, so a node of thousands read all
 * at once would run berthd out of descriptors.
 */
export const CONTAINERS_READ_AT_ONCE = 16;

/** ContainerStats and ListContainerStats: cgroup and writable-layer usage. */
export class ContainerStatsReader {
  private readonly reads = new Limiter(CONTAINERS_READ_AT_ONCE);

  constructor(private readonly deps: ContainerServiceDeps) {}

  async stats(idOrPrefix: string): Promise<ContainerStatsView> {
    return this.statsOf(findContainer(this.deps.store, idOrPrefix));
  }

  /** Once `signal` is aborted (the client is gone) no further container is read. */
  async listStats(filter: ContainerFilter, signal?: AbortSignal): Promise<ContainerStatsView[]> {
    return Promise.all(
      selectContainers(this.deps.store, filter).map((c) => this.reads.run(() => this.statsOf(c), signal)),
    );
  }

  /**
   * What the writable layers of all containers use, for ImageFsInfo's container_filesystems
   * (KEP-4191): kubelet's eviction counts it apart from the images'. An exited container keeps its
   * layer until it is removed, so every container counts. The layers are under the root dir, on
   * the images' filesystem: kubelet, seeing one filesystem for both, does not treat them as split.
   */
  async writableLayers(): Promise<WritableLayersUsage> {
    const { config } = this.deps;
    const each = await Promise.all(
      selectContainers(this.deps.store, {}).map((c) =>
        this.reads.run(() => this.writableLayer(c.id)).catch(() => null),
      ),
    );
    let bytes = 0n;
    let inodes = 0n;
    for (const usage of each) {
      bytes += usage?.bytes ?? 0n;
      inodes += usage?.inodes ?? 0n;
    }
    return { timestampNs: nowNanos(), mountpoint: config.rootDir, bytes, inodes };
  }

  private writableLayer(id: string): Promise<DirectoryUsage> {
    return directoryUsage(join(containerDir(id, this.deps.config.rootDir), 'upper'));
  }

  private async statsOf(container: Container): Promise<ContainerStatsView> {
    const { config } = this.deps;
    const { spec } = container;
    const [cgroup, disk] = await Promise.all([
      hasProcess(container) ? this.deps.cgroups.readStats(container.cgroupsPath) : null,
      this.writableLayer(container.id).catch(() => null),
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
