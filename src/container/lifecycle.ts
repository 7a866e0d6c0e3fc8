import { FailedPreconditionError, StepError, errorMessage } from '../errors.js';
import { containerChange } from '../events/lifecycle.js';
import type {
  Container,
  ContainerResources,
  ContainerSpec,
  ContainerUserNamespace,
} from '../model/container.js';
import { linuxResources } from '../oci/container.js';
import { isRunning } from '../process/index.js';
import { findSandbox } from '../sandbox/lookup.js';
import { settledWithin } from '../kit/deadline.js';
import { nowNanos } from '../time.js';
import { runtimeOf, withCurrent, type ContainerContext } from './context.js';
import { ContainerCreation } from './create.js';
import { restoreProcess } from './restore.js';
import { RestoredCredentialsError } from './restored-credentials.js';
import type { MonitorCreated } from '../runtime/index.js';
import type { ExitRecorder } from './exit-recorder.js';
import {
  currentContainer,
  findContainer,
  findContainerIfAny,
  findRunning,
  hasProcess,
  stateWord,
} from './lookup.js';
import type { ContainerTeardown } from './teardown.js';
import { timerMs } from './timer.js';

/** After SIGKILL a process is gone within milliseconds unless the kernel is stuck (D state). */
const KILL_WAIT_MS = 10_000;
/** Without a conmon nobody writes an exit file: look at the process itself soon. */
const UNMONITORED_KILL_WAIT_MS = 1_000;

