/**
 * A thin client of the runc binary. Every call names berth's own `--root`, so berth only ever
 * sees and touches its own containers.
 */
import { access, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  AlreadyExistsError,
  BerthError,
  ExecError,
  FailedPreconditionError,
  NotFoundError,
} from '../errors.js';
import { run, type ExecOptions } from '../exec.js';
import { readPidFile } from '../process/index.js';
import type { LinuxResources } from '../oci/spec.js';
import { PRIVATE_FILE } from '../file-modes.js';

export interface RuncOptions {
  /** Path or name of the runc binary. */
  binary: string;
  /** runc's state directory; keep it on tmpfs so a reboot forgets dead containers. */
  root: string;
  systemdCgroup: boolean;
  /** Deadline for each runc invocation. */
  timeoutMs: number;
}

export type ContainerStatus = 'creating' | 'created' | 'running' | 'paused' | 'stopped';

export interface ContainerState {
  id: string;
  /** 0 once the container has stopped. */
  pid: number;
  status: ContainerStatus;
  bundle: string;
}

/** runc's JSON log of the last create, kept in the bundle like containerd's shim does. */
export const CREATE_LOG = 'log.json';

/** `runc features`, as far as berth reads it. */
export interface RuntimeFeatures {
  mountOptions: string[];
  /** The org.opencontainers.runc.version annotation; crun names its own version otherwise. */
  runcVersion?: string;
}

/** What berth reads of `runc features` output; anything else in it, or missing, is ignored. */
export function parseFeatures(stdout: string): RuntimeFeatures {
  const parsed = JSON.parse(stdout) as { mountOptions?: unknown; annotations?: unknown } | null;
  const options = parsed?.mountOptions;
  const annotations = parsed?.annotations;
  const version =
    typeof annotations === 'object' && annotations !== null
      ? (annotations as Record<string, unknown>)['org.opencontainers.runc.version']
      : undefined;
  return {
    mountOptions: Array.isArray(options) ? options.filter((o): o is string => typeof o === 'string') : [],
    ...(typeof version === 'string' ? { runcVersion: version } : {}),
  };
}

/** runc's answer said something we could not understand (version skew, not a runtime failure). */
export class RuncOutputError extends BerthError {
  override name = 'RuncOutputError';
}

const STATUSES: readonly ContainerStatus[] = ['creating', 'created', 'running', 'paused', 'stopped'];

export class Runc {
  /** Read by conmon, which runs the same binary with the same root and cgroup driver. */
  readonly opts: Readonly<RuncOptions>;

  constructor(opts: RuncOptions) {
    this.opts = { ...opts };
  }

  /**
   * `runc create`: sets the container up, leaving its init waiting for start. Returns the init's
   * host pid. The container inherits runc's stdio, so runc gets /dev/null, not our pipes (see
   * ExecOptions.output), and the infra container's output is discarded. runc's error text
   * is read back from its JSON log, which also carries what the container's init said when it
   * failed (e.g. "nsexec: failed to update /proc/self/oom_score_adj"), absent from plain stderr.
   * On failure no half-made container is left behind.
   */
  async create(id: string, bundleDir: string, pidFile: string): Promise<number> {
    // Checked first so the cleanup below can never delete somebody else's container of that id.
    if ((await this.state(id)) !== null) throw new AlreadyExistsError(`container "${id}" already exists`);
    const logPath = join(bundleDir, CREATE_LOG);
    await writeFile(logPath, '', { mode: PRIVATE_FILE });
    try {
      const args = ['--log', logPath, '--log-format', 'json', 'create', '--bundle', bundleDir];
      await this.exec([...args, '--pid-file', pidFile, id], 'ignore');
    } catch (err) {
      // The step's undo, registered before this call, deletes again; the create's error is the one
      // to report.
      await this.delete(id, { force: true }).catch(() => undefined);
      throw await withLoggedReason(err, logPath);
    }
    return requirePid(pidFile);
  }

  /**
   * `runc run` of a container whose process ends by itself, for probes: returns what it printed.
   * runc deletes the container once its process has ended; a run that fails or times out is
   * deleted here.
   */
  async runToEnd(id: string, bundleDir: string): Promise<string> {
    try {
      return (await this.exec(['run', '--bundle', bundleDir, id])).stdout;
    } finally {
      await this.delete(id, { force: true }).catch(() => undefined);
    }
  }

  /** `runc start`: lets the created container's init exec its process. */
  async start(id: string): Promise<void> {
    await this.exec(['start', id]);
  }

  /** The container's state, or null when runc does not know it. */
  async state(id: string): Promise<ContainerState | null> {
    if (!(await this.known(id))) return null;
    try {
      const { stdout } = await this.exec(['state', id]);
      return parseState(JSON.parse(stdout));
    } catch (err) {
      if (isNotExist(err)) return null;
      throw err;
    }
  }

  /**
   * Sends `signal` (e.g. 'SIGTERM', 'KILL', '9') to the init, or with `all` to every process in
   * the container's cgroup. A container that is gone or already stopped counts as done.
   */
  async kill(id: string, signal: string, all = false): Promise<void> {
    try {
      await this.exec(all ? ['kill', '--all', id, signal] : ['kill', id, signal]);
    } catch (err) {
      // runc's words for these cases vary between versions; asking for the state does not.
      const st = await this.state(id);
      if (st === null || st.status === 'stopped') return;
      throw err;
    }
  }

