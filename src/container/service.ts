import { randomBytes } from 'node:crypto';
import { mkdir, readFile, realpath, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { BerthConfig } from '../config/types.js';
import {
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
  StepError,
  errorMessage,
} from '../errors.js';
import type { ImageService } from '../image/service.js';
import type { ImageConfig } from '../image/types.js';
import { containerDir, prepareRootfs, removeRootfs } from '../imagestore/rootfs.js';
import type { Logger } from '../log.js';
import type { Conmon } from '../monitor/conmon.js';
import type { ExitRecord, ExitWatcher } from '../monitor/exits.js';
import { attachToMonitor } from '../monitor/attach.js';
import { execStream, type ExecStreamIo } from '../oci/exec-stream.js';
import { EXEC_SYNC_OUTPUT_CAP, execSync } from '../oci/exec-sync.js';
import type { Runc } from '../oci/runc.js';
import type { Process, Spec } from '../oci/spec.js';
import { linuxResources } from '../oci/container.js';
import { isRunning } from '../process/index.js';
import { cgroupsPath } from '../oci/cgroups.js';
import { KeyedLock } from '../operation/lock.js';
import { findByIdOrPrefix, matchesLabels, type RecordKind } from '../operation/lookup.js';
import { pauseIfAsked } from '../operation/pause.js';
import { Steps } from '../operation/steps.js';
import type { PodGate } from '../sandbox/gate.js';
import { findSandbox } from '../sandbox/lookup.js';
import type { SandboxSpec } from '../sandbox/types.js';
import { readCgroupStats } from '../stats/cgroup.js';
import { directoryUsage } from '../stats/disk.js';
import type { Store } from '../store/index.js';
import type { ContainerRow, SandboxRow } from '../store/types.js';
import { nowNanos } from '../time.js';
import { exitReason, recordExit, settleUnmonitored } from './settle.js';
import { prepareSpec, supportedResources, type PrepareInput } from './prepare.js';
import type {
  ContainerFilter,
  ContainerResources,
  ContainerSpec,
  ContainerStateName,
  ContainerStatsView,
  ContainerVerboseInfo,
  ContainerView,
  ExecSyncResult,
} from './types.js';

type ImageName = ReturnType<ImageService['nameOf']>;

/** After SIGKILL a process is gone within milliseconds unless the kernel is stuck (D state). */
const KILL_WAIT_MS = 10_000;
/** Without a conmon nobody writes an exit file: look at the process itself soon. */
const UNMONITORED_KILL_WAIT_MS = 1_000;

export interface ContainerServiceDeps {
  config: BerthConfig;
  store: Store;
  runc: Runc;
  conmon: Conmon;
  exits: ExitWatcher;
  images: ImageService;
  logger: Logger;
  /** Orders container operations against StopPodSandbox and RemovePodSandbox of their pod. */
  pods: PodGate;
  /** Test-only, as SandboxServiceDeps.pauseBeforeStep: CreateContainer waits forever before this step. */
  pauseBeforeStep?: string;
}

export class ContainerService {
  private readonly lock = new KeyedLock();
  /** Parsed specs by id, reused while the stored JSON is unchanged: ListContainers parses none. */
  private readonly specCache = new Map<string, { json: string; spec: ContainerSpec }>();
  private guard: Promise<PrepareInput['guard']> | null = null;

  constructor(private readonly deps: ContainerServiceDeps) {}

  /** Exit files arrive from conmon; each is applied once, under the container's lock. */
  onExit(record: ExitRecord): Promise<void> {
    return this.lock.with(record.id, async () => {
      this.applyExit(record);
      // runc's record of a dead container only holds its cgroup; dropping it now keeps
      // RemoveContainer cheap, as containerd deletes its task on exit.
      if (this.deps.store.containers.get(record.id)?.state !== 'EXITED') return;
      await this.deps.runc.delete(record.id).catch((err: unknown) => {
        this.deps.logger.warn(
          { container: record.id, err: errorMessage(err) },
          'runc delete after exit failed',
        );
      });
    });
  }

  async create(podSandboxId: string, spec: ContainerSpec): Promise<string> {
    const podId = findSandbox(this.deps.store, podSandboxId, false).id;
    return this.deps.pods.enter(podId, () => this.createInPod(podId, spec));
  }

  private async createInPod(podId: string, spec: ContainerSpec): Promise<string> {
    const { config, store, images } = this.deps;
    // Read again inside the gate: a Stop or Remove that closed the pod meanwhile is finished now.
    const sandbox = findSandbox(store, podId, false);
    if (sandbox.state !== 'READY' || sandbox.pid <= 0) {
      throw new FailedPreconditionError(`pod sandbox ${sandbox.id} is not ready`);
    }
    const resolved = images.resolve(spec.image);
    if (!resolved) throw new NotFoundError('image', spec.image);
    const image = resolved.record;
    const imageConfig = JSON.parse(image.configJson) as ImageConfig;
    const sandboxSpec = JSON.parse(sandbox.configJson) as SandboxSpec;

    const id = randomBytes(32).toString('hex');
    const log = this.deps.logger.child({ container: id, sandbox: sandbox.id });
    const dir = containerDir(id, config.rootDir);
    const bundleDir = join(dir, 'bundle');
    const logPath =
      sandboxSpec.logDirectory && spec.logPath ? join(sandboxSpec.logDirectory, spec.logPath) : '';
    // Containers nest in their pod's cgroup parent, so pod-level limits and accounting cover them.
    const cgroups = cgroupsPath(config.cgroupDriver, sandboxSpec.cgroupParent, id);

    // The row is the journal, written first: a crash later leaves a CREATING row that start-up
    // rolls back. It also reserves the (sandbox, name, attempt) triple.
    store.containers.insert({
      id,
      sandboxId: sandbox.id,
      name: spec.metadata.name,
      attempt: spec.metadata.attempt,
      state: 'CREATING',
      step: 'reserve',
      configJson: JSON.stringify(spec),
      imageName: spec.image,
      imageId: image.id,
      createdAt: nowNanos(),
      startedAt: '0',
      finishedAt: '0',
      exitCode: 0,
      reason: '',
      message: '',
      pid: 0,
      monitorPid: 0,
      logPath,
      bundleDir,
      cgroupsPath: cgroups,
      userJson: '{}',
    });

    const steps = new Steps(log, async (step) => {
      store.containers.update(id, { step });
      await pauseIfAsked(
        {
          pauseBeforeStep: this.deps.pauseBeforeStep,
          stateDir: this.deps.config.stateDir,
          operation: 'CreateContainer',
        },
        step,
        log,
      );
    });
    try {
      const rootfs = await steps.run('rootfs', async () => {
        steps.onUndo('rootfs', () => removeRootfs(id, config.rootDir));
        return prepareRootfs(id, imageConfig.rootfs.diff_ids, config.rootDir);
      });
      await steps.run('spec', async () => {
        const prepared = await prepareSpec({
          containerId: id,
          spec,
          sandbox,
          sandboxSpec,
          image: { name: spec.image, config: imageConfig.config ?? {} },
          rootfsPath: rootfs,
          cgroupsPath: cgroups,
          targetPid: this.targetPid(spec, sandbox),
          guard: await this.mountGuard(),
        });
        await mkdir(bundleDir, { recursive: true, mode: 0o700 });
        await writeFile(join(bundleDir, 'config.json'), JSON.stringify(prepared.spec));
        store.containers.update(id, { userJson: JSON.stringify(prepared.user) });
        for (const note of prepared.notes) log.warn(note);
      });
      await steps.run('monitor', async () => {
        steps.onUndo('monitor', () => this.discardProcess(id));
        const created = await this.deps.conmon.create({
          id,
          name: `${sandboxSpec.metadata.namespace}_${sandboxSpec.metadata.name}_${spec.metadata.name}`,
          bundleDir,
          logPath,
          stdin: spec.stdin,
          stdinOnce: spec.stdinOnce,
          tty: spec.tty,
        });
        store.containers.update(id, { pid: created.pid, monitorPid: created.monitorPid });
      });
      store.containers.update(id, { state: 'CREATED', step: 'created' });
      steps.release();
      log.info({ name: spec.metadata.name, stepsMs: steps.timingsMs }, 'container created');
      return id;
    } catch (err) {
      const failure = err instanceof StepError ? err : new StepError('create', err);
      log.error({ step: failure.step, err: failure.message }, 'CreateContainer failed, undoing');
      const failedUndos = await steps.unwind();
      if (failedUndos.length === 0) {
        store.containers.delete(id);
      } else {
        // Visible as exited, so kubelet's garbage collection removes it and retries the cleanup.
        store.containers.update(id, {
          state: 'EXITED',
          exitCode: 128,
          reason: 'CreateError',
          message: failure.message,
          finishedAt: nowNanos(),
          pid: 0,
        });
      }
      throw failure;
    }
  }

  async start(idOrPrefix: string): Promise<void> {
    const found = this.resolve(idOrPrefix);
    await this.deps.pods.enter(found.sandboxId, () => this.startInPod(found.id));
  }

  private async startInPod(id: string): Promise<void> {
    await this.lock.with(id, async () => {
      const row = this.mustGet(id);
      if (row.state !== 'CREATED') {
        throw new FailedPreconditionError(`container ${row.id} is ${stateWord(row)}, not created`);
      }
      const startedAt = nowNanos();
      try {
        await this.deps.runc.start(row.id);
      } catch (err) {
        // A start that went through before an error (or a retry after a crash) is a start.
        if ((await this.deps.runc.state(row.id).catch(() => null))?.status === 'running') {
          this.deps.store.containers.update(row.id, { state: 'RUNNING', startedAt });
          return;
        }
        this.deps.store.containers.update(row.id, {
          state: 'EXITED',
          startedAt,
          finishedAt: nowNanos(),
          exitCode: 128,
          reason: 'StartError',
          message: errorMessage(err),
        });
        throw new StepError('start', err);
      }
      this.deps.store.containers.update(row.id, { state: 'RUNNING', startedAt });
      this.deps.logger.info({ container: row.id }, 'container started');
    });
    // An exit that raced the start waited for the lock; make sure it is not lost.
    const exited = await this.deps.exits.read(id);
    if (exited) await this.onExit(exited);
  }

  /** Idempotent: stopping an exited container is a no-op. timeoutSeconds 0 kills at once. */
  async stop(idOrPrefix: string, timeoutSeconds: number): Promise<void> {
    const found = this.resolve(idOrPrefix);
    await this.lock.with(found.id, () => this.stopLocked(found.id, timeoutSeconds));
  }

  private async stopLocked(id: string, timeoutSeconds: number): Promise<void> {
    const { runc, exits } = this.deps;
    const row = this.mustGet(id);
    if (row.state === 'EXITED' || row.state === 'CREATING') return;
    const already = await exits.read(id);
    if (already) {
      this.applyExit(already);
      return;
    }
    if (row.state === 'RUNNING' && timeoutSeconds > 0) {
      await runc.kill(id, this.stopSignal(row));
      const exited = await exits.wait(id, timerMs(timeoutSeconds));
      if (exited) {
        this.applyExit(exited);
        return;
      }
      this.deps.logger.info({ container: id, timeoutSeconds }, 'stop timeout expired: SIGKILL');
    }
    await runc.kill(id, 'SIGKILL', true);
    const monitored = row.monitorPid > 0 && (await isRunning(row.monitorPid));
    const killed = await exits.wait(id, monitored ? KILL_WAIT_MS : UNMONITORED_KILL_WAIT_MS);
    if (killed) {
      this.applyExit(killed);
      return;
    }
    // No exit file: its conmon is gone (killed, or lost in a crash). The process' fate is known,
    // though: it was SIGKILLed; only the monitor's record of it is missing.
    const state = await runc.state(id);
    const alive = state !== null && state.status !== 'stopped' && (await isRunning(state.pid));
    if (alive) throw new StepError('stop', new Error(`container ${id} did not exit after SIGKILL`));
    this.deps.store.containers.update(id, {
      state: 'EXITED',
      exitCode: 137,
      finishedAt: nowNanos(),
      reason: 'Error',
      message: 'killed by StopContainer; its monitor was gone, so the exit was not recorded by conmon',
      pid: 0,
    });
  }

  /** Idempotent: an unknown id is success. A running container is killed first. */
  async remove(idOrPrefix: string): Promise<void> {
    const found = this.resolveOptional(idOrPrefix);
    if (!found) return;
    await this.lock.with(found.id, async () => {
      const row = this.deps.store.containers.get(found.id);
      if (!row) return;
      if (row.state === 'CREATED' || row.state === 'RUNNING') await this.stopLocked(row.id, 0);
      await this.discardProcess(row.id);
      await removeRootfs(row.id, this.deps.config.rootDir);
      this.deps.store.containers.delete(row.id);
      this.specCache.delete(row.id);
      this.deps.logger.info({ container: row.id }, 'container removed');
    });
  }

  /**
   * Stops every container of a pod, for StopPodSandbox: kubelet already gave them their grace.
   * Called with the pod's gate closed: no create is under way, so no row is CREATING.
   */
  async stopAllInSandbox(sandboxId: string): Promise<void> {
    const rows = this.deps.store.containers.listBySandbox(sandboxId).filter((r) => r.state !== 'CREATING');
    await Promise.all(rows.map((row) => this.stop(row.id, 0)));
  }

  async removeAllInSandbox(sandboxId: string): Promise<void> {
    const rows = this.deps.store.containers.listBySandbox(sandboxId).filter((r) => r.state !== 'CREATING');
    await Promise.all(rows.map((row) => this.remove(row.id)));
  }

  async status(
    idOrPrefix: string,
    verbose: boolean,
  ): Promise<{ view: ContainerView; info?: ContainerVerboseInfo }> {
    // kubelet asks for the status of what it believes runs: a dead monitor is noticed right here.
    const found = this.resolve(idOrPrefix);
    await this.checkMonitor(found);
    const row = this.mustGet(found.id);
    const view = this.toView(row);
    if (!verbose) return { view };
    const runtimeSpec: unknown = await readFile(join(row.bundleDir, 'config.json'), 'utf8')
      .then((text) => JSON.parse(text) as unknown)
      .catch(() => null);
    return {
      view,
      info: {
        pid: row.pid,
        sandboxId: row.sandboxId,
        bundleDir: row.bundleDir,
        rootfs: join(containerDir(row.id, this.deps.config.rootDir), 'rootfs'),
        runtimeSpec,
      },
    };
  }

  list(filter: ContainerFilter): ContainerView[] {
    const images = new Map<string, ImageName>();
    return this.select(filter).map((row) => this.toView(row, images));
  }

  /** The rows a CRI filter selects (creates in progress are not containers yet). */
  private select(filter: ContainerFilter): ContainerRow[] {
    const { store } = this.deps;
    let rows = filter.id ? store.containers.findByIdPrefix(filter.id) : store.containers.list();
    if (filter.podSandboxId) {
      const sandboxIds = new Set(
        store.getSandbox(filter.podSandboxId)
          ? [filter.podSandboxId]
          : store.findSandboxesByIdPrefix(filter.podSandboxId).map((s) => s.id),
      );
      rows = rows.filter((row) => sandboxIds.has(row.sandboxId));
    }
    return rows
      .filter((row) => row.state !== 'CREATING')
      .filter((row) => !filter.state || stateName(row) === filter.state)
      .filter((row) => matchesLabels(this.specOf(row).labels, filter.labelSelector));
  }

  async updateResources(idOrPrefix: string, resources: ContainerResources): Promise<void> {
    const found = this.resolve(idOrPrefix);
    await this.lock.with(found.id, async () => {
      const row = this.mustGet(found.id);
      if (row.state !== 'CREATED' && row.state !== 'RUNNING') {
        throw new FailedPreconditionError(`container ${row.id} is ${stateWord(row)}: nothing to update`);
      }
      await this.deps.runc.update(row.id, linuxResources(await supportedResources(resources, 'linux')));
      const spec = { ...this.specOf(row), resources };
      this.deps.store.containers.update(row.id, { configJson: JSON.stringify(spec) });
    });
  }

  /** kubelet renamed the log file (rotation); conmon reopens the path. */
  async reopenLog(idOrPrefix: string): Promise<void> {
    const row = this.resolve(idOrPrefix);
    if (row.state !== 'RUNNING') {
      throw new FailedPreconditionError(`container ${row.id} is ${stateWord(row)}, not running`);
    }
    if (row.logPath === '') return;
    await this.deps.conmon.reopenLog(row.bundleDir, row.logPath);
  }

  /** A timeout is a result (timedOut), not an error: src/cri decides what kubelet must see. */
  async execSync(
    idOrPrefix: string,
    cmd: string[],
    timeoutSeconds: number,
    signal?: AbortSignal,
  ): Promise<ExecSyncResult> {
    const row = this.runningRow(idOrPrefix);
    const process = await this.execProcess(row, cmd);
    const result = await execSync(this.deps.runc, row.id, process, {
      timeoutMs: timerMs(timeoutSeconds),
      maxOutputBytes: EXEC_SYNC_OUTPUT_CAP,
      tmpDir: execDirs(this.deps.config),
      ...(signal ? { signal } : {}),
    });
    return result;
  }

  /** The full id of a running container, for the streaming RPCs to validate before they hand out a URL. */
  runningId(idOrPrefix: string): string {
    return this.runningRow(idOrPrefix).id;
  }

  /** A streaming exec: as ExecSync, with the client's streams and terminal. Resolves with the exit code. */
  async execStream(idOrPrefix: string, cmd: string[], io: ExecStreamIo): Promise<number> {
    const row = this.runningRow(idOrPrefix);
    const process = await this.execProcess(row, cmd);
    return execStream(this.deps.runc, row.id, process, io, execDirs(this.deps.config));
  }

  /** Joins the container's own stdio (held by conmon) until its output ends or the client leaves. */
  async attach(idOrPrefix: string, io: ExecStreamIo): Promise<void> {
    const row = this.runningRow(idOrPrefix);
    const spec = this.specOf(row);
    const onResize = (size: { width: number; height: number }): void => {
      this.deps.conmon.resizeTerminal(row.bundleDir, size).catch((err: unknown) => {
        this.deps.logger.debug({ container: row.id, err: errorMessage(err) }, 'terminal resize failed');
      });
    };
    if (spec.tty) {
      if (io.resize.current) onResize(io.resize.current);
      io.resize.on('resize', onResize);
    }
    try {
      await attachToMonitor(
        { socketDir: this.deps.conmon.socketDirOf(row.id), closeStdinOnEnd: spec.stdinOnce && !spec.tty },
        { ...io, stdin: spec.stdin ? io.stdin : null },
      );
    } finally {
      io.resize.off('resize', onResize);
    }
  }

  async stats(idOrPrefix: string): Promise<ContainerStatsView> {
    return this.statsOf(this.resolve(idOrPrefix));
  }

  async listStats(filter: ContainerFilter): Promise<ContainerStatsView[]> {
    return Promise.all(this.select(filter).map((row) => this.statsOf(row)));
  }

  private async statsOf(row: ContainerRow): Promise<ContainerStatsView> {
    const spec = this.specOf(row);
    const running = row.state === 'RUNNING' || row.state === 'CREATED';
    const [cgroup, disk] = await Promise.all([
      running ? readCgroupStats(row.cgroupsPath, this.deps.config.cgroupDriver) : null,
      directoryUsage(join(containerDir(row.id, this.deps.config.rootDir), 'upper')).catch(() => null),
    ]);
    const timestamp = nowNanos();
    return {
      id: row.id,
      podSandboxId: row.sandboxId,
      metadata: spec.metadata,
      labels: spec.labels,
      annotations: spec.annotations,
      cpu: cgroup ? { timestamp, usageCoreNanoSeconds: cgroup.cpuUsageNs.toString() } : null,
      memory: cgroup
        ? {
            timestamp,
            workingSetBytes: cgroup.workingSetBytes.toString(),
            usageBytes: cgroup.memoryUsageBytes.toString(),
            rssBytes: cgroup.rssBytes.toString(),
            pageFaults: cgroup.pageFaults.toString(),
            majorPageFaults: cgroup.majorPageFaults.toString(),
          }
        : null,
      writableLayer: disk
        ? {
            timestamp,
            mountpoint: this.deps.config.rootDir,
            usedBytes: disk.bytes.toString(),
            inodesUsed: disk.inodes.toString(),
          }
        : null,
    };
  }

  /**
   * A conmon that dies while berthd runs leaves no exit file, so nothing else would ever notice;
   * the daemon calls this every few seconds. One /proc read per live container.
   */
  async checkMonitors(): Promise<void> {
    for (const row of this.deps.store.containers.list()) await this.checkMonitor(row);
  }

  private async checkMonitor(row: ContainerRow): Promise<void> {
    if (row.state !== 'RUNNING' && row.state !== 'CREATED') return;
    if (row.monitorPid > 0 && (await isRunning(row.monitorPid))) return;
    await this.lock.with(row.id, async () => {
      const current = this.deps.store.containers.get(row.id);
      if (!current || (current.state !== 'RUNNING' && current.state !== 'CREATED')) return;
      const exited = await this.deps.exits.read(row.id);
      if (exited) this.applyExit(exited);
      else await settleUnmonitored(this.deps, current, { rebooted: false });
    });
  }

  /** Records an exit once; later reports of the same exit change nothing. */
  private applyExit(record: ExitRecord): void {
    if (!recordExit(this.deps.store, record)) return;
    const reason = exitReason(record);
    this.deps.logger.info({ container: record.id, exitCode: record.exitCode, reason }, 'container exited');
  }

  /** Removes runc's container, its monitor and the monitor's files. Idempotent. */
  private async discardProcess(id: string): Promise<void> {
    const row = this.deps.store.containers.get(id);
    await this.deps.conmon.release(id, row?.monitorPid ?? 0);
    await this.deps.exits.forget(id);
  }

  /**
   * berth's own dirs and files, as real paths: no hostPath source is created in them, and its
   * database and socket are never mounted. Worked out once; the paths do not move while berthd runs.
   */
  private mountGuard(): Promise<PrepareInput['guard']> {
    const { config } = this.deps;
    const real = (p: string): Promise<string> => realpath(p).catch(() => p);
    this.guard ??= (async () => {
      const db = join(config.rootDir, 'berth.db');
      return {
        noCreateUnder: await Promise.all([config.rootDir, config.stateDir].map(real)),
        forbiddenSources: await Promise.all([db, `${db}-wal`, `${db}-shm`, config.socket].map(real)),
      };
    })();
    return this.guard;
  }

  private runningRow(idOrPrefix: string): ContainerRow {
    const row = this.resolve(idOrPrefix);
    if (row.state !== 'RUNNING') {
      throw new FailedPreconditionError(`container ${row.id} is ${stateWord(row)}, not running`);
    }
    return row;
  }

  /** The container's own process (user, env, cwd, capabilities…) running `cmd` instead. */
  private async execProcess(row: ContainerRow, cmd: string[]): Promise<Process> {
    const spec = JSON.parse(await readFile(join(row.bundleDir, 'config.json'), 'utf8')) as Spec;
    if (!spec.process) throw new FailedPreconditionError(`container ${row.id} has no process spec`);
    return { ...spec.process, args: cmd, terminal: false };
  }

  private targetPid(spec: ContainerSpec, sandbox: SandboxRow): number | null {
    if (spec.security.namespaces.pid !== 'TARGET') return null;
    const target = this.resolve(spec.security.namespaces.targetId);
    if (target.sandboxId !== sandbox.id) {
      throw new InvalidArgumentError(
        'config.linux.security_context.namespace_options.target_id',
        `container ${target.id} is in another pod sandbox`,
      );
    }
    if (target.state !== 'RUNNING' || target.pid <= 0) {
      throw new FailedPreconditionError(`target container ${target.id} is not running`);
    }
    return target.pid;
  }

  private stopSignal(row: ContainerRow): string {
    const image = this.deps.store.images.getImage(row.imageId);
    if (!image) return 'SIGTERM';
    const config = JSON.parse(image.configJson) as ImageConfig;
    return config.config?.StopSignal || 'SIGTERM';
  }

  /** `images` memoises image names across one listing: containers share a few images. */
  private toView(row: ContainerRow, images?: Map<string, ImageName>): ContainerView {
    const spec = this.specOf(row);
    let image = images?.get(row.imageId);
    if (!image) {
      image = this.deps.images.nameOf(row.imageId);
      images?.set(row.imageId, image);
    }
    const user = JSON.parse(row.userJson) as { uid?: number; gid?: number; additionalGids?: number[] };
    return {
      id: row.id,
      podSandboxId: row.sandboxId,
      metadata: spec.metadata,
      image: spec.userSpecifiedImage || image.firstTag || spec.image,
      userSpecifiedImage: spec.userSpecifiedImage,
      imageRef: image.ref,
      imageId: row.imageId,
      state: stateName(row),
      createdAt: row.createdAt,
      startedAt: row.startedAt,
      finishedAt: row.finishedAt,
      exitCode: row.exitCode,
      reason: row.reason,
      message: row.message,
      labels: spec.labels,
      annotations: spec.annotations,
      mounts: spec.mounts,
      logPath: row.logPath,
      resources: spec.resources,
      user: { uid: user.uid ?? 0, gid: user.gid ?? 0, supplementalGroups: user.additionalGids ?? [] },
      pid: row.pid,
    };
  }

  private specOf(row: ContainerRow): ContainerSpec {
    const cached = this.specCache.get(row.id);
    if (cached && cached.json === row.configJson) return cached.spec;
    const spec = JSON.parse(row.configJson) as ContainerSpec;
    this.specCache.set(row.id, { json: row.configJson, spec });
    return spec;
  }

  private mustGet(id: string): ContainerRow {
    const row = this.deps.store.containers.get(id);
    if (!row) throw new NotFoundError('container', id);
    return row;
  }

  private resolve(idOrPrefix: string): ContainerRow {
    return findByIdOrPrefix(this.deps.store.containers, idOrPrefix, CONTAINER, false);
  }

  private resolveOptional(idOrPrefix: string): ContainerRow | undefined {
    return findByIdOrPrefix(this.deps.store.containers, idOrPrefix, CONTAINER, true);
  }
}

/** A container row is the create's journal: until the create is done, clients do not see it. */
const CONTAINER: RecordKind<ContainerRow> = {
  field: 'container_id',
  noun: 'container',
  plural: 'containers',
  hidden: (row) => row.state === 'CREATING',
};

/** Where each exec's process file, pid file and runc log live while it runs; swept at start-up. */
export function execDirs(config: BerthConfig): string {
  return join(config.stateDir, 'exec');
}

/** Node timers fire at once beyond 2^31-1 ms; a longer CRI timeout means "practically never". */
function timerMs(seconds: number): number {
  return Math.min(seconds * 1000, 2 ** 31 - 1);
}

function stateName(row: ContainerRow): ContainerStateName {
  switch (row.state) {
    case 'CREATED':
      return 'CONTAINER_CREATED';
    case 'RUNNING':
      return 'CONTAINER_RUNNING';
    case 'EXITED':
      return 'CONTAINER_EXITED';
    default:
      return 'CONTAINER_UNKNOWN';
  }
}

function stateWord(row: ContainerRow): string {
  return row.state.toLowerCase();
}
