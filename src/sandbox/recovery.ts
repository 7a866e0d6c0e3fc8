import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { BerthConfig } from '../config/types.js';
import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';
import type { Sandbox } from '../model/sandbox.js';
import { listNetns, mountedAmong, removeNetns } from '../netns/index.js';
import { isRunning, startTimeOf } from '../process/index.js';
import type { Store } from '../store/index.js';
import { removeSandboxDir } from './files.js';
import { goneReason, infraOf } from './infra.js';
import { NETNS_PREFIX, namespaceMounts } from './namespaces.js';
import type { ContainerState, RuntimeHandler, RuntimeHandlers } from '../runtime/index.js';
import type { SandboxTeardown } from './teardown.js';

export interface RecoveryDeps {
  config: BerthConfig;
  store: Store;
  runtimes: RuntimeHandlers;
  logger: Logger;
  /** The teardown RunPodSandbox's undos use: a rollback here is the same teardown. */
  teardown: SandboxTeardown;
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
  const { store, logger, teardown } = deps;
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

  const sandboxes = store.sandboxes.list();
  // What runc lists now serves both the checks below and the orphan sweep after them: an orphan is
  // what no row named when start-up began (what repair deletes from the rows, it deletes from runc
  // first). Without a reboot the pins' mounts are read once for all pods.
  const known = new Set([...sandboxes.map((s) => s.id), ...store.containers.list().map((r) => r.id)]);
  const [runcContainers, mountedPins] = await Promise.all([
    listAll(deps.runtimes),
    rebooted ? null : mountedPinsOf(sandboxes),
  ]);
  const probe = mountedPins === null ? null : { runcContainers, mountedPins };
  for (const sandbox of sandboxes) {
    try {
      if (sandbox.state === 'CREATING') await rollBack(deps, teardown, sandbox, report);
      else await reconcile(deps, teardown, sandbox, probe, report);
    } catch (err) {
      // One sandbox that cannot be repaired must not keep the node from serving the others.
      logger.error(
        { sandbox: sandbox.id, err: errorMessage(err) },
        'repair failed; will retry on Stop/Remove',
      );
    }
  }
  if (deps.recoverContainers) report.containers = await deps.recoverContainers(rebooted);
  // The dirs of pods rolled back above are set aside and deleted meanwhile; the sweep must not race them.
  await teardown.filesRemoved();
  await removeOrphans(deps, report, runcContainers, known);
  await writeBootMarker(deps.config.stateDir);
  return report;
}

async function detectReboot(stateDir: string): Promise<boolean> {
  const recorded = await readFile(join(stateDir, BOOT_MARKER), 'utf8').catch(() => null);
  return recorded === null || recorded.trim() !== (await currentBootId());
}

async function writeBootMarker(stateDir: string): Promise<void> {
  await writeFile(join(stateDir, BOOT_MARKER), `${await currentBootId()}\n`, { mode: 0o644 });
}

async function currentBootId(): Promise<string> {
  return (await readFile('/proc/sys/kernel/random/boot_id', 'utf8').catch(() => 'unknown')).trim();
}

/**
 * A RunPodSandbox the daemon died in: the same teardown a failed one runs, each action undoing what
 * the journal row says may have happened.
 */
async function rollBack(
  deps: RecoveryDeps,
  teardown: SandboxTeardown,
  sandbox: Sandbox,
  report: RecoveryReport,
): Promise<void> {
  try {
    await teardown.all(sandbox.id);
  } catch (err) {
    // Keep the row, now visible as NOTREADY, so kubelet's Stop/Remove retries what is left.
    deps.store.sandboxes.markNotReady(sandbox.id);
    throw err;
  }
  report.rolledBack.push(sandbox.id);
  // No step to name: RunPodSandbox journals none (see Sandbox.step), and the teardown needs none.
  deps.logger.warn({ sandbox: sandbox.id }, 'rolled back a RunPodSandbox interrupted by a daemon exit');
}