/** What a stop signalled: the end it waits for, and whether a conmon is there to report it. */
interface Signalled {
  ended: Promise<void>;
  /** The stop signal was sent, not SIGKILL: the wait is the grace. */
  graced: boolean;
  monitored: boolean;
}

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

  async create(
    podSandboxId: string,
    spec: ContainerSpec,
    userns: ContainerUserNamespace = 'unset',
  ): Promise<string> {
    // Read once: the gate runs inPod at once, in this same turn, so no change can come between.
    const sandbox = findSandbox(this.ctx.deps.store, podSandboxId, false);
    return this.ctx.deps.pods.enter(sandbox.id, () => this.creation.inPod(sandbox, spec, userns));
  }

  async start(idOrPrefix: string): Promise<void> {
    const found = findContainer(this.ctx.deps.store, idOrPrefix);
    await this.ctx.deps.pods.enter(found.sandboxId, () => this.startInPod(found.id));
  }

  private async startInPod(id: string): Promise<void> {
    const { store, logger, exits, events } = this.ctx.deps;
    await this.ctx.lock.with(id, async () => {
      const container = currentContainer(store, id);
      const runtime = runtimeOf(this.ctx.deps, container);
      if (container.state !== 'CREATED') {
        throw new FailedPreconditionError(`container ${id} is ${stateWord(container)}, not created`);
      }
      const startedAt = nowNanos();
      let restored: MonitorCreated | null = null;
      try {
        if (container.restore) {
          const sandbox = findSandbox(store, container.sandboxId, false);
          restored = await restoreProcess(this.ctx.deps, runtime, container, sandbox, logger);
        } else await runtime.start(id);
      } catch (err) {
        // A start that went through before an error (or a retry after a crash) is a start; a
        // restore refused for its processes' ids is not, whatever outlived its kill.
        const refused = err instanceof RestoredCredentialsError;
        if (!refused && (await runtime.state(id).catch(() => null))?.status === 'running') {
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
        throw new StepError(container.restore ? 'restore' : 'start', err);
      }
      const running = restored
        ? store.containers.markRestored(id, startedAt, restored)
        : store.containers.markRunning(id, startedAt);
      events.publish(containerChange('STARTED', running));
      logger.info({ container: id }, 'container started');
    });
    // An exit that raced the start waited for the lock; make sure it is not lost.
    const exited = await exits.read(id);
    if (exited) await this.recorder.onExit(exited);
  }

  /**
   * Idempotent: stopping an exited container is a no-op, and so is stopping one that is gone or
   * never was (the CRI: "must not return an error if the container has already been stopped";
   * kubelet retries a stop whose answer it lost after a removal went through). timeoutSeconds 0
   * kills at once. Returns once the exit is recorded and what the exited container no longer needs
   * is released, as containerd's StopContainer returns once its task is deleted: RemoveContainer
   * then only deletes.
   */
  async stop(idOrPrefix: string, timeoutSeconds: number): Promise<void> {
    const found = findContainerIfAny(this.ctx.deps.store, idOrPrefix);
    if (!found) return;
    await this.end(found.id, timeoutSeconds);
  }

  /**
   * Signals container `id` and waits for its exit's one owner, the exit handler (ExitRecorder), to
   * record the exit and release what it held; StopContainer itself records nothing. The lock is
   * held only to signal, for the handler takes it to record. Each wait is bounded: the grace, then
   * KILL_WAIT_MS after SIGKILL, after which the handler is asked to settle the exit from what is
   * known (its conmon died), or the stop fails, the container still running and still RUNNING.
   * Returns whether the container had a process to stop.
   */
  private async end(id: string, timeoutSeconds: number): Promise<boolean> {
    const done = this.recorder.stopping(id);
    try {
      return await this.signalAndWait(id, timeoutSeconds);
    } finally {
      done();
    }
  }

  private async signalAndWait(id: string, timeoutSeconds: number): Promise<boolean> {
    let sent = await this.signal(id, timeoutSeconds > 0);
    if (!sent) return false;
    if (sent.graced) {
      if (await settledWithin(sent.ended, timerMs(timeoutSeconds))) return true;
      this.ctx.deps.logger.info({ container: id, timeoutSeconds }, 'stop timeout expired: SIGKILL');
      sent = await this.signal(id, false);
      if (!sent) return true;
    }
    if (await settledWithin(sent.ended, sent.monitored ? KILL_WAIT_MS : UNMONITORED_KILL_WAIT_MS))
      return true;
    await this.recorder.afterKill(id);
    return true;
  }

  /**
   * Under the container's lock: the image's stop signal when `graceful` and it runs, else SIGKILL
   * to all its processes (a created container's init included). Null when it has no process.
   */
  private signal(id: string, graceful: boolean): Promise<Signalled | null> {
    const { store, exits } = this.ctx.deps;
    return this.ctx.lock.with(id, async () => {
      const container = store.containers.get(id);
      if (!container || !hasProcess(container)) return null;
      const ended = this.recorder.endOf(id);
      // Exited already: its handler is on the way, there is nothing left to signal.
      if (await exits.read(id)) return { ended, graced: false, monitored: true };
      const runtime = runtimeOf(this.ctx.deps, container);
      if (graceful && container.state === 'RUNNING') {
        await runtime.kill(id, this.stopSignal(container));
        return { ended, graced: true, monitored: true };
      }
      await runtime.kill(id, 'SIGKILL', { all: true });
      const monitored = container.monitorPid > 0 && (await isRunning(container.monitorPid));
      return { ended, graced: false, monitored };
    });
  }

  /**
   * Idempotent: an unknown id is success. A running container is killed first, as StopContainer
   * with no grace does. Returns once the record is gone; its files are deleted in the background
   * (teardown.ts's remove).
   */
  async remove(idOrPrefix: string): Promise<void> {
    const { store, logger } = this.ctx.deps;
    const found = findContainerIfAny(store, idOrPrefix);
    if (!found) return;
    const killed = await this.end(found.id, 0);
    await withCurrent(this.ctx, found.id, async (container) => {
      // Only a create finishing between the two looks gives it a process again.
      if (hasProcess(container)) {
        throw new FailedPreconditionError(`container ${container.id} was created during its removal`);
      }
      await this.teardown.remove(container, killed, logger);
      // As containerd: sent once the container is gone, so the pod's statuses no longer list it.
      this.ctx.deps.events.publish(containerChange('DELETED', container));
      logger.info({ container: container.id }, 'container removed');
    });
  }

  /**
   * Stops every container of a pod, for StopPodSandbox: kubelet already gave them their grace.
   * Called with the pod's gate closed: no create is under way, so none is CREATING. Returns once
   * their exits are recorded and released, as StopContainer does.
   */
  async stopAllInSandbox(sandboxId: string): Promise<void> {
    await Promise.all(this.createdIn(sandboxId).map((container) => this.end(container.id, 0)));
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
      await runtimeOf(this.ctx.deps, container).updateResources(
        container.id,
        linuxResources(this.ctx.deps.cgroups.supportedResources(resources, 'linux')),
      );
      store.containers.updateResources(container.id, resources);
    });
  }

  /** kubelet renamed the log file (rotation); conmon reopens the path. */
  async reopenLog(idOrPrefix: string): Promise<void> {
    const container = findRunning(this.ctx.deps.store, idOrPrefix);
    if (container.logPath === '') return;
    await runtimeOf(this.ctx.deps, container).reopenLog(container, container.logPath);
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
