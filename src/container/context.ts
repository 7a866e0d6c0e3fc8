import type { BerthConfig } from '../config/types.js';
import type { ImageService } from '../image/service.js';
import type { Logger } from '../log.js';
import type { Conmon } from '../monitor/conmon.js';
import type { ExitWatcher } from '../monitor/exits.js';
import type { Runc } from '../oci/runc.js';
import type { KeyedLock } from '../operation/lock.js';
import type { PodGate } from '../sandbox/gate.js';
import type { Store } from '../store/index.js';

export interface ContainerServiceDeps {
  config: BerthConfig;
  store: Store;
  runc: Runc;
  conmon: Conmon;
  exits: ExitWatcher;
  images: ImageService;
  logger: Logger;
  /** Orders container operations against StopPodSandbox and RemovePodSandbox of their pod. */
  pods: PodGate;
  /** Test-only, as SandboxServiceDeps.pauseBeforeStep: CreateContainer waits forever before this step. */
  pauseBeforeStep?: string;
}

/** What the parts of the container service share. */
export interface ContainerContext {
  readonly deps: ContainerServiceDeps;
  /**
   * One key per container: its exits, starts, stops, removes and updates never interleave, whichever
   * part of the service they come through.
   */
  readonly lock: KeyedLock;
}