/** Per handler name: runc's containers by id, or the error of a `runc list` that failed twice. */
type RuncContainers = Map<string, Map<string, ContainerState> | Error>;

/**
 * What start-up learns of the host with one read each, not one exec per pod: every container each
 * runtime handler's runc knows (`runc list`), and which pins are mounted. Null after a reboot,
 * when nothing can have survived.
 */
interface HostProbe {
  runcContainers: RuncContainers;
  mountedPins: Set<string>;
}

/** One `runc list` for each handler, side by side. */
async function listAll(runtimes: RuntimeHandlers): Promise<RuncContainers> {
  const listed = await Promise.all(
    runtimes.all().map(async (runtime) => [runtime.name, await listWithRetry(runtime)] as const),
  );
  return new Map(listed);
}

async function mountedPinsOf(sandboxes: Sandbox[]): Promise<Set<string>> {
  const pins = sandboxes.filter((s) => !s.infra && s.state !== 'CREATING').flatMap(namespaceMounts);
  return new Set(await mountedAmong(pins));
}

/** One more try after a failure: a runc that was only slow (a loaded node) answers the second time. */
async function listWithRetry(runtime: RuntimeHandler): Promise<Map<string, ContainerState> | Error> {
  const list = async (): Promise<Map<string, ContainerState>> =>
    new Map((await runtime.list()).map((state) => [state.id, state]));
  try {
    return await list();
  } catch {
    return list().catch((err: unknown) => (err instanceof Error ? err : new Error(errorMessage(err))));
  }
}

async function reconcile(
  deps: RecoveryDeps,
  teardown: SandboxTeardown,
  sandbox: Sandbox,
  probe: HostProbe | null,
  report: RecoveryReport,
): Promise<void> {
  const { store, logger } = deps;
  const { id } = sandbox;
  const rebooted = probe === null;
  const log = logger.child({ sandbox: id });
  let state: ContainerState | null = null;
  let alive = false;
  if (probe !== null && sandbox.infra) {
    const containers = probe.runcContainers.get(deps.runtimes.of(sandbox).name);
    if (containers === undefined || containers instanceof Error) {
      // Only runc saying the container does not exist (it is not in the list) means the infra is
      // gone. A runc that fails or times out says nothing about the pod: it is left as it is, and
      // kubelet's next PodSandboxStatus or Stop sees what is true.
      report.unchecked.push(id);
      log.error(
        { err: containers === undefined ? 'not listed' : errorMessage(containers) },
        'runc list failed at start-up; the sandbox is left as it was',
      );
      return;
    }
    state = containers.get(id) ?? null;
    alive = await infraAlive(store, sandbox, state);
  } else if (probe !== null) {
    // Without infra, the pod lives as long as its pins do; a reboot or a stray umount loses them.
    alive = namespaceMounts(sandbox).every((path) => probe.mountedPins.has(path));
  }
  if (alive) return;

  if (sandbox.state === 'READY') {
    const when = rebooted ? 'after a reboot' : 'when berthd started';
    const reason = !sandbox.infra
      ? `its namespace pins are gone ${when}: unmounted`
      : rebooted
        ? `its infra process (pid ${sandbox.pid}) is gone ${when}`
        : await goneReason(sandbox.pid, when);
    store.sandboxes.foundDead(id, reason);
    report.markedNotReady.push(id);
    log.warn(
      { rebooted, reason },
      sandbox.infra
        ? 'infra process is gone: sandbox is NOT READY'
        : 'namespace pins are gone: sandbox is NOT READY',
    );
  }
  // runc's record of a dead infra is useless and, after a reboot, points at nothing. Without a reboot
  // the list above already said whether runc still has one: no exec per stopped pod without one.
  // The teardown takes the record as listed: marking it NOT READY changed nothing it reads.
  if (sandbox.infra && (rebooted || state !== null)) await teardown.deleteInfra(sandbox);

  if (rebooted) {
    // The netns died with the boot, but host-local keeps its leases on disk: DEL releases them.
    if (await teardown.releaseNetwork(sandbox)) {
      report.networksReleased.push(id);
      log.warn('released the network of a sandbox lost in a reboot');
    }
    await teardown.unmountNetns(sandbox);
  }
}

