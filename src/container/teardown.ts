import type { BerthConfig } from '../config/types.js';
import { errorMessage } from '../errors.js';
import { run } from '../exec.js';
import { isRootfsMounted, removeRootfs, rootfsPath } from '../imagestore/rootfs.js';
import type { Logger } from '../log.js';
import type { Container } from '../model/container.js';
import type { ExitWatcher } from '../monitor/exits.js';
import type { RuntimeHandlers } from '../sandbox/runtimes.js';
import type { Store } from '../store/index.js';
import { runtimeOf } from './context.js';

/** CreateContainer's steps, in the order it takes them; its journal record names the last one begun. */
export const CREATE_STEPS = ['rootfs', 'spec', 'monitor'] as const;
export type CreateStep = (typeof CREATE_STEPS)[number];

export interface ContainerTeardownDeps {
  config: Pick<BerthConfig, 'rootDir'>;
  store: Store;
  runtimes: RuntimeHandlers;
  exits: ExitWatcher;
}

type Undo = (id: string) => Promise<void>;

/** Unmounting is a local syscall; it only takes long when the host is in trouble. */
const UNMOUNT_TIMEOUT_MS = 30_000;

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
    // The bundle is inside the container's dir, which the rootfs undo removes.
    spec: null,
    monitor: (id) => this.discardProcess(id),
  };

  constructor(private readonly deps: ContainerTeardownDeps) {}

  /** The overlay and the container's dir, bundle included. */
  removeFiles(id: string): Promise<void> {
    return removeRootfs(id, this.deps.config.rootDir);
  }

  /** runc's container, its conmon and the files they keep. */
  async discardProcess(id: string): Promise<void> {
    const container = this.deps.store.containers.get(id);
    // A leftover without a record may have been made by any handler; releasing an unknown id is a no-op.
    const handlers = container ? [runtimeOf(this.deps, container)] : this.deps.runtimes.all();
    for (const { conmon } of handlers) await conmon.release(id, container?.monitorPid ?? 0);
    await this.deps.exits.forget(id);
  }

  /**
   * What a container that exited no longer needs, let go at once as containerd deletes its task on
   * exit: runc's record (only its cgroup is left) and, once runc has made sure nothing runs in it,
   * the rootfs mount. The dir, bundle and monitor files stay for Status, logs and RemoveContainer,
   * whose removeFiles is then a plain delete. Best effort and idempotent: what fails here is left
   * to RemoveContainer, which undoes everything the record says may exist anyway.
   */
  async afterExit(container: Container, logger: Logger): Promise<void> {
    const { id } = container;
    try {
      await runtimeOf(this.deps, container).runc.delete(id);
      if (!(await isRootfsMounted(id, this.deps.config.rootDir))) return;
      await run('umount', [rootfsPath(id, this.deps.config.rootDir)], { timeoutMs: UNMOUNT_TIMEOUT_MS });
    } catch (err) {
      logger.warn({ container: id, err: errorMessage(err) }, 'releasing an exited container failed');
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
