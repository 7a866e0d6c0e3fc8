/**
 * The one owner of an infra process's end. The infra is runc's init, detached: not berthd's child
 * and under no conmon, so nothing reports its exit. berth checks it instead, always by the
 * identity recorded when runc created it (pid and start time, src/process): on the daemon's
 * monitor tick beside the containers' monitors, when PodSandboxStatus asks, and before a container
 * joins its namespaces. Found gone, the pod turns NOTREADY with the reason and the STOPPED event a
 * StopPodSandbox sends is published, so kubelet stops it and runs a new one.
 */
import { errorMessage, FailedPreconditionError } from '../errors.js';
import { sandboxChange } from '../events/lifecycle.js';
import type { Sandbox } from '../model/sandbox.js';
import { isRunning, startTimeOf, type ProcessRef } from '../process/index.js';
import type { SandboxContext } from './context.js';

/** The infra as recorded; null without one, or while its start time is not known yet. */
export function infraOf(sandbox: Pick<Sandbox, 'infra' | 'pid' | 'infraStartTime'>): ProcessRef | null {
  if (!sandbox.infra || sandbox.pid <= 0 || sandbox.infraStartTime <= 0) return null;
  return { pid: sandbox.pid, startTime: sandbox.infraStartTime };
}

/** Whether the process recorded as the pod's infra still runs; a later one given its pid does not count. */
export async function infraRunning(
  sandbox: Pick<Sandbox, 'infra' | 'pid' | 'infraStartTime'>,
): Promise<boolean> {
  const infra = infraOf(sandbox);
  return infra !== null && (await isRunning(infra));
}

/**
 * For what joins the infra's namespaces through /proc/<pid>/ns: throws FAILED_PRECONDITION, naming
 * the infra, unless the process there is the one recorded. A pod without infra passes.
 */
export async function requireInfraRunning(sandbox: Sandbox): Promise<void> {
  if (!sandbox.infra || (await infraRunning(sandbox))) return;
  const known = sandbox.infraStartTime > 0 ? '' : ' (its start time is not known yet)';
  throw new FailedPreconditionError(
    `pod sandbox ${sandbox.id}: its infra process (pid ${sandbox.pid})${known} is not running`,
  );
}

/**
 * Why an infra that is not running as recorded counts as gone, as the pod's reason says it: any
 * process now at its pid is another one.
 */
export async function goneReason(pid: number, when: string): Promise<string> {
  const other = (await startTimeOf(pid)) !== null;
  return other
    ? `its infra process (pid ${pid}) is gone ${when}: that pid is now another process's`
    : `its infra process (pid ${pid}) is gone ${when}: it exited or was killed`;
}

/** The infra check of running pods (see the file's comment). */
export class InfraWatch {
  constructor(private readonly ctx: SandboxContext) {}

  /** Every READY pod with an infra: one /proc read each. The daemon calls this every few seconds. */
  async checkAll(): Promise<void> {
    const running = this.ctx.deps.store.sandboxes.list().filter((s) => s.state === 'READY' && s.infra);
    await Promise.all(running.map((sandbox) => this.check(sandbox)));
  }

  /** One pod, as read by the caller: a pod that is not READY, or has no infra, is left as it is. */
  async check(sandbox: Sandbox): Promise<void> {
    if (sandbox.state !== 'READY' || !sandbox.infra || (await infraRunning(sandbox))) return;
    // Under the pod's lock, read again: a Stop that killed the infra has made it NOTREADY itself.
    await this.ctx.lock.with(sandbox.id, async () => {
      const current = this.ctx.deps.store.sandboxes.get(sandbox.id);
      if (!current || current.state !== 'READY' || !current.infra) return;
      const infra = infraOf(current);
      if (infra === null) await this.identify(current);
      else if (!(await isRunning(infra)))
        this.found(current, await goneReason(infra.pid, 'while berthd ran'));
    });
  }

  /**
   * A READY pod whose infra's start time is not known: a row from before berth recorded it that
   * start-up could not check (its runc did not answer). runc's own state checks its init's start
   * time: a running container's pid is the infra, whose start time is read once and kept.
   */
  private async identify(sandbox: Sandbox): Promise<void> {
    const { id } = sandbox;
    const state = await this.ctx.deps.runtimes
      .of(sandbox)
      .state(id)
      .catch((err: unknown) => {
        this.ctx.deps.logger.warn({ sandbox: id, err: errorMessage(err) }, 'runc state of the infra failed');
        return undefined;
      });
    if (state === undefined) return;
    const startTime = state?.status === 'running' ? await startTimeOf(state.pid) : null;
    if (state && startTime !== null) {
      this.ctx.deps.store.sandboxes.infraIdentified(id, { pid: state.pid, startTime });
      return;
    }
    this.found(
      sandbox,
      `its infra process (pid ${sandbox.pid}) is gone while berthd ran: runc reports none running`,
    );
  }

  /** Call under the pod's lock. */
  private found(sandbox: Sandbox, reason: string): void {
    this.ctx.deps.store.sandboxes.foundDead(sandbox.id, reason);
    this.ctx.deps.events.publish(sandboxChange('STOPPED', sandbox.id));
    this.ctx.deps.logger.warn({ sandbox: sandbox.id, reason }, 'infra process is gone: sandbox is NOT READY');
  }
}
