import { sandboxChange } from '../events/lifecycle.js';
import { asStep } from '../operation/steps.js';
import type { SandboxContext } from './context.js';
import { findSandbox } from './lookup.js';
import type { SandboxStop } from './stop.js';
import { networkMayBeAttached } from './teardown.js';

/** RemovePodSandbox: a Stop if one is still due, the pod's containers, then everything the run made. */
export class SandboxRemoval {
  constructor(
    private readonly ctx: SandboxContext,
    private readonly stopper: SandboxStop,
  ) {}

  /** Idempotent: an unknown id is success. */
  async remove(idOrPrefix: string): Promise<void> {
    const found = findSandbox(this.ctx.deps.store, idOrPrefix, true);
    if (!found) return;
    await this.ctx.deps.pods.close(found.id, () => this.removeClosed(found.id));
  }

  private async removeClosed(id: string): Promise<void> {
    await this.ctx.lock.with(id, async () => {
      const sandbox = this.ctx.deps.store.sandboxes.get(id);
      if (!sandbox) return;
      // After a Stop that got as far as the network, only its unmounts can be left, and the teardown
      // below makes each of them anyway (idempotent syscalls): no read of the mount table to find
      // out, which waited behind the thread pool's other work for 15 ms while pods came and went.
      if (sandbox.state !== 'NOTREADY' || networkMayBeAttached(sandbox)) await this.stopper.locked(sandbox);
      await asStep('containers-remove', async () => this.ctx.deps.containers?.removeAllInSandbox(id));
      // Described while its status can still be built; sent only once it is really gone.
      const deleted = this.ctx.deps.events.capture(sandboxChange('DELETED', id));
      await this.ctx.teardown.all(id);
      deleted();
      this.ctx.deps.logger.info({ sandbox: id }, 'pod sandbox removed');
    });
  }

  /** For the daemon's stop: resolves once the dirs of removed pods are deleted, or left to start-up. */
  filesRemoved(): Promise<void> {
    return this.ctx.teardown.filesRemoved();
  }
}
