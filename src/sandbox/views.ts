import type { Sandbox } from '../model/sandbox.js';
import { matchesLabels } from '../operation/lookup.js';
import type { Store } from '../store/index.js';
import { findSandbox } from './lookup.js';
import type { SandboxFilter, SandboxVerboseInfo, SandboxView } from './types.js';

/** PodSandboxStatus and ListPodSandbox: pods as CRI reports them. */
export class SandboxViews {
  constructor(private readonly store: Store) {}

  status(idOrPrefix: string, verbose: boolean): { view: SandboxView; info?: SandboxVerboseInfo } {
    const sandbox = findSandbox(this.store, idOrPrefix, false);
    const view = toView(sandbox);
    if (!verbose) return { view };
    return {
      view,
      info: {
        sandboxKey: sandbox.netnsPath,
        // 0 for a pod without infra: no process holds its namespaces.
        pid: sandbox.pid,
        infraStartTime: sandbox.infraStartTime,
        reason: sandbox.reason,
        hostNetwork: sandbox.hostNetwork,
        networkState: sandbox.networkState,
        cniResult: sandbox.cniResults,
        sandboxDir: sandbox.sandboxDir,
        cgroupParent: sandbox.cgroupParent,
        podCgroup: sandbox.podCgroup,
        resources: sandbox.resources,
      },
    };
  }

  list(filter: SandboxFilter): SandboxView[] {
    const { sandboxes } = this.store;
    const found = filter.id ? sandboxes.findByIdPrefix(filter.id) : sandboxes.list();
    return found
      .filter((sandbox) => sandbox.state !== 'CREATING')
      .map(toView)
      .filter((view) => !filter.state || view.state === filter.state)
      .filter((view) => matchesLabels(view.labels, filter.labelSelector));
  }
}

function toView(sandbox: Sandbox): SandboxView {
  const { spec } = sandbox;
  return {
    id: sandbox.id,
    metadata: spec.metadata,
    state: sandbox.state === 'READY' ? 'SANDBOX_READY' : 'SANDBOX_NOTREADY',
    createdAt: sandbox.createdAt,
    ip: sandbox.ip,
    additionalIps: sandbox.additionalIps,
    namespaces: spec.namespaces,
    userNamespace: spec.userNamespace,
    labels: spec.labels,
    annotations: spec.annotations,
    runtimeHandler: sandbox.runtimeHandler,
  };
}
