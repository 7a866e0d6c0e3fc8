import type { Container } from '../model/container.js';
import type { ExitRecord } from '../runtime/index.js';
import { isRunning } from '../process/index.js';
import { withCurrent, type ContainerContext } from './context.js';
import { hasProcess } from './lookup.js';
import { exitReason, releaseEnded, settleExit, settleKilled, settleUnmonitored } from './settle.js';
import type { ContainerTeardown } from './teardown.js';

/**
 * How long a monitor seen alive counts as alive for ContainerStatus, which kubelet calls for every
 * container about once a second (and more often under load): its death is still noticed within a
 * poll or two, and a burst of calls costs one /proc read per container.
 */
const MONITOR_SEEN_MS = 1_000;

/**
 * The one owner of a container's exit while berthd runs: conmon's exit files reach it through the
 * exit watcher, and it alone records an exit and lets go of what the container held, under the
 * container's lock. StopContainer only signals, then waits here (endOf) for that record; the
 * containers whose conmon died without an exit file are its business too.
 */
export class ExitRecorder {
  /** When each container's monitor was last seen alive (performance.now()). */
  private readonly monitorSeenAt = new Map<string, number>();
  /** By container: what its stops wait for, resolved once its end is recorded and released. */
  private readonly ends = new Map<string, { ended: Promise<void>; resolve: () => void }>();
  /** By container: how many stops are under way. */
  private readonly stops = new Map<string, number>();

  constructor(
    private readonly ctx: ContainerContext,
    private readonly teardown: ContainerTeardown,
  ) {}

  /** Exit files arrive from conmon; each is settled under the container's lock. */
  onExit(record: ExitRecord): Promise<void> {
    return this.ctx.lock.with(record.id, () => this.settle(record));
  }

  /**
   * Marks a stop of `id` under way until the returned function is called. The monitor check leaves
   * the container to it: the stop settles it once its wait is over (afterKill), for the SIGKILL it
   * sent is what ended the process, which the check could only report as lost.
   */
  stopping(id: string): () => void {
    this.stops.set(id, (this.stops.get(id) ?? 0) + 1);
    return () => {
      const left = (this.stops.get(id) ?? 1) - 1;
      if (left > 0) this.stops.set(id, left);
      else this.stops.delete(id);
    };
  }

  /**
   * Resolves once the end of `id` is recorded and what it held is released. Call under the
   * container's lock, before signalling it: the record, made under the same lock, cannot come in
   * between. Concurrent stops of one container share the wait.
   */
  endOf(id: string): Promise<void> {
    let end = this.ends.get(id);
    if (!end) {
      let resolve = (): void => {};
      const ended = new Promise<void>((done) => (resolve = done));
      end = { ended, resolve };
      this.ends.set(id, end);
    }
    return end.ended;
  }

  /**
   * For a stop that SIGKILLed `id` and waited for its end in vain: the exit file is read once more
   * (its event may have been refused while the container was being created), and without one the
   * exit is recorded from what StopContainer knows (settleKilled). Throws while the process still
   * runs, leaving the container as it is.
   */
  afterKill(id: string): Promise<void> {
    return this.ctx.lock.with(id, async () => {
      const current = this.ctx.deps.store.containers.get(id);
      if (!current || !hasProcess(current)) return this.release(id);
      const exited = await this.ctx.deps.exits.read(id);
      if (exited) return this.settle(exited);
      await settleKilled(this.ctx.deps, current);
      await this.release(id);
    });
  }

  /** Records an exit once (later reports of it change nothing), then releases. Call under the container's lock. */
  private async settle(record: ExitRecord): Promise<void> {
    this.monitorSeenAt.delete(record.id);
    const { recorded, ended } = await settleExit(this.ctx.deps, this.teardown, record);
    if (recorded) {
      const reason = exitReason(record);
      this.ctx.deps.logger.info(
        { container: record.id, exitCode: record.exitCode, reason },
        'container exited',
      );
    }
    if (ended) this.wake(record.id);
  }

  /** Releases `id` if it has ended (teardown.ts's afterExit). Call under the container's lock. */
  private async release(id: string): Promise<void> {
    if (await releaseEnded(this.ctx.deps, this.teardown, id)) this.wake(id);
  }

  /** `id` has ended and is released: its stops return. */
  private wake(id: string): void {
    this.ends.get(id)?.resolve();
    this.ends.delete(id);
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
      if (!hasProcess(current) || this.stops.has(current.id)) return;
      const exited = await this.ctx.deps.exits.read(container.id);
      if (exited) await this.settle(exited);
      else await settleUnmonitored(this.ctx.deps, current, { rebooted: false });
    });
  }
}
