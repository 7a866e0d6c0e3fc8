import type { Duplex } from 'node:stream';
import type { SandboxSpec } from '../model/sandbox.js';
import { KeyedLock } from '../operation/lock.js';
import type { SandboxServiceDeps } from './context.js';
import { PodPorts } from './ports.js';
import { SandboxRemoval } from './remove.js';
import { SandboxRun } from './run.js';
import { SandboxStop } from './stop.js';
import type { SandboxFilter, SandboxVerboseInfo, SandboxView } from './types.js';
import { SandboxViews } from './views.js';

export type { SandboxServiceDeps } from './context.js';

/**
 * Pod sandboxes, in parts that change for different reasons: run, stop, remove, the views, and
 * PortForward's way in. They share one deps object, one lock per sandbox and one teardown.
 */
export class SandboxService {
  private readonly runs: SandboxRun;
  private readonly stops: SandboxStop;
  private readonly removals: SandboxRemoval;
  private readonly views: SandboxViews;
  private readonly ports: PodPorts;

  constructor(private readonly deps: SandboxServiceDeps) {
    const context = { deps, lock: new KeyedLock(), teardown: deps.teardown };
    this.runs = new SandboxRun(context);
    this.stops = new SandboxStop(context);
    this.removals = new SandboxRemoval(context, this.stops);
    this.views = new SandboxViews(deps.store);
    this.ports = new PodPorts(deps.store, deps.config.runtimeTimeoutMs);
  }

  /**
   * Whether a pod run with handler `name` may have a user namespace of its own: the handler says so
   * when its probes did. An unknown handler says no; the run refuses it by name.
   */
  userNamespacePods(name: string): boolean {
    return this.deps.runtimes.find(name)?.features.userNamespaces ?? false;
  }

  run(spec: SandboxSpec): Promise<string> {
    return this.runs.run(spec);
  }

  stop(idOrPrefix: string): Promise<void> {
    return this.stops.stop(idOrPrefix);
  }

  remove(idOrPrefix: string): Promise<void> {
    return this.removals.remove(idOrPrefix);
  }

  /** For the daemon's stop: resolves once the dirs of removed pods are deleted, or left to start-up. */
  filesRemoved(): Promise<void> {
    return this.removals.filesRemoved();
  }

  status(idOrPrefix: string, verbose: boolean): { view: SandboxView; info?: SandboxVerboseInfo } {
    return this.views.status(idOrPrefix, verbose);
  }

  list(filter: SandboxFilter): SandboxView[] {
    return this.views.list(filter);
  }

  readyId(idOrPrefix: string): string {
    return this.ports.readyId(idOrPrefix);
  }

  dialPort(idOrPrefix: string, port: number, signal: AbortSignal): Promise<Duplex> {
    return this.ports.dialPort(idOrPrefix, port, signal);
  }
}
