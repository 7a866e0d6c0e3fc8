/**
 * The seam between berth's services and the OCI runtime that runs their containers. Services say
 * what they want done to a container; only src/runtime/ knows which programs do it and with which
 * arguments (runc, and conmon as each container's monitor). There is one RuntimeHandler per
 * configured handler (kubelet's RuntimeClass handler), made once at start-up (handlers.ts).
 */
import type { WeightConversion } from '../cgroups/index.js';
import type { LinuxResources, Process } from '../oci/spec.js';
import type { AttachIo } from './attach.js';
import type { MonitorCreateRequest, MonitorCreated } from './conmon.js';
import type { ExecStreamIo } from './exec-stream.js';
import type { ExecSyncOptions, ExecSyncResult } from './exec-sync.js';
import type { ContainerState } from './runc.js';

/** What a handler can do beyond the basics, probed once when it is opened. */
export interface HandlerFeatures {
  recursiveReadOnlyMounts: boolean;
  /** What kubelet is told: pods of their own user namespace can run. */
  userNamespaces: boolean;
  /**
   * The runtime ran a container that joined a pinned user namespace by path (userns-probe.ts);
   * false too where the host cannot idmap, so that it was not tried.
   */
  joinsUserNamespace: boolean;
  /** criu passed `criu check` on this host and the handler's runtime has a `checkpoint` command. */
  checkpointRestore: boolean;
  /** Why each feature kubelet or a user may ask for is off, for the log, verbose Status and refusals. */
  off: Partial<Record<OptionalFeature, string>>;
  /** How the runtime turns cpu shares into a v2 weight, and why berth thinks so; pod cgroups follow it. */
  cpuWeight: { conversion: WeightConversion; why: string };
}

/** The features a probe may turn off. */
export type OptionalFeature = 'recursiveReadOnlyMounts' | 'userNamespaces' | 'checkpointRestore';

/** A container as its monitor knows it: the id, and the bundle holding the monitor's control fifos. */
export interface MonitoredContainer {
  id: string;
  bundleDir: string;
}

/** The life of a container, from its creation to its deletion. */
export interface ContainerVerbs {
  /**
   * Called as a create begins, well before `create`, so that what the monitor needs (its cgroup)
   * gets ready while the rootfs and spec are made.
   */
  prepareForCreate(): void;
  /**
   * Creates the container of a bundle under a new monitor, which then holds its stdio, writes its
   * log and records its exit; it is left created, for `start`. Throws MonitorError with the
   * runtime's or the monitor's words, and leaves nothing behind.
   */
  create(req: MonitorCreateRequest): Promise<MonitorCreated>;
  /**
   * Creates the container of a bundle with no monitor: its output is discarded and nobody records
   * its exit (a pod's infra, which only holds namespaces). Returns its init's host pid.
   */
  createUnmonitored(id: string, bundleDir: string): Promise<number>;
  /** Lets a created container's init exec its process. */
  start(id: string): Promise<void>;
  /**
   * Sends `signal` ('SIGTERM', 'KILL', '9'…) to the init, or with `all` to every process in the
   * container's cgroup. A container that is gone or stopped counts as done.
   */
  kill(id: string, signal: string, opts?: { all?: boolean }): Promise<void>;
  /** `force` also kills a running container. A missing container counts as done. */
  delete(id: string, opts?: { force?: boolean }): Promise<void>;
  /** The runtime's view of a container, or null when it does not know it. */
  state(id: string): Promise<ContainerState | null>;
  /** Every container this handler's runtime knows. */
  list(): Promise<ContainerState[]>;
  /** Applies the fields present to the live cgroups of a created, running or paused container. */
  updateResources(id: string, resources: LinuxResources): Promise<void>;
  /**
   * Everything of a container's monitoring goes: its monitor (only if `monitorPid` is still it),
   * the runtime's container, and the monitor's exit, persist and socket files. Idempotent.
   */
  release(id: string, monitorPid: number): Promise<void>;
}

/** What ExecSync asks for; where the runtime keeps its per-exec files is its own business. */
export type RuntimeExecSyncOptions = Omit<ExecSyncOptions, 'tmpDir'>;

/** Processes in a running container besides its own, and its own stdio, held by its monitor. */
export interface ProcessVerbs {
  /** Runs `process` to its end, output collected; a timeout is a result (timedOut), not an error. */
  execSync(id: string, process: Process, opts: RuntimeExecSyncOptions): Promise<ExecSyncResult>;
  /** Runs `process` with the client's streams and terminal; resolves with its exit code. */
  execStream(id: string, process: Process, io: ExecStreamIo): Promise<number>;
  /** Joins the container's own stdio until its output ends, the client leaves, or the client's stdin ends without closeStdinOnEnd. */
  attach(id: string, io: AttachIo, opts: { closeStdinOnEnd: boolean }): Promise<void>;
  /** The new size of the terminal the monitor holds for a container made with a tty. */
  resizeTerminal(container: MonitoredContainer, size: { width: number; height: number }): Promise<void>;
  /** Has the monitor reopen the container's log file (kubelet rotated it); resolves once it has. */
  reopenLog(container: MonitoredContainer, logPath: string): Promise<void>;
}

/** A container to bring back from a checkpoint under a new monitor, as `create` does for a fresh one. */
export interface RestoreRequest extends Omit<MonitorCreateRequest, 'restore'> {
  /** criu's image dir, as `runc checkpoint --image-path` wrote it. */
  imagePath: string;
  /** criu's work dir (its restore.log): made by the restore and removed once it is done. */
  workPath: string;
}

/** How a checkpoint is taken; the dirs are the caller's, made before and removed after. */
export interface CheckpointOptions {
  /** Where criu writes its images. */
  imageDir: string;
  /** criu's own files: its log (dump.log) and its socket. */
  workDir: string;
  /** The container runs on after the dump instead of being killed. */
  leaveRunning: boolean;
  timeoutMs: number;
}

/**
 * A container's processes saved to files with criu, and made again from them. Offered by every
 * handler; only one whose features say checkpointRestore can carry them out.
 */
export interface CheckpointVerbs {
  /**
   * Dumps a running or paused container's processes into `opts.imageDir`. A container paused
   * before stays paused. One that was running runs again after a failed dump, and after a
   * successful one with `leaveRunning` (without, it ends). Throws with the tail of criu's log when
   * criu fails.
   */
  checkpoint(id: string, opts: CheckpointOptions): Promise<void>;
  /** Pauses a running container (cgroup freezer). */
  pause(id: string): Promise<void>;
  /** Resumes a paused container; one that is not paused (or gone) counts as done. */
  resume(id: string): Promise<void>;
  /**
   * Restores the processes of a checkpoint into the container of a bundle (whose spec names the new
   * pod's namespaces and cgroup) under a new monitor, which then holds its stdio, writes its log and
   * records its exit, as for a started container: it is left running. Throws MonitorError with
   * the runtime's words and the end of criu's restore.log, and leaves nothing behind.
   */
  restore(req: RestoreRequest): Promise<MonitorCreated>;
}

/** One configured handler: its name (the one kubelet asks for), what it can do, and the verbs. */
export interface RuntimeHandler extends ContainerVerbs, ProcessVerbs, CheckpointVerbs {
  readonly name: string;
  readonly features: HandlerFeatures;
}
