/**
 * How a container row comes to an end, the same at start-up and while berthd runs: from conmon's
 * exit record, or by the one rule for a container whose conmon is gone without an exit file
 * (conmon killed, berthd crashed around it, a reboot).
 */
import { StepError } from '../errors.js';
import { containerChange } from '../events/lifecycle.js';
import type { Logger } from '../log.js';
import type { Container } from '../model/container.js';
import type { ExitRecord } from '../runtime/index.js';
import { isRunning } from '../process/index.js';
import { nowNanos } from '../time.js';
import { runtimeOf, type ContainerServiceDeps } from './context.js';
import type { ContainerTeardown } from './teardown.js';

export interface LostDeps extends Pick<ContainerServiceDeps, 'store' | 'runtimes' | 'events'> {
  logger: Logger;
}

/**
 * Records conmon's exit record once: a container already EXITED (or still being created) is left
 * as is. Returns whether it changed the container.
 */
export function recordExit(
  { store, events }: Pick<ContainerServiceDeps, 'store' | 'events'>,
  record: ExitRecord,
): boolean {
  const container = store.containers.get(record.id);
  if (!container || container.state === 'EXITED' || container.state === 'CREATING') return false;
  const exited = store.containers.markExited(container.id, {
    exitCode: record.exitCode,
    reason: exitReason(record),
    message: '',
    finishedAt: record.finishedAt,
  });
  events.publish(containerChange('STOPPED', exited));
  return true;
}

/**
 * An exit conmon reported, taken to its end: recorded once (recordExit), then what the ended
 * container held is let go (releaseEnded). Idempotent, so the exit watcher's handler and start-up,
 * which both meet the same exit file, may each bring it here. Call under the container's lock, or
 * at start-up before anything is served. Says whether this call recorded the exit, and whether the
 * container has ended (releaseEnded).
 */
export async function settleExit(
  deps: LostDeps,
  teardown: Pick<ContainerTeardown, 'afterExit'>,
  record: ExitRecord,
): Promise<{ recorded: boolean; ended: boolean }> {
  const recorded = recordExit(deps, record);
  return { recorded, ended: await releaseEnded(deps, teardown, record.id) };
}

/**
 * Lets go of what container `id` held once it is EXITED (teardown.ts's afterExit, idempotent).
 * Returns whether it has ended, i.e. is EXITED or has no record any more.
 */
export async function releaseEnded(
  { store, logger }: Pick<LostDeps, 'store' | 'logger'>,
  teardown: Pick<ContainerTeardown, 'afterExit'>,
  id: string,
): Promise<boolean> {
  const container = store.containers.get(id);
  if (!container) return true;
  if (container.state !== 'EXITED') return false;
  await teardown.afterExit(container, logger);
  return true;
}

/**
 * A container StopContainer SIGKILLed whose exit file never came: its conmon is gone (killed, or
 * lost in a crash). The process' fate is known, though: it was SIGKILLed; only the monitor's
 * record of it is missing. Throws, changing nothing, while the process still runs (a process stuck
 * in the kernel outlives SIGKILL).
 */
export async function settleKilled(deps: LostDeps, container: Container): Promise<void> {
  const { store, events } = deps;
  const { id } = container;
  if (await processAlive(await runtimeOf(deps, container).state(id))) {
    throw new StepError('stop', new Error(`container ${id} did not exit after SIGKILL`));
  }
  const exited = store.containers.markExited(id, {
    exitCode: 137,
    reason: 'Error',
    message: 'killed by StopContainer; its monitor was gone, so the exit was not recorded by conmon',
    finishedAt: nowNanos(),
  });
  events.publish(containerChange('STOPPED', exited));
}

/** CRI's reasons, as kubelet shows them in a pod's last state. */
export function exitReason(record: ExitRecord): string {
  if (record.oomKilled) return 'OOMKilled';
  return record.exitCode === 0 ? 'Completed' : 'Error';
}

export type Settled = 'running' | 'started' | 'killed' | 'lost';

/**
 * Decides what an unmonitored (or maybe unmonitored) container is. A live monitor with a live
 * process keeps it as it is, except that a CREATED container runc reports running was started by a
 * StartContainer the daemon died in: it becomes RUNNING. A live process without a monitor is
 * killed (nobody would record its exit or write its log; kubelet restarts it under a fresh
 * conmon) and reported 137. A gone process is reported 255 'Unknown'.
 */
export async function settleUnmonitored(
  deps: LostDeps,
  container: Container,
  opts: { rebooted: boolean },
): Promise<Settled> {
  const { store, logger, events } = deps;
  const runtime = runtimeOf(deps, container);
  const state = opts.rebooted ? null : await runtime.state(container.id).catch(() => null);
  const monitorAlive = !opts.rebooted && container.monitorPid > 0 && (await isRunning(container.monitorPid));
  const alive = await processAlive(state);
  if (monitorAlive && (alive || state?.status === 'stopped')) {
    // A stopped process under a live conmon: its exit file is about to be written.
    if (container.state === 'CREATED' && state?.status === 'running') {
      events.publish(containerChange('STARTED', store.containers.markRunning(container.id, nowNanos())));
      logger.warn(
        { container: container.id },
        'container was started by an interrupted StartContainer: running',
      );
      return 'started';
    }
    return 'running';
  }
  if (alive) {
    await runtime.kill(container.id, 'SIGKILL', { all: true });
    const killed = store.containers.markExited(container.id, {
      exitCode: 137,
      reason: 'Error',
      message: 'killed by berthd: its monitor (conmon) was gone',
      finishedAt: nowNanos(),
    });
    events.publish(containerChange('STOPPED', killed));
    logger.warn({ container: container.id }, 'container had lost its monitor: killed');
    return 'killed';
  }
  const lost = store.containers.markExited(container.id, {
    exitCode: 255,
    reason: 'Unknown',
    message: opts.rebooted
      ? 'the node rebooted; the container process is gone'
      : 'the container monitor is gone; its exit code was lost',
    finishedAt: nowNanos(),
  });
  events.publish(containerChange('STOPPED', lost));
  if (opts.rebooted || state !== null) await runtime.delete(container.id, { force: true });
  logger.warn(
    { container: container.id, rebooted: opts.rebooted },
    'container lost: reported exited with code 255',
  );
  return 'lost';
}

/** runc's container has a process that is not gone yet (a stopped one may wait to be reaped). */
async function processAlive(state: { status: string; pid: number } | null): Promise<boolean> {
  return state !== null && state.status !== 'stopped' && (await isRunning(state.pid));
}
