import { errorMessage } from '../errors.js';
import type { Container } from '../model/container.js';
import type { ExitRecord } from '../monitor/exits.js';
import { isRunning } from '../process/index.js';
import { runtimeOf, type ContainerContext } from './context.js';
import { hasProcess } from './lookup.js';
import { exitReason, recordExit, settleUnmonitored } from './settle.js';

/**
 * How berthd learns, while it runs, that a container ended: conmon's exit files, and the containers
 * whose conmon died without writing one.
 */
export class ExitRecorder {
  constructor(private readonly ctx: ContainerContext) {}

  /** Exit files arrive from conmon; each is applied once, under the container's lock. */
  onExit(record: ExitRecord): Promise<void> {
    const { store, logger } = this.ctx.deps;
    return this.ctx.lock.with(record.id, async () => {
      this.apply(record);
      // runc's record of a dead container only holds its cgroup; dropping it now keeps
      // RemoveContainer cheap, as containerd deletes its task on exit.
      const container = store.containers.get(record.id);
      if (container?.state !== 'EXITED') return;
      await runtimeOf(this.ctx.deps, container)
        .runc.delete(record.id)
        .catch((err: unknown) => {
          logger.warn({ container: record.id, err: errorMessage(err) }, 'runc delete after exit failed');
        });
    });
  }

  /** Records an exit once; later reports of the same exit change nothing. Call under the container's lock. */
  apply(record: ExitRecord): void {
    if (!recordExit(this.ctx.deps, record)) return;
    const reason = exitReason(record);
    this.ctx.deps.logger.info(
      { container: record.id, exitCode: record.exitCode, reason },
      'container exited',
    );
  }

  /**
   * A conmon that dies while berthd runs leaves no exit file, so nothing else would ever notice;
   * the daemon calls this every few seconds. One /proc read per live container.
   */
  async checkMonitors(): Promise<void> {
    for (const container of this.ctx.deps.store.containers.list()) await this.checkMonitor(container);
  }

  async checkMonitor(container: Container): Promise<void> {
    if (!hasProcess(container)) return;
    if (container.monitorPid > 0 && (await isRunning(container.monitorPid))) return;
    await this.ctx.lock.with(container.id, async () => {
      const current = this.ctx.deps.store.containers.get(container.id);
      if (!current || !hasProcess(current)) return;
      const exited = await this.ctx.deps.exits.read(container.id);
      if (exited) this.apply(exited);
      else await settleUnmonitored(this.ctx.deps, current, { rebooted: false });
    });
  }
}
