/**
 * The one kind of handler berth has: a runc-compatible binary with a root of its own, each
 * container under a conmon. The one Runc is shared with that conmon, so both always agree on the
 * binary, the root and the cgroup driver.
 */
import { join } from 'node:path';
import type { LinuxResources, Process } from '../oci/spec.js';
import { attachToMonitor, type AttachIo } from './attach.js';
import { checkpointWithRunc } from './checkpoint.js';
import type { Conmon, MonitorCreateRequest, MonitorCreated } from './conmon.js';
import { execStream, type ExecStreamIo } from './exec-stream.js';
import { execSync, type ExecSyncResult } from './exec-sync.js';
import { restoreUnderMonitor } from './restore.js';
import type { ContainerState, Runc } from './runc.js';
import type {
  CheckpointOptions,
  HandlerFeatures,
  MonitoredContainer,
  RestoreRequest,
  RuntimeExecSyncOptions,
  RuntimeHandler,
} from './runtime.js';

/** Where runc writes the pid of a container created without a monitor, in its bundle. */
const UNMONITORED_PID_FILE = 'infra.pid';

export interface RuncConmonParts {
  name: string;
  runc: Runc;
  /** Built with the same `runc`. */
  conmon: Conmon;
  features: HandlerFeatures;
  /** Parent of the per-exec temp dirs (process.json, pid file, runc's log); emptied at start-up. */
  execDir: string;
}

export class RuncConmonHandler implements RuntimeHandler {
  readonly name: string;
  readonly features: HandlerFeatures;
  private readonly runc: Runc;
  private readonly conmon: Conmon;
  private readonly execDir: string;

  constructor(parts: RuncConmonParts) {
    this.name = parts.name;
    this.features = parts.features;
    this.runc = parts.runc;
    this.conmon = parts.conmon;
    this.execDir = parts.execDir;
  }

  prepareForCreate(): void {
    this.conmon.prepareForCreate();
  }

  create(req: MonitorCreateRequest): Promise<MonitorCreated> {
    return this.conmon.create(req);
  }

  restore(req: RestoreRequest): Promise<MonitorCreated> {
    return restoreUnderMonitor(this.conmon, req);
  }

  createUnmonitored(id: string, bundleDir: string): Promise<number> {
    return this.runc.create(id, bundleDir, join(bundleDir, UNMONITORED_PID_FILE));
  }

  checkpoint(id: string, opts: CheckpointOptions): Promise<void> {
    return checkpointWithRunc(this.runc, id, opts);
  }

  pause(id: string): Promise<void> {
    return this.runc.pause(id);
  }

  resume(id: string): Promise<void> {
    return this.runc.resume(id);
  }

  start(id: string): Promise<void> {
    return this.runc.start(id);
  }

  kill(id: string, signal: string, opts: { all?: boolean } = {}): Promise<void> {
    return this.runc.kill(id, signal, opts.all ?? false);
  }

  delete(id: string, opts: { force?: boolean } = {}): Promise<void> {
    return this.runc.delete(id, opts);
  }

  state(id: string): Promise<ContainerState | null> {
    return this.runc.state(id);
  }

  list(): Promise<ContainerState[]> {
    return this.runc.list();
  }

  updateResources(id: string, resources: LinuxResources): Promise<void> {
    return this.runc.update(id, resources);
  }

  release(id: string, monitorPid: number): Promise<void> {
    return this.conmon.release(id, monitorPid);
  }

  execSync(id: string, process: Process, opts: RuntimeExecSyncOptions): Promise<ExecSyncResult> {
    return execSync(this.runc, id, process, { ...opts, tmpDir: this.execDir });
  }

  execStream(id: string, process: Process, io: ExecStreamIo): Promise<number> {
    return execStream(this.runc, id, process, io, this.execDir);
  }

  attach(id: string, io: AttachIo, opts: { closeStdinOnEnd: boolean }): Promise<void> {
    return attachToMonitor({ socketDir: this.conmon.socketDirOf(id), ...opts }, io);
  }

  resizeTerminal(container: MonitoredContainer, size: { width: number; height: number }): Promise<void> {
    return this.conmon.resizeTerminal(container.bundleDir, size);
  }

  reopenLog(container: MonitoredContainer, logPath: string): Promise<void> {
    return this.conmon.reopenLog(container.bundleDir, logPath);
  }
}
