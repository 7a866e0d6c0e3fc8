import type { CgroupManager } from '../cgroups/index.js';
import type { BerthConfig } from '../config/types.js';
import { errorMessage } from '../errors.js';
import { removeRootfs, unmountRootfs, unmountVolumes } from '../imagestore/rootfs.js';
import type { Logger } from '../log.js';
import type { Container } from '../model/container.js';
import { pauseIfAsked } from '../operation/pause.js';
import type { ExitWatcher, RuntimeHandler, RuntimeHandlers } from '../runtime/index.js';
import type { Store } from '../store/index.js';
import { runtimeOf } from './context.js';

/** CreateContainer's steps, in the order it takes them; its journal record names the last one begun. */
export const CREATE_STEPS = ['rootfs', 'spec', 'monitor'] as const;
export type CreateStep = (typeof CREATE_STEPS)[number];

/** How long processes left in a container's cgroup may take to die once killed. */
const CGROUP_KILL_WAIT_MS = 5_000;

/** The background part of RemoveContainer, as the test pause hook names it. */
export const REMOVE_FILES_STEP = 'remove-files';

export interface ContainerTeardownDeps {
  config: Pick<BerthConfig, 'rootDir' | 'stateDir'>;
  store: Store;
  cgroups: CgroupManager;
  runtimes: RuntimeHandlers;
  exits: ExitWatcher;
  /** Test-only, as ContainerServiceDeps.pauseBeforeStep: the background file removal waits forever. */
  pauseBeforeStep?: string;
}

/** A removed container whose files are still being deleted. */
interface PendingRemoval {
  sandboxId: string;
  done: Promise<void>;
  /** Set when the deletion failed: the next wait for the pod's removals tries again. */
  failed: boolean;
  deleteFiles: () => Promise<void>;
}

type Undo = (id: string) => Promise<void>;

/**
 * The undo of everything CreateContainer makes, one named action per step, each written once for
 * the three callers that need it: the undos of a failed CreateContainer, RemoveContainer, and the
 * start-up rollback of a CreateContainer a daemon exit interrupted. Each action reads the journal
 * record as it is NOW (the monitor's pid is recorded after its undo is registered) and is
 * idempotent, also with no record at all, so a teardown that failed halfway can simply run again,
 * and start-up can apply the same actions to leftovers that have no record.
 */
export class ContainerTeardown {
  private readonly undos: Readonly<Record<CreateStep, Undo | null>> = {
    rootfs: (id) => this.removeFiles(id),
    // The bundle and the staged volumes are inside the container's dir, which the rootfs undo
    // unmounts and removes.
    spec: null,
    monitor: (id) => this.discardProcess(id),
  };

  /** By container id; an entry goes once its files are gone. */
  private readonly pending = new Map<string, PendingRemoval>();

  constructor(private readonly deps: ContainerTeardownDeps) {}

  /** The overlay and the container's dir, bundle included. */
  removeFiles(id: string): Promise<void> {
    return removeRootfs(id, this.deps.config.rootDir);
  }

  /** runc's container, its conmon and the files they keep, and the container's cgroup. */
  async discardProcess(id: string): Promise<void> {
    const container = this.deps.store.containers.get(id);
    await this.discardMonitor(id, this.handlersOf(container), container?.monitorPid ?? 0);
    if (container) await this.discardCgroup(container.cgroupsPath);
  }

  /**
   * `runc delete` removes the cgroup of a container runc has a record of. A create killed at its
   * deadline may have left no record, but its init waiting in the cgroup in every hierarchy.
   */
  private async discardCgroup(cgroupsPath: string): Promise<void> {
    await this.deps.cgroups.removeContainerCgroup(cgroupsPath, CGROUP_KILL_WAIT_MS);
  }

  /** A leftover without a record may have been made by any handler; releasing an unknown id is a no-op. */
  private handlersOf(container: Container | undefined): RuntimeHandler[] {
    return container ? [runtimeOf(this.deps, container)] : this.deps.runtimes.all();
  }

  private async discardMonitor(id: string, handlers: RuntimeHandler[], monitorPid: number): Promise<void> {
    for (const handler of handlers) await handler.release(id, monitorPid);
    await this.deps.exits.forget(id);
  }

  /**
   * What a container that exited no longer needs, let go at once as containerd deletes its task on
   * exit: runc's record (only its cgroup is left) and, once runc has made sure nothing runs in it,
   * the rootfs mount and its staged idmapped volumes. The dir, bundle and monitor files stay for
   * Status, logs and RemoveContainer, whose removeFiles is then a plain delete. Called by the exit's
   * one owner (exit-recorder.ts, settle.ts). Best effort and idempotent (a second call costs a stat
   * and a mount table read): what fails here is left to RemoveContainer, which undoes everything
   * the record says may exist.
   */
  async afterExit(container: Container, logger: Logger): Promise<void> {
    const { id } = container;
    try {
      await runtimeOf(this.deps, container).delete(id);
      await unmountRootfs(id, this.deps.config.rootDir);
      await unmountVolumes(id, this.deps.config.rootDir);
    } catch (err) {
      logger.warn({ container: id, err: errorMessage(err) }, 'releasing an exited container failed');
    }
  }

