import type { CgroupManager } from '../cgroups/index.js';
import type { Cni } from '../cni/index.js';
import type { BerthConfig } from '../config/types.js';
import type { LifecycleEvents } from '../events/lifecycle.js';
import type { HostFeatures } from '../host/features.js';
import type { Logger } from '../log.js';
import type { KeyedLock } from '../operation/lock.js';
import type { Store } from '../store/index.js';
import type { PodGate } from './gate.js';
import type { RuntimeHandlers } from '../runtime/index.js';
import type { SandboxTeardown } from './teardown.js';

/** The pod's containers, as Stop and Remove of their sandbox must handle them first. */
export interface PodContainers {
  stopAllInSandbox(sandboxId: string): Promise<void>;
  removeAllInSandbox(sandboxId: string): Promise<void>;
}

export interface SandboxServiceDeps {
  config: BerthConfig;
  store: Store;
  /** Names the infra's cgroup. */
  cgroups: CgroupManager;
  cni: Cni;
  runtimes: RuntimeHandlers;
  logger: Logger;
  infraRootfs: string;
  /** berthd's own oom_score_adj, the floor of the infra's (probed once at start-up). */
  host: Pick<HostFeatures, 'process'>;
  containers?: PodContainers;
  /** Shared with the container service: a pod being stopped or removed takes no new container. */
  pods: PodGate;
  /** Where runs, stops and removals are reported (GetContainerEvents). */
  events: LifecycleEvents;
  /** The one teardown of what RunPodSandbox makes, shared with start-up repair. */
  teardown: SandboxTeardown;
  /**
   * Test-only: RunPodSandbox stops before acting on the step of this name (after its journal entry
   * and undo are recorded) and waits forever, so a test can kill -9 the daemon mid-start.
   */
  pauseBeforeStep?: string;
}

/** What the parts of the sandbox service share. */
export interface SandboxContext {
  readonly deps: SandboxServiceDeps;
  /** One key per sandbox: its stops and removals never interleave. */
  readonly lock: KeyedLock;
  readonly teardown: SandboxTeardown;
}
