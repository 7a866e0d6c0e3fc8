import type { Duplex } from 'node:stream';
import type { PodResources, SandboxSpec } from '../model/sandbox.js';
import { KeyedLock } from '../operation/lock.js';
import type { SandboxServiceDeps } from './context.js';
import { InfraWatch } from './infra.js';
import { findSandbox } from './lookup.js';
import { PodPorts } from './ports.js';
import { SandboxRemoval } from './remove.js';
import { SandboxResize } from './resize.js';
import { SandboxRun } from './run.js';
import { SandboxStop } from './stop.js';
import type { SandboxFilter, SandboxVerboseInfo, SandboxView } from './types.js';
import { SandboxViews } from './views.js';

export type { SandboxServiceDeps } from './context.js';

/**
 * Pod sandboxes, in parts that change for different reasons: run, stop, remove, the views, the
 * infra check, and PortForward's way in. They share one deps object, one lock per sandbox and one teardown.
 */
export class SandboxService {
  private readonly runs: SandboxRun;
  private readonly stops: SandboxStop;
  private readonly removals: SandboxRemoval;
  private readonly views: SandboxViews;
  private readonly ports: PodPorts;
  private readonly resizes: SandboxResize;
  private readonly infras: InfraWatch;

  constructor(private readonly deps: SandboxServiceDeps) {
    const context = { deps, lock: new KeyedLock(), teardown: deps.teardown };
    this.runs = new SandboxRun(context);
    this.stops = new SandboxStop(context);
    this.removals = new SandboxRemoval(context, this.stops);
    this.views = new SandboxViews(deps.store);
    this.ports = new PodPorts(deps.store, deps.config.runtimeTimeoutMs);
    this.resizes = new SandboxResize(context);
    this.infras = new InfraWatch(context);
  }

  /**
   * Whether a pod run with handler `name` may have a user namespace of its own: the handler says so
   * when its probes did, and why not when they did not. An unknown handler says no; the run
   * refuses it by name.
   */
  userNamespacePods(name: string): { userNamespaces: boolean; reason?: string; minHostId: number } {
    const minHostId = this.deps.config.usernsMinHostId;
    const features = this.deps.runtimes.find(name)?.features;
    if (features === undefined)
      return { userNamespaces: false, reason: 'no such runtime handler', minHostId };
    const reason = features.off.userNamespaces;
    return reason === undefined
      ? { userNamespaces: true, minHostId }
      : { userNamespaces: false, reason, minHostId };
  }

  /** `resources`: what the pod asks for its cgroup as a whole; null when it asks nothing. */
  run(spec: SandboxSpec, resources: PodResources | null = null): Promise<string> {
    return this.runs.run(spec, resources);
  }

  /** UpdatePodSandboxResources: NotFound for an unknown pod. */
  updateResources(idOrPrefix: string, resources: PodResources): Promise<void> {
    return this.resizes.update(idOrPrefix, resources);
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

  /** PodSandboxStatus: kubelet asks of what it believes runs, so a dead infra is noticed right here. */
  async status(
    idOrPrefix: string,
    verbose: boolean,
  ): Promise<{ view: SandboxView; info?: SandboxVerboseInfo }> {
    await this.infras.check(findSandbox(this.deps.store, idOrPrefix, false));
    return this.views.status(idOrPrefix, verbose);
  }

  /** The pod as it is now, for an event's description. */
  view(idOrPrefix: string): SandboxView {
    return this.views.status(idOrPrefix, false).view;
  }

  /** The daemon's monitor tick: every running pod's infra is still the process recorded. */
  checkInfras(): Promise<void> {
    return this.infras.checkAll();
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
