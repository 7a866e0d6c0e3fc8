import type { Container } from '../model/container.js';
import type { ExitRecord } from '../runtime/index.js';
import { isRunning } from '../process/index.js';
import { withCurrent, type ContainerContext } from './context.js';
import { hasProcess } from './lookup.js';
import { exitReason, recordExit, settleUnmonitored } from './settle.js';
import type { ContainerTeardown } from './teardown.js';

/**
 * How long a monitor seen alive counts as alive for ContainerStatus, which kubelet calls for every
 * container about once a second (and more often under load): its death is still noticed within a
 * poll or two, and a burst of calls costs one /proc read per container.
 */
const MONITOR_SEEN_MS = 1_000;

/**
 * How berthd learns, while it runs, that a container ended: conmon's exit files, and the containers
 * whose conmon died without writing one.
 */
export class ExitRecorder {
  /** When each container's monitor was last seen alive (performance.now()). */
  private readonly monitorSeenAt = new Map<string, number>();

  constructor(
    private readonly ctx: ContainerContext,
    private readonly teardown: ContainerTeardown,
  ) {}

  /** Exit files arrive from conmon; each is applied once, under the container's lock. */
  onExit(record: ExitRecord): Promise<void> {
    return this.ctx.lock.with(record.id, () => this.applyAndRelease(record));
  }

  /**
   * Records an exit, then releases what the exited container no longer needs (teardown.ts's
   * afterExit), so that RemoveContainer finds little left to do. Call under the container's lock.
   */
  async applyAndRelease(record: ExitRecord): Promise<void> {
    this.apply(record);
    const container = this.ctx.deps.store.containers.get(record.id);
    if (container?.state !== 'EXITED') return;
    await this.teardown.afterExit(container, this.ctx.deps.logger);
  }

  /** Records an exit once; later reports of the same exit change nothing. Call under the container's lock. */
  apply(record: ExitRecord): void {
    this.monitorSeenAt.delete(record.id);
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
    const containers = this.ctx.deps.store.containers.list();
    for (const container of containers) await this.checkMonitor(container);
    // Removed containers are never checked again.
    const known = new Set(containers.map((container) => container.id));
    for (const id of this.monitorSeenAt.keys()) if (!known.has(id)) this.monitorSeenAt.delete(id);
  }

  /** As checkMonitor, trusting a monitor seen alive within MONITOR_SEEN_MS: for ContainerStatus. */
  async checkMonitorSoon(container: Container): Promise<void> {
    const seenAt = this.monitorSeenAt.get(container.id);
    if (hasProcess(container) && seenAt !== undefined && performance.now() - seenAt < MONITOR_SEEN_MS) return;
    await this.checkMonitor(container);
  }

  async checkMonitor(container: Container): Promise<void> {
    if (!hasProcess(container)) {
      this.monitorSeenAt.delete(container.id);
      return;
    }
    if (container.monitorPid > 0 && (await isRunning(container.monitorPid))) {
      this.monitorSeenAt.set(container.id, performance.now());
      return;
    }
    this.monitorSeenAt.delete(container.id);
    await withCurrent(this.ctx, container.id, async (current) => {
      if (!hasProcess(current)) return;
      const exited = await this.ctx.deps.exits.read(container.id);
      if (exited) this.apply(exited);
      else await settleUnmonitored(this.ctx.deps, current, { rebooted: false });
    });
  }
}
