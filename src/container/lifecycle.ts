import { FailedPreconditionError, StepError, errorMessage } from '../errors.js';
import { containerChange } from '../events/lifecycle.js';
import type { Container, ContainerResources, ContainerSpec } from '../model/container.js';
import { linuxResources } from '../oci/container.js';
import { isRunning } from '../process/index.js';
import { findSandbox } from '../sandbox/lookup.js';
import { nowNanos } from '../time.js';
import { runtimeOf, withCurrent, type ContainerContext } from './context.js';
import { ContainerCreation } from './create.js';
import type { ExitRecorder } from './exit-recorder.js';
import {
  currentContainer,
  findContainer,
  findContainerIfAny,
  findRunning,
  hasProcess,
  stateWord,
} from './lookup.js';
import { supportedResources } from './prepare.js';
import type { ContainerTeardown } from './teardown.js';
import { timerMs } from './timer.js';

/** After SIGKILL a process is gone within milliseconds unless the kernel is stuck (D state). */
const KILL_WAIT_MS = 10_000;
/** Without a conmon nobody writes an exit file: look at the process itself soon. */
const UNMONITORED_KILL_WAIT_MS = 1_000;

/** Create, start, stop, remove, and the changes a running container takes (resources, log file). */
export class ContainerLifecycle {
  private readonly creation: ContainerCreation;

  constructor(
    private readonly ctx: ContainerContext,
    private readonly recorder: ExitRecorder,
    private readonly teardown: ContainerTeardown,
  ) {
    this.creation = new ContainerCreation(ctx.deps, teardown);
  }

  async create(podSandboxId: string, spec: ContainerSpec): Promise<string> {
    // Read once: the gate runs inPod at once, in this same turn, so no change can come between.
    const sandbox = findSandbox(this.ctx.deps.store, podSandboxId, false);
    return this.ctx.deps.pods.enter(sandbox.id, () => this.creation.inPod(sandbox, spec));
  }

  async start(idOrPrefix: string): Promise<void> {
    const found = findContainer(this.ctx.deps.store, idOrPrefix);
    await this.ctx.deps.pods.enter(found.sandboxId, () => this.startInPod(found.id));
  }

  private async startInPod(id: string): Promise<void> {
    const { store, logger, exits, events } = this.ctx.deps;
    await this.ctx.lock.with(id, async () => {
      const container = currentContainer(store, id);
      const { runc } = runtimeOf(this.ctx.deps, container);
      if (container.state !== 'CREATED') {
        throw new FailedPreconditionError(`container ${id} is ${stateWord(container)}, not created`);
      }
      const startedAt = nowNanos();
      try {
        await runc.start(id);
      } catch (err) {
        // A start that went through before an error (or a retry after a crash) is a start.
        if ((await runc.state(id).catch(() => null))?.status === 'running') {
          events.publish(containerChange('STARTED', store.containers.markRunning(id, startedAt)));
          return;
        }
        const failed = store.containers.startFailed(id, startedAt, {
          exitCode: 128,
          reason: 'StartError',
          message: errorMessage(err),
          finishedAt: nowNanos(),
        });
        // It is exited now, as kubelet's next look at the pod must see.
        events.publish(containerChange('STOPPED', failed));
        throw new StepError('start', err);
      }
      events.publish(containerChange('STARTED', store.containers.markRunning(id, startedAt)));
      logger.info({ container: id }, 'container started');
    });
    // An exit that raced the start waited for the lock; make sure it is not lost.
    const exited = await exits.read(id);
    if (exited) await this.recorder.onExit(exited);
  }

  /**
   * Idempotent: stopping an exited container is a no-op. timeoutSeconds 0 kills at once. Returns
   * once what the exited container no longer needs is released, as containerd's StopContainer
   * returns once its task is deleted: RemoveContainer then only deletes.
   */
  async stop(idOrPrefix: string, timeoutSeconds: number): Promise<void> {
    const found = findContainer(this.ctx.deps.store, idOrPrefix);
    await this.ctx.lock.with(found.id, async () => {
      await this.stopLocked(found.id, timeoutSeconds);
      const stopped = this.ctx.deps.store.containers.get(found.id);
      if (stopped?.state === 'EXITED') await this.teardown.afterExit(stopped, this.ctx.deps.logger);
    });
  }

