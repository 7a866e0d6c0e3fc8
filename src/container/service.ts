import { KeyedLock } from '../operation/lock.js';
import type { ContainerContext, ContainerServiceDeps } from './context.js';
import { ContainerExec } from './exec.js';
import { ExitRecorder } from './exit-recorder.js';
import { ContainerLifecycle } from './lifecycle.js';
import { ContainerStatsReader } from './stats.js';
import { ContainerTeardown } from './teardown.js';
import { ContainerViews } from './views.js';

export type { ContainerServiceDeps } from './context.js';

/**
 * The containers of berth's pods, in parts that change for different reasons. They share one deps
 * object and one lock per container; the CRI edge, the streaming server and the daemon each take
 * the parts they serve.
 */
export class ContainerService {
  readonly lifecycle: ContainerLifecycle;
  readonly exec: ContainerExec;
  readonly stats: ContainerStatsReader;
  readonly views: ContainerViews;
  /** For the daemon: conmon's exit files, and the periodic check for dead monitors. */
  readonly exits: ExitRecorder;
  /** The deps and per-container lock the parts share, for operations written outside (checkpoint/). */
  readonly context: ContainerContext;

  constructor(deps: ContainerServiceDeps) {
    const context = { deps, lock: new KeyedLock() };
    const teardown = new ContainerTeardown(deps);
    this.exits = new ExitRecorder(context, teardown);
    this.lifecycle = new ContainerLifecycle(context, this.exits, teardown);
    this.exec = new ContainerExec(deps);
    this.stats = new ContainerStatsReader(deps);
    this.views = new ContainerViews(deps, this.exits);
    this.context = context;
  }
}