  /** `runc delete`; `force` also kills a running container. A missing container counts as done. */
  async delete(id: string, o: { force?: boolean } = {}): Promise<void> {
    if (!(await this.known(id))) return;
    try {
      await this.exec(o.force ? ['delete', '--force', id] : ['delete', id]);
    } catch (err) {
      if (isNotExist(err) || (await this.state(id)) === null) return;
      throw err;
    }
  }

  /**
   * runc keeps each container's state in <root>/<id>; without that dir runc knows no such
   * container. Checking it saves a runc exec (10-20 ms) on the common "already gone" paths.
   */
  private async known(id: string): Promise<boolean> {
    if (id === '' || id.includes('/') || id === '.' || id === '..') return true; // let runc judge
    return access(join(this.opts.root, id)).then(
      () => true,
      () => false,
    );
  }

  /**
   * What `runc features` says of this runc: the mount options it knows (e.g. "rro") and its version;
   * no options and no version when it is too old to have the command.
   */
  async features(): Promise<RuntimeFeatures> {
    const { stdout } = await this.exec(['features']).catch(() => ({ stdout: '{}' }));
    return parseFeatures(stdout);
  }

  /** `runc pause`: freezes every process of a running container. */
  async pause(id: string): Promise<void> {
    await this.exec(['pause', id]);
  }

  /** `runc resume`; a container that is not paused, or gone, counts as done. */
  async resume(id: string): Promise<void> {
    try {
      await this.exec(['resume', id]);
    } catch (err) {
      const st = await this.state(id);
      if (st === null || st.status !== 'paused') return;
      throw err;
    }
  }

  /** All containers under berth's root. */
  async list(): Promise<ContainerState[]> {
    const { stdout } = await this.exec(['list', '--format', 'json']);
    // runc prints `null`, not `[]`, when there are none.
    const parsed: unknown = JSON.parse(stdout);
    if (parsed === null) return [];
    if (!Array.isArray(parsed)) throw new RuncOutputError(`runc list: expected an array, got ${stdout}`);
    return parsed.map(parseState);
  }

  /**
   * `runc update --resources -`: applies `resources` to the live cgroups of a created, running or
   * paused container. Only the fields present change. The JSON goes on stdin so that no temp file
   * is needed. A container runc does not know is NotFoundError; a stopped one FailedPrecondition.
   */
  async update(id: string, resources: LinuxResources): Promise<void> {
    try {
      await this.exec(['update', '--resources', '-', id], undefined, JSON.stringify(resources));
    } catch (err) {
      if (isNotExist(err)) throw new NotFoundError('container', id);
      // Only to name the cause: when runc cannot say, the update's own error is reported.
      const st = await this.state(id).catch(() => undefined);
      if (st === null) throw new NotFoundError('container', id);
      if (st?.status === 'stopped' && err instanceof ExecError) {
        throw new FailedPreconditionError(`container "${id}" is not running: ${err.stderr.trim()}`);
      }
      throw err;
    }
  }

  /**
   * The full command line of a runc invocation, global flags included, for callers that must spawn
   * runc themselves (exec-sync needs the child's pid and streamed, capped output).
   */
  command(args: readonly string[]): { file: string; args: string[] } {
    const global = ['--root', this.opts.root];
    if (this.opts.systemdCgroup) global.push('--systemd-cgroup');
    return { file: this.opts.binary, args: [...global, ...args] };
  }

  private exec(args: string[], output?: ExecOptions['output'], input?: string): Promise<{ stdout: string }> {
    const cmd = this.command(args);
    return run(cmd.file, cmd.args, { timeoutMs: this.opts.timeoutMs, output, input });
  }
}

function isNotExist(err: unknown): boolean {
  return err instanceof ExecError && /does not exist/.test(err.stderr);
}

function parseState(raw: unknown): ContainerState {
  if (typeof raw !== 'object' || raw === null) throw new RuncOutputError(`runc state: not an object`);
  const r = raw as Record<string, unknown>;
  const status = STATUSES.find((s) => s === r.status);
  if (typeof r.id !== 'string' || typeof r.pid !== 'number' || typeof r.bundle !== 'string' || !status) {
    throw new RuncOutputError(`runc state: unexpected ${JSON.stringify(raw)}`);
  }
  return { id: r.id, pid: r.pid, status, bundle: r.bundle };
}

async function requirePid(pidFile: string): Promise<number> {
  const pid = await readPidFile(pidFile);
  if (pid === null) throw new RuncOutputError(`pid file ${pidFile}: no pid in it`);
  return pid;
}

/** Replaces the exec error's text by the error and fatal entries of runc's JSON log, if any. */
async function withLoggedReason(err: unknown, logPath: string): Promise<unknown> {
  if (!(err instanceof ExecError)) return err;
  const reasons = await readLoggedErrors(logPath);
  if (reasons.length === 0) return err;
  return new ExecError(err.command, err.exitCode, reasons.join('; '), err.timedOut);
}

export async function readLoggedErrors(logPath: string): Promise<string[]> {
  let text: string;
  try {
    text = await readFile(logPath, 'utf8');
  } catch {
    return [];
  }
  const reasons: string[] = [];
  for (const line of text.split('\n')) {
    const entry = parseLogLine(line);
    if (entry && (entry.level === 'error' || entry.level === 'fatal')) reasons.push(entry.msg);
  }
  return reasons;
}

function parseLogLine(line: string): { level: string; msg: string } | null {
  if (line.trim() === '') return null;
  try {
    const v: unknown = JSON.parse(line);
    if (typeof v !== 'object' || v === null) return null;
    const { level, msg } = v as Record<string, unknown>;
    return typeof level === 'string' && typeof msg === 'string' ? { level, msg } : null;
  } catch {
    return null;
  }
}