  /**
   * RemoveContainer's teardown of a container with no process left: the record goes, then
   * everything else is released in the background (conmon if still there, runc's record, the
   * rootfs mount, the dir with the overlay's upper layer and the bundle, conmon's exit, persist and
   * socket files), as containerd's RemoveContainer costs little more than its record. A crash
   * before they are gone leaves them with no record, which start-up sweeps (recovery.ts).
   * `justStopped`: this removal killed it; its exit's owner released runc's record and the mount,
   * but its conmon may still be on its way out: it goes first, so that a Remove of a running
   * container leaves nothing running. The CRI log file is kubelet's and stays.
   */
  async remove(container: Container, justStopped: boolean, logger: Logger): Promise<void> {
    const { id, monitorPid, cgroupsPath } = container;
    // Taken while the record is there: the deletion runs on after it (and after the daemon's store closes).
    const handlers = this.handlersOf(container);
    if (justStopped && monitorPid > 0 && (await this.deps.runtimes.isMonitoring(id, monitorPid)))
      await this.discardMonitor(id, handlers, monitorPid);
    this.deps.store.containers.delete(id);
    const removal: PendingRemoval = {
      sandboxId: container.sandboxId,
      done: Promise.resolve(),
      failed: false,
      // The monitor's files go first: Conmon.release deletes its persist dir last, since start-up
      // finds runc's record and the socket link through it; the container dir is found by itself.
      // The conmon of an exited container exits by itself: it is only killed if it lingers.
      deleteFiles: async () => {
        await this.discardMonitor(id, handlers, monitorPid);
        // A container whose failed create could not take its cgroup back goes with it now.
        await this.discardCgroup(cgroupsPath);
        await this.removeFiles(id);
      },
    };
    this.pending.set(id, removal);
    removal.done = this.deleteInBackground(id, removal, logger);
  }

  /**
   * Resolves once the files of the removed containers of `sandboxId` (of every pod when omitted)
   * are gone, for RemovePodSandbox and the daemon's stop. A deletion that failed is tried again
   * here; if it fails again, this rejects, and start-up sweeps the files if nobody retries.
   */
  async filesRemoved(sandboxId?: string): Promise<void> {
    const waited = [...this.pending.entries()].filter(
      ([, removal]) => sandboxId === undefined || removal.sandboxId === sandboxId,
    );
    await Promise.all(
      waited.map(async ([id, removal]) => {
        await removal.done;
        if (!removal.failed) return;
        await removal.deleteFiles();
        if (this.pending.get(id) === removal) this.pending.delete(id);
      }),
    );
  }

  private async deleteInBackground(id: string, removal: PendingRemoval, logger: Logger): Promise<void> {
    try {
      await pauseIfAsked(
        {
          pauseBeforeStep: this.deps.pauseBeforeStep,
          stateDir: this.deps.config.stateDir,
          operation: 'RemoveContainer',
        },
        REMOVE_FILES_STEP,
        logger,
      );
      await removal.deleteFiles();
      this.pending.delete(id);
    } catch (err) {
      removal.failed = true;
      logger.warn(
        { container: id, err: errorMessage(err) },
        'removing the files of a removed container failed',
      );
    }
  }

  /** What takes back `step` of CreateContainer for container `id`; null when the step makes nothing of its own. */
  undoOf(step: CreateStep, id: string): (() => Promise<void>) | null {
    const undo = this.undos[step];
    return undo && (() => undo(id));
  }

  /**
   * The undo of every step the record says was begun, newest first, then the record itself. Stops
   * at the first failure and keeps the record, so that the next Remove (or start-up) retries.
   */
  async all(id: string): Promise<void> {
    const container = this.deps.store.containers.get(id);
    if (!container) return;
    for (const step of begunSteps(container).reverse()) await this.undos[step]?.(id);
    this.deps.store.containers.delete(id);
  }
}

/**
 * A record still in CREATING (or one whose create failed) names the last step begun: the ones after
 * it never acted. Any other step ('reserve' before the first, 'created' after the last) counts all,
 * the undos being harmless where there is nothing to undo.
 */
function begunSteps(container: Pick<Container, 'step'>): CreateStep[] {
  const last = CREATE_STEPS.findIndex((step) => step === container.step);
  return last < 0 ? [...CREATE_STEPS] : CREATE_STEPS.slice(0, last + 1);
}
