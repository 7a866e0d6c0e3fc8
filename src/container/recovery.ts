import { readdir } from 'node:fs/promises';
import type { BerthConfig } from '../config/types.js';
import { errorMessage } from '../errors.js';
import { listRootfsDirs, removeRootfs } from '../imagestore/rootfs.js';
import type { Logger } from '../log.js';
import type { Conmon } from '../monitor/conmon.js';
import type { ExitWatcher } from '../monitor/exits.js';
import type { Runc } from '../oci/runc.js';
import type { Store } from '../store/index.js';
import type { ContainerRow } from '../store/types.js';
import { recordExit, settleUnmonitored } from './settle.js';

export interface ContainerRecoveryDeps {
  config: BerthConfig;
  store: Store;
  runc: Runc;
  exits: ExitWatcher;
  conmon: Conmon;
  /** Per-container monitor dirs; with no row, their container is gone. */
  persistDir: string;
  /** conmon's exit file dir, for files of containers that have no row any more. */
  exitDir: string;
  logger: Logger;
  rebooted: boolean;
}

export interface ContainerRecoveryReport {
  rolledBack: string[];
  exitedWhileDown: string[];
  lost: string[];
  orphanDirs: string[];
  orphanExitFiles: string[];
}

/**
 * Brings container rows up to date with what happened while berthd was down: conmon kept running
 * and wrote exit files, so exits are read back rather than guessed. A container whose monitor is
 * gone without an exit file (reboot, or conmon killed) is reported exited with code 255, as
 * containerd does for a lost task.
 */
export async function recoverContainers(deps: ContainerRecoveryDeps): Promise<ContainerRecoveryReport> {
  const { store, logger } = deps;
  const report: ContainerRecoveryReport = {
    rolledBack: [],
    exitedWhileDown: [],
    lost: [],
    orphanDirs: [],
    orphanExitFiles: [],
  };
  for (const row of store.containers.list()) {
    try {
      if (row.state === 'CREATING') await rollBack(deps, row, report);
      else if (row.state !== 'EXITED') await reconcile(deps, row, report);
      else if (deps.rebooted) await deps.runc.delete(row.id, { force: true });
    } catch (err) {
      logger.error({ container: row.id, err: errorMessage(err) }, 'container repair failed');
    }
  }
  await removeOrphans(deps, report);
  return report;
}

async function rollBack(deps: ContainerRecoveryDeps, row: ContainerRow, report: ContainerRecoveryReport) {
  const { conmon, exits, store, config, logger } = deps;
  await conmon.release(row.id, row.monitorPid);
  await exits.forget(row.id);
  await removeRootfs(row.id, config.rootDir);
  store.containers.delete(row.id);
  report.rolledBack.push(row.id);
  logger.warn(
    { container: row.id, step: row.step },
    'rolled back a CreateContainer interrupted by a daemon exit',
  );
}

async function reconcile(deps: ContainerRecoveryDeps, row: ContainerRow, report: ContainerRecoveryReport) {
  const { exits, store, logger, rebooted } = deps;
  const exited = await exits.read(row.id);
  if (exited) {
    recordExit(store, exited);
    report.exitedWhileDown.push(row.id);
    logger.info({ container: row.id, exitCode: exited.exitCode }, 'container exited while berthd was down');
    return;
  }
  const settled = await settleUnmonitored(deps, row, { rebooted });
  if (settled === 'killed' || settled === 'lost') report.lost.push(row.id);
}

async function removeOrphans(deps: ContainerRecoveryDeps, report: ContainerRecoveryReport) {
  const { store, config, exits, logger } = deps;
  const known = new Set(store.containers.list().map((r) => r.id));
  for (const id of await listRootfsDirs(config.rootDir)) {
    if (known.has(id)) continue;
    await removeRootfs(id, config.rootDir);
    report.orphanDirs.push(id);
    logger.warn({ container: id }, 'removed a container dir with no record');
  }
  const monitored = new Set([
    ...(await readdir(deps.exitDir).catch(() => [] as string[])),
    ...(await readdir(deps.persistDir).catch(() => [] as string[])),
  ]);
  for (const id of monitored) {
    if (known.has(id) || id.includes('.')) continue;
    await deps.conmon.release(id, 0);
    await exits.forget(id);
    report.orphanExitFiles.push(id);
  }
}