  private async stopLocked(id: string, timeoutSeconds: number): Promise<void> {
    const { store, exits, logger, events } = this.ctx.deps;
    const container = currentContainer(store, id);
    if (container.state === 'EXITED' || container.state === 'CREATING') return;
    const { runc } = runtimeOf(this.ctx.deps, container);
    const already = await exits.read(id);
    if (already) {
      this.recorder.apply(already);
      return;
    }
    if (container.state === 'RUNNING' && timeoutSeconds > 0) {
      await runc.kill(id, this.stopSignal(container));
      const exited = await exits.wait(id, timerMs(timeoutSeconds));
      if (exited) {
        this.recorder.apply(exited);
        return;
      }
      logger.info({ container: id, timeoutSeconds }, 'stop timeout expired: SIGKILL');
    }
    await runc.kill(id, 'SIGKILL', true);
    const monitored = container.monitorPid > 0 && (await isRunning(container.monitorPid));
    const killed = await exits.wait(id, monitored ? KILL_WAIT_MS : UNMONITORED_KILL_WAIT_MS);
    if (killed) {
      this.recorder.apply(killed);
      return;
    }
    // No exit file: its conmon is gone (killed, or lost in a crash). The process' fate is known,
    // though: it was SIGKILLed; only the monitor's record of it is missing.
    const state = await runc.state(id);
    const alive = state !== null && state.status !== 'stopped' && (await isRunning(state.pid));
    if (alive) throw new StepError('stop', new Error(`container ${id} did not exit after SIGKILL`));
    const exited = store.containers.markExited(id, {
      exitCode: 137,
      reason: 'Error',
      message: 'killed by StopContainer; its monitor was gone, so the exit was not recorded by conmon',
      finishedAt: nowNanos(),
    });
    events.publish(containerChange('STOPPED', exited));
  }

  /**
   * Idempotent: an unknown id is success. A running container is killed first. Returns once the
   * record is gone; its files are deleted in the background (teardown.ts's remove).
   */
  async remove(idOrPrefix: string): Promise<void> {
    const { store, logger } = this.ctx.deps;
    const found = findContainerIfAny(store, idOrPrefix);
    if (!found) return;
    await withCurrent(this.ctx, found.id, async (container) => {
      const running = hasProcess(container);
      if (running) await this.stopLocked(container.id, 0);
      await this.teardown.remove(
        running ? currentContainer(store, container.id) : container,
        running,
        logger,
      );
      // As containerd: sent once the container is gone, so the pod's statuses no longer list it.
      this.ctx.deps.events.publish(containerChange('DELETED', container));
      logger.info({ container: container.id }, 'container removed');
    });
  }

  /**
   * Stops every container of a pod, for StopPodSandbox: kubelet already gave them their grace.
   * Called with the pod's gate closed: no create is under way, so none is CREATING.
   */
  async stopAllInSandbox(sandboxId: string): Promise<void> {
    // Their exits are released in the background (ExitRecorder.onExit): the pod's stop need not wait.
    await Promise.all(
      this.createdIn(sandboxId).map((container) =>
        withCurrent(this.ctx, container.id, (current) => this.stopLocked(current.id, 0)),
      ),
    );
  }

  /** Returns once their files are gone too, also those of containers removed before: the pod's go next. */
  async removeAllInSandbox(sandboxId: string): Promise<void> {
    await Promise.all(this.createdIn(sandboxId).map((container) => this.remove(container.id)));
    await this.teardown.filesRemoved(sandboxId);
  }

  /** For the daemon's stop: the files of removed containers are gone, or left to start-up, when it returns. */
  async filesRemoved(): Promise<void> {
    await this.teardown.filesRemoved().catch((err: unknown) => {
      this.ctx.deps.logger.warn({ err: errorMessage(err) }, 'files of removed containers left for start-up');
    });
  }

  async updateResources(idOrPrefix: string, resources: ContainerResources): Promise<void> {
    const { store } = this.ctx.deps;
    const found = findContainer(store, idOrPrefix);
    await this.ctx.lock.with(found.id, async () => {
      const container = currentContainer(store, found.id);
      if (!hasProcess(container)) {
        throw new FailedPreconditionError(
          `container ${container.id} is ${stateWord(container)}: nothing to update`,
        );
      }
      await runtimeOf(this.ctx.deps, container).runc.update(
        container.id,
        linuxResources(await supportedResources(resources, 'linux')),
      );
      store.containers.updateResources(container.id, resources);
    });
  }

  /** kubelet renamed the log file (rotation); conmon reopens the path. */
  async reopenLog(idOrPrefix: string): Promise<void> {
    const container = findRunning(this.ctx.deps.store, idOrPrefix);
    if (container.logPath === '') return;
    await runtimeOf(this.ctx.deps, container).conmon.reopenLog(container.bundleDir, container.logPath);
  }

  private createdIn(sandboxId: string): Container[] {
    return this.ctx.deps.store.containers
      .listBySandbox(sandboxId)
      .filter((container) => container.state !== 'CREATING');
  }

  private stopSignal(container: Container): string {
    const image = this.ctx.deps.store.images.getImage(container.imageId);
    if (!image) return 'SIGTERM';
    return image.config.config?.StopSignal || 'SIGTERM';
  }
}
