import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ImageService } from '../image/service.js';
import { containerDir } from '../imagestore/rootfs.js';
import type { Container } from '../model/container.js';
import { processIdentity } from '../process/identity.js';
import type { ContainerServiceDeps } from './context.js';
import type { ExitRecorder } from './exit-recorder.js';
import { currentContainer, findContainer, selectContainers, stateName } from './lookup.js';
import type { ContainerFilter, ContainerVerboseInfo, ContainerView } from './types.js';

type ImageName = ReturnType<ImageService['nameOf']>;

/** ContainerStatus and ListContainers: containers as CRI reports them. */
export class ContainerViews {
  constructor(
    private readonly deps: ContainerServiceDeps,
    private readonly recorder: ExitRecorder,
  ) {}

  async status(
    idOrPrefix: string,
    verbose: boolean,
  ): Promise<{ view: ContainerView; info?: ContainerVerboseInfo }> {
    // kubelet asks for the status of what it believes runs: a dead monitor is noticed right here.
    const found = findContainer(this.deps.store, idOrPrefix);
    await this.recorder.checkMonitorSoon(found);
    const container = currentContainer(this.deps.store, found.id);
    const view = { ...this.toView(container), user: await userOf(container) };
    if (!verbose) return { view };
    const runtimeSpec: unknown = await readFile(join(container.bundleDir, 'config.json'), 'utf8')
      .then((text) => JSON.parse(text) as unknown)
      .catch(() => null);
    return {
      view,
      info: {
        pid: container.pid,
        sandboxId: container.sandboxId,
        bundleDir: container.bundleDir,
        rootfs: join(containerDir(container.id, this.deps.config.rootDir), 'rootfs'),
        runtimeSpec,
      },
    };
  }

  list(filter: ContainerFilter): ContainerView[] {
    const images = new Map<string, ImageName>();
    return selectContainers(this.deps.store, filter).map((container) => this.toView(container, images));
  }

  /** `images` memoises image names across one listing: containers share a few images. */
  private toView(container: Container, images?: Map<string, ImageName>): ContainerView {
    const { spec } = container;
    let image = images?.get(container.imageId);
    if (!image) {
      image = this.deps.images.nameOf(container.imageId);
      images?.set(container.imageId, image);
    }
    return {
      id: container.id,
      podSandboxId: container.sandboxId,
      metadata: spec.metadata,
      image: spec.userSpecifiedImage || image.firstTag || spec.image,
      userSpecifiedImage: spec.userSpecifiedImage,
      imageRef: image.ref,
      imageId: container.imageId,
      state: stateName(container),
      createdAt: container.createdAt,
      startedAt: container.startedAt,
      finishedAt: container.finishedAt,
      exitCode: container.exitCode,
      reason: container.reason,
      message: container.message,
      labels: spec.labels,
      annotations: spec.annotations,
      mounts: spec.mounts,
      logPath: container.logPath,
      resources: spec.resources,
      user: specUser(container),
      pid: container.pid,
    };
  }
}

/**
 * What kubelet puts in the pod's status as the container's user: a running container's process's
 * own ids (it may have changed its groups since the start); any other, and one whose process cannot
 * be read, the user its spec gave it (what containerd reports for every container).
 */
async function userOf(container: Container): Promise<ContainerView['user']> {
  const live = container.state === 'RUNNING' ? await processIdentity(container.pid) : null;
  if (!live) return specUser(container);
  return { uid: live.uid, gid: live.gid, supplementalGroups: live.groups };
}

function specUser({ user }: Container): ContainerView['user'] {
  return { uid: user?.uid ?? 0, gid: user?.gid ?? 0, supplementalGroups: user?.additionalGids ?? [] };
}
