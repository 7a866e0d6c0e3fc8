import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Cni } from '../cni/index.js';
import type { BerthConfig } from '../config/types.js';
import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';
import { isMounted, listNetns, removeNetns, unmountNetns } from '../netns/index.js';
import type { ContainerState, Runc } from '../oci/runc.js';
import { isRunning } from '../process/index.js';
import type { Store } from '../store/index.js';
import type { SandboxRow } from '../store/types.js';
import { unmountShm } from './files.js';
import { detach } from './network.js';
import { NETNS_PREFIX } from './service.js';

export interface RecoveryDeps {
  config: BerthConfig;
  store: Store;
  cni: Cni;
  runc: Runc;
  logger: Logger;
  /**
   * Repairs the containers' side once the sandboxes are settled, before orphans are swept: the
   * sweep must count every container row as known.
   */
  recoverContainers?: (rebooted: boolean) => Promise<unknown>;
}

/**
 * Lives on the state dir, which is tmpfs: its absence (or another boot id in it) means the machine
 * rebooted since the daemon last ran, so every process and every netns mount is gone.
 */
const BOOT_MARKER = 'boot-id';

export interface RecoveryReport {
  rebooted: boolean;
  rolledBack: string[];
  markedNotReady: string[];
  /** Sandboxes whose infra runc could not report on: left as they were. */
  unchecked: string[];
  networksReleased: string[];
  orphanNetns: string[];
  orphanContainers: string[];
  orphanDirs: string[];
  containers?: unknown;
}

/**
 * Brings SQLite and the host into agreement before the socket is served: finishes or rolls back
 * what a killed daemon left half done, and removes what berth made but no longer records.
 */
export async function recover(deps: RecoveryDeps): Promise<RecoveryReport> {
  const { store, logger } = deps;
  const rebooted = await detectReboot(deps.config.stateDir);
  const report: RecoveryReport = {
    rebooted,
    rolledBack: [],
    markedNotReady: [],
    unchecked: [],
    networksReleased: [],
    orphanNetns: [],
    orphanContainers: [],
    orphanDirs: [],
  };
  if (rebooted) logger.warn('first start since boot: pod processes and netns mounts are gone');

  for (const row of store.listSandboxes()) {
    try {
      if (row.state === 'CREATING') await rollBack(deps, row, report);
      else await reconcile(deps, row, rebooted, report);
    } catch (err) {
      // One sandbox that cannot be repaired must not keep the node from serving the others.
      logger.error({ sandbox: row.id, err: errorMessage(err) }, 'repair failed; will retry on Stop/Remove');
    }
  }
  if (deps.recoverContainers) report.containers = await deps.recoverContainers(rebooted);
  await removeOrphans(deps, report);
  await writeBootMarker(deps.config.stateDir);
  return report;
}

async function detectReboot(stateDir: string): Promise<boolean> {
  const recorded = await readFile(join(stateDir, BOOT_MARKER), 'utf8').catch(() => null);
  return recorded === null || recorded.trim() !== (await currentBootId());
}

async function writeBootMarker(stateDir: string): Promise<void> {
  await writeFile(join(stateDir, BOOT_MARKER), `${await currentBootId()}\n`);
}

async function currentBootId(): Promise<string> {
  return (await readFile('/proc/sys/kernel/random/boot_id', 'utf8').catch(() => 'unknown')).trim();
}

/** A RunPodSandbox the daemon died in: undo each step the journal row says may have happened. */
async function rollBack(deps: RecoveryDeps, row: SandboxRow, report: RecoveryReport): Promise<void> {
  const { store, runc, cni, logger } = deps;
  const log = logger.child({ sandbox: row.id, step: row.step });
  await runc.delete(row.id, { force: true });
  if (row.networkState === 'ADDING' || row.networkState === 'READY') {
    try {
      await detach(cni, row);
    } catch (err) {
      // Keep the row, now visible as NOTREADY, so kubelet's Stop/Remove retries the DEL.
      store.updateSandbox(row.id, { state: 'NOTREADY', pid: 0 });
      throw err;
    }
  }
  if (row.netnsPath) await removeNetns(row.netnsPath);
  await unmountShm(row.sandboxDir);
  await rm(row.sandboxDir, { recursive: true, force: true });
  store.deleteSandbox(row.id);
  report.rolledBack.push(row.id);
  log.warn('rolled back a RunPodSandbox interrupted by a daemon exit');
}

