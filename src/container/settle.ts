/**
 * How a container row comes to an end, the same at start-up and while berthd runs: from conmon's
 * exit record, or by the one rule for a container whose conmon is gone without an exit file
 * (conmon killed, berthd crashed around it, a reboot).
 */
import type { Logger } from '../log.js';
import type { ExitRecord } from '../monitor/exits.js';
import type { Runc } from '../oci/runc.js';
import { isRunning } from '../process/index.js';
import type { Store } from '../store/index.js';
import type { ContainerRow } from '../store/types.js';
import { nowNanos } from '../time.js';

export interface LostDeps {
  runc: Runc;
  store: Store;
  logger: Logger;
}

/**
 * Records conmon's exit record once: a row already EXITED (or still being created) is left as is.
 * Returns whether it changed the row.
 */
export function recordExit(store: Store, record: ExitRecord): boolean {
  const row = store.containers.get(record.id);
  if (!row || row.state === 'EXITED' || row.state === 'CREATING') return false;
  store.containers.update(row.id, {
    state: 'EXITED',
    exitCode: record.exitCode,
    finishedAt: record.finishedAt,
    reason: exitReason(record),
    pid: 0,
  });
  return true;
}

/** CRI's reasons, as kubelet shows them in a pod's last state. */
export function exitReason(record: ExitRecord): string {
  if (record.oomKilled) return 'OOMKilled';
  return record.exitCode === 0 ? 'Completed' : 'Error';
}

export type Settled = 'running' | 'started' | 'killed' | 'lost';

/**
 * Decides what an unmonitored (or maybe unmonitored) container is. A live monitor with a live
 * process keeps it as it is, except that a CREATED row runc reports running was started by a
 * StartContainer the daemon died in: it becomes RUNNING. A live process without a monitor is
 * killed (nobody would record its exit or write its log; kubelet restarts it under a fresh
 * conmon) and reported 137. A gone process is reported 255 'Unknown'.
 */
export async function settleUnmonitored(
  deps: LostDeps,
  row: ContainerRow,
  opts: { rebooted: boolean },
): Promise<Settled> {
  const { runc, store, logger } = deps;
  const state = opts.rebooted ? null : await runc.state(row.id).catch(() => null);
  const monitorAlive = !opts.rebooted && row.monitorPid > 0 && (await isRunning(row.monitorPid));
  const processAlive = state !== null && state.status !== 'stopped' && (await isRunning(state.pid));
  if (monitorAlive && (processAlive || state?.status === 'stopped')) {
    // A stopped process under a live conmon: its exit file is about to be written.
    if (row.state === 'CREATED' && state?.status === 'running') {
      store.containers.update(row.id, { state: 'RUNNING', startedAt: nowNanos() });
      logger.warn({ container: row.id }, 'container was started by an interrupted StartContainer: running');
      return 'started';
    }
    return 'running';
  }
  if (processAlive) {
    await runc.kill(row.id, 'SIGKILL', true);
    store.containers.update(row.id, {
      state: 'EXITED',
      exitCode: 137,
      finishedAt: nowNanos(),
      reason: 'Error',
      message: 'killed by berthd: its monitor (conmon) was gone',
      pid: 0,
    });
    logger.warn({ container: row.id }, 'container had lost its monitor: killed');
    return 'killed';
  }
  store.containers.update(row.id, {
    state: 'EXITED',
    exitCode: 255,
    finishedAt: nowNanos(),
    reason: 'Unknown',
    message: opts.rebooted
      ? 'the node rebooted; the container process is gone'
      : 'the container monitor is gone; its exit code was lost',
    pid: 0,
  });
  if (opts.rebooted || state !== null) await runc.delete(row.id, { force: true });
  logger.warn(
    { container: row.id, rebooted: opts.rebooted },
    'container lost: reported exited with code 255',
  );
  return 'lost';
}
