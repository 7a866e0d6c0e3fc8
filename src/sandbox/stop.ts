import { sandboxChange } from '../events/lifecycle.js';
import type { Sandbox } from '../model/sandbox.js';
import { asStep } from '../operation/steps.js';
import { isRunning, waitForExit } from '../process/index.js';
import { allSettledOrThrow } from '../kit/settle.js';
import type { SandboxContext } from './context.js';
import { infraOf } from './infra.js';
import { findSandbox } from './lookup.js';

/** StopPodSandbox: the pod's containers, its infra and its network; the record stays, NOTREADY. */
export class SandboxStop {
  constructor(private readonly ctx: SandboxContext) {}

  /** Idempotent: an unknown sandbox has nothing left to stop. */
  async stop(idOrPrefix: string): Promise<void> {
    const found = findSandbox(this.ctx.deps.store, idOrPrefix, true);
    if (!found) return;
    const { id } = found;
    await this.ctx.deps.pods.close(id, () =>
      this.ctx.lock.with(id, async () => {
        // Read again: a Stop or Remove this one waited for may have changed or removed it.
        const sandbox = this.ctx.deps.store.sandboxes.get(id);
        if (sandbox) await this.locked(sandbox);
      }),
    );
  }

  /** Under the sandbox's lock, with its record as read under that lock. */
  async locked(sandbox: Sandbox): Promise<void> {
    const { sandboxes } = this.ctx.deps.store;
    const { id } = sandbox;
    // kubelet has normally stopped them, with their grace periods, before it gets here.
    await asStep('containers-stop', async () => this.ctx.deps.containers?.stopAllInSandbox(id));
    // The pod's containers are stopped, so nothing needs the network while the infra dies. A DEL
    // failure is thrown (kubelet retries Stop) and the record keeps saying the network is up.
    await allSettledOrThrow([
      (sandbox.infra ? this.stopInfra(sandbox) : Promise.resolve()).then(() => {
        sandboxes.markNotReady(id);
        if (sandbox.state !== 'NOTREADY') this.ctx.deps.events.publish(sandboxChange('STOPPED', id));
      }),
      this.ctx.teardown.releaseNetwork(sandbox),
    ]);
    await this.ctx.teardown.unmountForStop(sandbox);
  }

  private async stopInfra(sandbox: Sandbox): Promise<void> {
    const { config } = this.ctx.deps;
    const runtime = this.ctx.deps.runtimes.of(sandbox);
    const { id } = sandbox;
    await asStep('infra-stop', async () => {
      const state = await runtime.state(id);
      if (!state || state.status === 'stopped') return;
      // The infra as recorded where runc reports that pid (runc checked its start time too): a
      // later process given the pid is neither waited for nor taken for the infra.
      const recorded = infraOf(sandbox);
      const infra = recorded?.pid === state.pid ? recorded : state.pid;
      if (!(await isRunning(infra))) return;
      await runtime.kill(id, 'SIGTERM');
      if (await waitForExit(infra, config.stopGraceMs)) return;
      await runtime.kill(id, 'SIGKILL');
      if (!(await waitForExit(infra, 10_000))) throw new Error(`infra process ${state.pid} survived SIGKILL`);
    });
  }
}