/**
 * Whether the infra runc lists running is the process recorded (a pid whose start time differs is
 * a dead infra). A READY row from before berth kept the start time has it read now, once, from the
 * process runc reports running: runc compares its init's start time with its own record, so that
 * process is the infra it created.
 */
async function infraAlive(store: Store, sandbox: Sandbox, state: ContainerState | null): Promise<boolean> {
  if (state === null || state.status !== 'running') return false;
  const recorded = infraOf(sandbox);
  if (recorded !== null) return recorded.pid === state.pid && (await isRunning(recorded));
  const startTime = await startTimeOf(state.pid);
  if (startTime === null) return false;
  if (sandbox.state === 'READY') store.sandboxes.infraIdentified(sandbox.id, { pid: state.pid, startTime });
  return true;
}

/**
 * `known`: the ids of the sandbox and container rows when start-up began. Containers share their
 * pod's runc root with its infra; they are orphans only without a row of either kind.
 */
async function removeOrphans(
  deps: RecoveryDeps,
  report: RecoveryReport,
  runcContainers: RuncContainers,
  known: Set<string>,
): Promise<void> {
  const { store, runtimes, logger, config } = deps;
  const sandboxes = store.sandboxes.list();
  const knownNetns = new Set(sandboxes.map((s) => s.netnsPath).filter((p): p is string => p !== null));

  for (const path of await listNetns(config.netnsDir, NETNS_PREFIX)) {
    if (knownNetns.has(path)) continue;
    await removeNetns(path);
    report.orphanNetns.push(path);
    logger.warn({ netns: path }, 'removed a netns pin with no sandbox record');
  }
  for (const runtime of runtimes.all()) {
    const { name } = runtime;
    const listed = runcContainers.get(name);
    if (listed === undefined) continue;
    if (listed instanceof Error) {
      // Nothing is known to be an orphan then; the next start sweeps again.
      logger.error(
        { runtimeHandler: name, err: errorMessage(listed) },
        'runc list failed; orphan containers not swept',
      );
      continue;
    }
    for (const container of listed.values()) {
      if (known.has(container.id)) continue;
      await runtime.delete(container.id, { force: true });
      report.orphanContainers.push(container.id);
      logger.warn(
        { container: container.id, runtimeHandler: name },
        'deleted a runc container with no sandbox or container record',
      );
    }
  }
  const sandboxesDir = join(config.rootDir, 'sandboxes');
  const remaining = new Set(sandboxes.map((s) => s.id));
  for (const name of await readdir(sandboxesDir).catch(() => [] as string[])) {
    if (remaining.has(name)) continue;
    await removeSandboxDir(join(sandboxesDir, name));
    report.orphanDirs.push(name);
    logger.warn({ dir: name }, 'removed a sandbox dir with no record');
    if (SANDBOX_ID.test(name)) await removeOrphanPodCgroup(deps, name);
  }
}

/** A pod's id names its dir (the dirs set aside on removal have a prefix, and their pods no cgroup). */
const SANDBOX_ID = /^[0-9a-f]{64}$/;

/**
 * The cgroup berth made for pod `id`, whose record is gone; found by the pod's dir, not by listing
 * berth's parent, which other berthds on the node (a test's) share. Left, and logged, when it will
 * not go: start-up goes on.
 */
async function removeOrphanPodCgroup(deps: RecoveryDeps, id: string): Promise<void> {
  try {
    await deps.teardown.removeOrphanPodCgroup(id);
  } catch (err) {
    deps.logger.warn(
      { sandbox: id, err: errorMessage(err) },
      'removing the cgroup of a pod with no record failed',
    );
  }
}
