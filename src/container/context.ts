import type { CdiRegistry } from '../cdi/registry.js';
import type { CgroupManager } from '../cgroups/index.js';
import type { BerthConfig } from '../config/types.js';
import type { LifecycleEvents } from '../events/lifecycle.js';
import type { HostFeatures } from '../host/features.js';
import type { ImageService } from '../image/service.js';
import type { Logger } from '../log.js';
import type { Container } from '../model/container.js';
import type { KeyedLock } from '../operation/lock.js';
import type { PodGate } from '../sandbox/gate.js';
import type { ExitWatcher, RuntimeHandler, RuntimeHandlers } from '../runtime/index.js';
import type { Store } from '../store/index.js';

export interface ContainerServiceDeps {
  config: BerthConfig;
  store: Store;
  runtimes: RuntimeHandlers;
  exits: ExitWatcher;
  images: ImageService;
  /** The configured driver's cgroups: paths, readers, what resources the host can apply. */
  cgroups: CgroupManager;
  /** What the host can do, probed once at start-up. */
  host: HostFeatures;
  /** The node's CDI specs, for containers that ask for CDI devices. */
  cdi: CdiRegistry;
  logger: Logger;
  /** Where creates, starts, exits and removals are reported (GetContainerEvents). */
  events: LifecycleEvents;
  /** Orders container operations against StopPodSandbox and RemovePodSandbox of their pod. */
  pods: PodGate;
  /** Test-only, as SandboxServiceDeps.pauseBeforeStep: CreateContainer waits forever before this step. */
  pauseBeforeStep?: string;
}

/** What the parts of the container service share. */
export interface ContainerContext {
  readonly deps: ContainerServiceDeps;
  /**
   * One key per container: the recording of its exit, its start, a stop's signal, its removal and
   * its updates never interleave, whichever part of the service they come through. A stop waits for
   * the exit's record outside it, for the exit handler takes it to record.
   */
  readonly lock: KeyedLock;
}

/**
 * A container runs under its pod's runtime handler. Container rows are removed before their pod's,
 * so the pod is there; without it the default handler is the only one a container could have.
 */
export function runtimeOf(
  deps: Pick<ContainerServiceDeps, 'store' | 'runtimes'>,
  container: Pick<Container, 'sandboxId'>,
): RuntimeHandler {
  const pod = deps.store.sandboxes.get(container.sandboxId);
  return pod ? deps.runtimes.of(pod) : deps.runtimes.defaultHandler;
}

/**
 * Runs `fn` under container `id`'s lock with its record as it is once the lock is held, or does
 * nothing if the record is gone by then. Whoever found the container before waiting for its lock
 * (RemoveContainer, a pod's Stop and Remove going through their containers, the monitor check)
 * may find it removed by the call that held the lock: for them that is the end state they were
 * after, not a missing container.
 */
export function withCurrent(
  ctx: ContainerContext,
  id: string,
  fn: (container: Container) => Promise<void>,
): Promise<void> {
  return ctx.lock.with(id, async () => {
    const container = ctx.deps.store.containers.get(id);
    if (container) await fn(container);
  });
}
