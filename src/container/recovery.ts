import { readdir } from 'node:fs/promises';
import type { CgroupManager } from '../cgroups/index.js';
import type { BerthConfig } from '../config/types.js';
import { errorMessage } from '../errors.js';
import { listRootfsDirs } from '../imagestore/rootfs.js';
import type { Logger } from '../log.js';
import type { LifecycleEvents } from '../events/lifecycle.js';
import type { Container } from '../model/container.js';
import { inPool } from '../kit/pool.js';
import type { ExitWatcher, RuntimeHandlers } from '../runtime/index.js';
import type { Store } from '../store/index.js';
import { runtimeOf } from './context.js';
import { settleExit, settleUnmonitored } from './settle.js';
import { ContainerTeardown } from './teardown.js';

/**
 * Containers repaired at once. Each is a few /proc and exit-file reads, or a runc exec where those
 * cannot answer; a bound keeps a node with many pods from starting hundreds of execs together.
 */
const REPAIR_CONCURRENCY = 8;

export interface ContainerRecoveryDeps {
  config: BerthConfig;
  store: Store;
  /** Where a container whose create was cut short left its cgroup. */
  cgroups: CgroupManager;
  runtimes: RuntimeHandlers;
  exits: ExitWatcher;
  /** Per-container monitor dirs; with no row, their container is gone. */
  persistDir: string;
  /** conmon's exit file dir, for files of containers that have no row any more. */
  exitDir: string;
  logger: Logger;
  /** Exits found here reach kubelet as events once it subscribes. */
  events: LifecycleEvents;
  rebooted: boolean;
  /**
   * Resumes the containers a checkpoint cut short left paused, returning their ids, and removes
   * its files (checkpoint/repair.ts): run once the rows are settled.
   */
  repairCheckpoints?: () => Promise<string[]>;
}

export interface ContainerRecoveryReport {
  rolledBack: string[];
  exitedWhileDown: string[];
  lost: string[];
  orphanDirs: string[];
  orphanExitFiles: string[];
  /** Paused by a checkpoint berthd was killed in, and running again. */
  resumedAfterCheckpoint: string[];
}

/**
 * Brings container rows up to date with what happened while berthd was down: conmon kept running
 * and wrote exit files, so exits are read back rather than guessed. A container whose monitor is
 * gone without an exit file (reboot, or conmon killed) is reported exited with code 255, as
 * containerd does for a lost task.
 */
export async function recoverContainers(deps: ContainerRecoveryDeps): Promise<ContainerRecoveryReport> {
  const { store, logger } = deps;
  const teardown = new ContainerTeardown(deps);
  const report: ContainerRecoveryReport = {
    rolledBack: [],
    exitedWhileDown: [],
    lost: [],
    orphanDirs: [],
    orphanExitFiles: [],
    resumedAfterCheckpoint: [],
  };
  await inPool(store.containers.list(), REPAIR_CONCURRENCY, async (container) => {
    try {
      if (container.state === 'CREATING') {
        await teardown.all(container.id);
        report.rolledBack.push(container.id);
        logger.warn(
          { container: container.id, step: container.step },
          'rolled back a CreateContainer interrupted by a daemon exit',
        );
      } else if (container.state !== 'EXITED') await reconcile(deps, teardown, container, report);
      else if (deps.rebooted) await runtimeOf(deps, container).delete(container.id, { force: true });
    } catch (err) {
      logger.error({ container: container.id, err: errorMessage(err) }, 'container repair failed');
    }
  });
  await removeOrphans(deps, teardown, report);
  report.resumedAfterCheckpoint = (await deps.repairCheckpoints?.()) ?? [];
  return report;
}

async function reconcile(
  deps: ContainerRecoveryDeps,
  teardown: ContainerTeardown,
  container: Container,
  report: ContainerRecoveryReport,
) {
  const { exits, logger, rebooted } = deps;
  const exited = await exits.read(container.id);
  if (exited) {
    // The same owner as while berthd runs: recorded, and what the container held released.
    await settleExit(deps, teardown, exited);
    report.exitedWhileDown.push(container.id);
    logger.info(
      { container: container.id, exitCode: exited.exitCode },
      'container exited while berthd was down',
    );
    return;
  }
  // The common case, a running container under its live conmon, needs no runc exec: conmon outlives
  // its container's process, and when that exits, the exit file the watcher reads follows.
  if (
    !rebooted &&
    container.state === 'RUNNING' &&
    (await deps.runtimes.isMonitoring(container.id, container.monitorPid))
  )
    return;
  // Made from a checkpoint and not started: no monitor or process is meant to be there yet, and
  // its start restores it. Only a restore cut short would have left runc a container of it.
  if (
    !rebooted &&
    container.restore &&
    container.state === 'CREATED' &&
    (await runtimeOf(deps, container).state(container.id)) === null
  )
    return;
  const settled = await settleUnmonitored(deps, container, { rebooted });
  if (settled === 'killed' || settled === 'lost') report.lost.push(container.id);
}

/**
 * Leftovers with no record: the same undos as a rollback, from what is on disk. They are also what
 * a RemoveContainer leaves when the daemon dies before its background deletion is done (teardown.ts
 * remove): container dirs, and conmon's exit files and persist dirs, through which Conmon.release
 * also finds runc's record and the socket link.
 */
async function removeOrphans(
  deps: ContainerRecoveryDeps,
  teardown: ContainerTeardown,
  report: ContainerRecoveryReport,
) {
  const { store, config, logger } = deps;
  const known = new Set(store.containers.list().map((c) => c.id));
  for (const id of await listRootfsDirs(config.rootDir)) {
    if (known.has(id)) continue;
    await teardown.removeFiles(id);
    report.orphanDirs.push(id);
    logger.warn({ container: id }, 'removed a container dir with no record');
  }
  const monitored = new Set([
    ...(await readdir(deps.exitDir).catch(() => [] as string[])),
    ...(await readdir(deps.persistDir).catch(() => [] as string[])),
  ]);
  for (const id of monitored) {
    if (known.has(id) || id.includes('.')) continue;
    await teardown.discardProcess(id);
    report.orphanExitFiles.push(id);
  }
}