async function reconcile(deps: RecoveryDeps, row: SandboxRow, rebooted: boolean, report: RecoveryReport) {
  const { store, runc, cni, logger } = deps;
  const log = logger.child({ sandbox: row.id });
  let state: ContainerState | null = null;
  if (!rebooted) {
    try {
      state = await stateWithRetry(runc, row.id);
    } catch (err) {
      // Only runc saying the container does not exist means the infra is gone (state() answers
      // null then). A runc that fails or times out says nothing about the pod: it is left as it
      // is, and kubelet's next PodSandboxStatus or Stop sees what is true.
      report.unchecked.push(row.id);
      log.error({ err: errorMessage(err) }, 'runc state failed at start-up; the sandbox is left as it was');
      return;
    }
  }
  const alive = state !== null && state.status === 'running' && (await isRunning(state.pid));
  if (alive) return;

  if (row.state === 'READY') {
    store.updateSandbox(row.id, { state: 'NOTREADY', pid: 0 });
    report.markedNotReady.push(row.id);
    log.warn({ rebooted }, 'infra process is gone: sandbox is NOT READY');
  }
  // runc's record of a dead infra is useless and, after a reboot, points at nothing. Without a reboot
  // the state call above already said whether runc still has one: no second exec per stopped pod.
  if (rebooted || state !== null) await runc.delete(row.id, { force: true });

  if (rebooted) {
    // The netns died with the boot, but host-local keeps its leases on disk: DEL releases them.
    if (row.networkState === 'ADDING' || row.networkState === 'READY') {
      await detach(cni, row);
      store.updateSandbox(row.id, { networkState: 'TORN_DOWN' });
      report.networksReleased.push(row.id);
      log.warn('released the network of a sandbox lost in a reboot');
    }
    if (row.netnsPath && (await isMounted(row.netnsPath))) await unmountNetns(row.netnsPath);
  }
}

/** One more try after a failure: a runc that was only slow (a loaded node) answers the second time. */
async function stateWithRetry(runc: Runc, id: string): Promise<ContainerState | null> {
  try {
    return await runc.state(id);
  } catch {
    return runc.state(id);
  }
}

async function removeOrphans(deps: RecoveryDeps, report: RecoveryReport): Promise<void> {
  const { store, runc, logger, config } = deps;
  const rows = store.listSandboxes();
  const known = new Set(rows.map((r) => r.id));
  // Containers share runc's root with the infras; they are orphans only without a container row.
  const knownContainers = new Set(store.containers.list().map((r) => r.id));
  const knownNetns = new Set(rows.map((r) => r.netnsPath).filter((p): p is string => p !== null));

  for (const path of await listNetns(config.netnsDir, NETNS_PREFIX)) {
    if (knownNetns.has(path)) continue;
    await removeNetns(path);
    report.orphanNetns.push(path);
    logger.warn({ netns: path }, 'removed a netns pin with no sandbox record');
  }
  for (const container of await runc.list()) {
    if (known.has(container.id) || knownContainers.has(container.id)) continue;
    await runc.delete(container.id, { force: true });
    report.orphanContainers.push(container.id);
    logger.warn({ container: container.id }, 'deleted a runc container with no sandbox or container record');
  }
  const sandboxesDir = join(config.rootDir, 'sandboxes');
  for (const name of await readdir(sandboxesDir).catch(() => [] as string[])) {
    if (known.has(name)) continue;
    await unmountShm(join(sandboxesDir, name));
    await rm(join(sandboxesDir, name), { recursive: true, force: true });
    report.orphanDirs.push(name);
    logger.warn({ dir: name }, 'removed a sandbox dir with no record');
  }
}
