import type { CgroupManager } from '../cgroups/index.js';
import { FailedPreconditionError } from '../errors.js';
import type { PodResources, Sandbox } from '../model/sandbox.js';
import type { SandboxContext } from './context.js';
import { findSandbox } from './lookup.js';
import { podLimits } from './pod-limits.js';

/**
 * UpdatePodSandboxResources: the pod's cgroup set to the new limits where berth made it, then the
 * limits recorded. A pod with a cgroup_parent has kubelet's cgroup, which kubelet sizes itself:
 * berth only records what it was told.
 */
export class SandboxResize {
  constructor(private readonly ctx: SandboxContext) {}

  async update(idOrPrefix: string, asked: PodResources): Promise<void> {
    const { id } = findSandbox(this.ctx.deps.store, idOrPrefix, false);
    // Under the pod's lock: a removal running now has the cgroup gone when this looks again.
    await this.ctx.lock.with(id, async () => {
      const sandbox = findSandbox(this.ctx.deps.store, id, false);
      // Its cgroup may not be made yet, and ListPodSandbox does not show it: kubelet has no id for it.
      if (sandbox.state === 'CREATING')
        throw new FailedPreconditionError(`pod sandbox ${id} is being created`);
      const { cgroups, config } = this.ctx.deps;
      checkApplicable(cgroups, sandbox, asked, '');
      if (sandbox.podCgroup !== '') {
        const { conversion } = this.ctx.deps.runtimes.of(sandbox).features.cpuWeight;
        await cgroups.updatePodCgroup(
          sandbox.podCgroup,
          podLimits(asked, conversion),
          config.runtimeTimeoutMs,
        );
      }
      this.ctx.deps.store.sandboxes.resourcesUpdated(id, asked);
    });
  }
}

/**
 * Refuses what berth could not set on the pod's cgroup, naming the field (see
 * CgroupManager.supportedResources; the hugepage limits it drops are not set on a pod's cgroup
 * anyway). A pod whose cgroup is kubelet's is not checked: nothing is set. `prefix` leads the names.
 */
export function checkApplicable(
  cgroups: CgroupManager,
  sandbox: Pick<Sandbox, 'podCgroup'>,
  asked: PodResources | null,
  prefix: string,
): void {
  if (asked === null || sandbox.podCgroup === '') return;
  if (asked.resources) cgroups.supportedResources(asked.resources, `${prefix}resources`);
  if (asked.overhead) cgroups.supportedResources(asked.overhead, `${prefix}overhead`);
}
