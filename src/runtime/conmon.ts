/**
 * Runs containers under conmon, the monitor CRI-O uses. conmon calls `runc create`, holds the
 * container's stdio and writes it to the CRI log file, writes the exit code when the container
 * ends, and outlives berthd (it daemonizes: double fork, new session). berthd then only talks to
 * runc (start, kill, delete) and reads conmon's files.
 *
 * Layout, per container `id`:
 *   <bundleDir>/config.json         the OCI spec (written by the caller)
 *   <bundleDir>/pid                 the container init's host pid (conmon -p)
 *   <bundleDir>/conmon.pid          the conmon daemon's pid (conmon -P)
 *   <bundleDir>/conmon.log          conmon's own stdout and stderr until it daemonizes
 *   <bundleDir>/log.json            runc's JSON log of the create (CREATE_LOG, as Runc.create)
 *   <bundleDir>/ctl, winsz          conmon's control fifos (reopen log, resize), attach: its socket
 *   <exitDir>/<id>                  exit code in decimal, written by conmon when the init exits
 *   <persistDir>/<id>/exit          the same code again (conmon --persist-dir)
 *   <persistDir>/<id>/oom           empty; present when the memory cgroup had an OOM kill
 *   <socketDir>/<id> -> bundleDir   conmon's symlink, keeping the attach socket path short
 *
 * On cgroup v1 conmon learns OOM kills from an eventfd on memory.oom_control and creates the
 * `oom` marker before it writes the exit file, so the marker is there when the exit is seen.
 * conmon's working directory is the persist directory: it also drops an `oom` file in its cwd.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, open, readFile, rm, stat, writeFile, type FileHandle } from 'node:fs/promises';
import { Writable } from 'node:stream';
import { isAbsolute, join } from 'node:path';
import {
  AlreadyExistsError,
  BerthError,
  FailedPreconditionError,
  InvalidArgumentError,
  errorMessage,
} from '../errors.js';
import { findProgram } from '../exec.js';
import { reopenLog, resizeTerminal } from './conmon-control.js';
import { START_PIPE_FD, awaitSyncMessage, conmonEnv, exitCodeOf, type SyncOutcome } from './conmon-sync.js';
import { CREATE_LOG, readLoggedErrors, type Runc } from './runc.js';
import { isRunning, killQuietly, parentPid, readPidFile, waitForExit } from '../process/index.js';
import { checkSpawned } from '../process/spawn.js';
import type { MonitorCgroup } from '../cgroups/monitor.js';
import { beforeDeadline } from '../kit/deadline.js';
import { allSettledOrThrow } from '../kit/settle.js';
import { MONITOR_ID_PATTERN } from './exits.js';
import { checkLogPath, prepareLogPath } from './logs.js';
import { PRIVATE_DIR, PRIVATE_FILE } from '../file-modes.js';

export interface ConmonOptions {
  /** Path or name of the conmon binary. */
  binary: string;
  /**
   * The handler's runc, shared with the rest of berth: conmon runs its binary with its root and
   * cgroup driver, and a failed create's cleanup goes through it.
   */
  runc: Runc;
  /** Where conmon writes `<id>` exit files; the ExitWatcher watches it. */
  exitDir: string;
  /** Where conmon links `<id>` to the bundle for its attach socket: keep it short (108-byte limit). */
  socketDir: string;
  /** Parent of the per-container persist directories (OOM marker); the ExitWatcher reads it. */
  persistDir: string;
  /** Deadline for one create (conmon plus runc create), and for conmon to reopen a log. */
  timeoutMs: number;
  /** Where each conmon is moved before it forks its daemon and runc. */
  cgroup: MonitorCgroup;
}

export interface MonitorCreateRequest {
  id: string;
  /** Human-readable name, for conmon's own messages. */
  name: string;
  bundleDir: string;
  /** Absolute CRI log file path; '' discards the container's output. */
  logPath: string;
  /** Keep a stdin pipe for attach. */
  stdin: boolean;
  /** Close stdin once the first attach ends (else conmon --leave-stdin-open). */
  stdinOnce: boolean;
  /** The spec's process.terminal must agree: conmon then takes the pty from runc. */
  tty: boolean;
  /**
   * Restore from a checkpoint instead: `runc restore --detach` leaves the container running.
   * `timeoutMs` replaces the create deadline: criu reads back every memory page the dump wrote.
   */
  restore?: { imagePath: string; workPath: string; timeoutMs: number };
}

export interface MonitorCreated {
  /** The container init's host pid. */
  pid: number;
  /** The conmon daemon's pid. */
  monitorPid: number;
}

/** conmon could not create the container; `reason` is what runc or conmon said. */
export class MonitorError extends BerthError {
  override name = 'MonitorError';
  constructor(
    readonly id: string,
    readonly reason: string,
    readonly timedOut = false,
    verb: 'create' | 'restore' = 'create',
  ) {
    super(`conmon: ${verb} container ${id}${timedOut ? ' timed out' : ''}: ${reason}`);
  }
}

const CONMON_LOG = 'conmon.log';
const CONTAINER_PID_FILE = 'pid';
const MONITOR_PID_FILE = 'conmon.pid';
/** What conmon creates in the bundle; removed again when a create fails. */
const BUNDLE_ARTEFACTS = ['ctl', 'winsz', 'attach', CONTAINER_PID_FILE, MONITOR_PID_FILE];
/** A SIGKILLed process is gone within milliseconds unless the kernel is stuck. */
const KILL_WAIT_MS = 5_000;

export class Conmon {
  private runtimePath: Promise<string> | null = null;

  constructor(private readonly opts: ConmonOptions) {}

  /** The container's dir in the socket dir, a link to its bundle, where conmon's `attach` socket is. */
  socketDirOf(id: string): string {
    return join(this.opts.socketDir, id);
  }

  /** The persist directory conmon gets for `id`. */
  persistDirOf(id: string): string {
    return join(this.opts.persistDir, id);
  }

  /** Called as a create begins, well before `create`: see MonitorCgroup.prime. */
  prepareForCreate(): void {
    this.opts.cgroup.prime();
  }

  /**
   * `runc create` under a new conmon: the container is left created, for `runc start`. On failure
   * throws MonitorError with runc's or conmon's words, and leaves no container, conmon, exit file
   * or persist directory behind.
   */
  async create(req: MonitorCreateRequest): Promise<MonitorCreated> {
    validate(req);
    const timeoutMs = req.restore?.timeoutMs ?? this.opts.timeoutMs;
    // Side by side (each is a thread-pool round trip), and all before anything is removed or
    // made: the cleanup of a failed create must never delete another container's files.
    const [state, bundle, runtime] = await Promise.all([
      this.opts.runc.state(req.id),
      stat(req.bundleDir).catch(() => null),
      this.resolveRuntime(),
    ]);
    if (state !== null) throw new AlreadyExistsError(`container "${req.id}" already exists`);
    if (!bundle?.isDirectory())
      throw new FailedPreconditionError(`bundle ${req.bundleDir} is not a directory`);
    // Leftovers of an earlier container of this id would read as this one's exit.
    await this.removeMonitorFiles(req.id);
    const persistDir = this.persistDirOf(req.id);
    const opened = open(join(req.bundleDir, CONMON_LOG), 'w', PRIVATE_FILE);
    let out: FileHandle;
    try {
      await allSettledOrThrow([
        mkdir(this.opts.exitDir, { recursive: true, mode: PRIVATE_DIR }),
        mkdir(this.opts.socketDir, { recursive: true, mode: PRIVATE_DIR }),
        mkdir(persistDir, { recursive: true, mode: PRIVATE_DIR }),
        req.logPath === '' ? Promise.resolve() : prepareLogPath(req.logPath),
        writeFile(join(req.bundleDir, CREATE_LOG), '', { mode: PRIVATE_FILE }),
        opened,
      ]);
      out = await opened;
    } catch (err) {
      // The open may be what failed: then there is nothing to close.
      await opened.then((file) => file.close()).catch(() => undefined);
      // The monitor step's undo removes them again; the create's error is the one to report.
      await this.removeMonitorFiles(req.id).catch(() => undefined);
      throw err;
    }

    const started = Date.now();
    let child: ChildProcess;
    let parentExit: Promise<number | null>;
    let sync: Promise<SyncOutcome>;
    try {
      // Not exec.ts's run(): conmon needs a pipe on fd 3 and its daemon keeps that pipe (and any
      // stdio pipe) open for the container's lifetime. Its stdout and stderr go to a file instead,
      // read back when it fails.
      child = checkSpawned(
        spawn(this.opts.binary, this.args(req, runtime), {
          cwd: persistDir,
          env: conmonEnv(),
          stdio: ['ignore', out.fd, out.fd, 'pipe', 'pipe'],
          detached: true,
        }),
        this.opts.binary,
      );
      // Listening before any await: a spawn error is emitted on the next tick.
      parentExit = exitCodeOf(child);
      sync = awaitSyncMessage(child, timeoutMs);
    } catch (err) {
      // Out of file descriptors: no conmon ran, so only the files made above are left to go (and
      // the monitor step's undo removes them again if this fails).
      await this.removeMonitorFiles(req.id).catch(() => undefined);
      throw err;
    } finally {
      await out.close();
    }
    const placed = await this.releaseStart(child);
    if (placed !== null) {
      return this.fail(req, 0, `cannot move conmon into its cgroup: ${placed}`);
    }
    const outcome = await sync;
    if (outcome.kind === 'spawn-error') {
      return this.fail(req, 0, `cannot run ${this.opts.binary}: ${outcome.error.message}`);
    }
    if (outcome.kind === 'timeout') {
      // The first conmon leads its own process group (detached); its daemon has left it (setsid).
      if (child.pid !== undefined) killQuietly(-child.pid);
      killQuietly(child.pid);
      return this.fail(req, 0, `no answer within ${timeoutMs} ms`, { timedOut: true });
    }
    if (outcome.kind === 'closed' || outcome.message.data <= 0) {
      const relayed = outcome.kind === 'message' ? (outcome.message.message ?? '') : '';
      const code = await beforeDeadline(parentExit, remaining(started, timeoutMs), null);
      const fallback =
        code !== null && code !== 0
          ? `conmon exited with code ${code}`
          : 'conmon ended without reporting the container';
      return this.fail(req, 0, fallback, { relayed });
    }

    const pid = outcome.message.data;
    // The first conmon writes the daemon's pid file, then exits: once it has, the file is there.
    const code = await beforeDeadline(parentExit, remaining(started, timeoutMs), null);
    const monitorPid = code === 0 ? ((await readPidFile(join(req.bundleDir, MONITOR_PID_FILE))) ?? 0) : 0;
    if (monitorPid <= 0) {
      const how = code === null ? 'did not exit in time' : `exited with code ${code}`;
      return this.fail(req, pid, `conmon ${how} without a daemon pid file`);
    }
    return { pid, monitorPid };
  }

  /**
   * Asks the container's conmon to reopen its log file (kubelet rotated it): conmon closes the
   * old file and creates a fresh one at the log path, replacing whatever is there. With `logPath`,
   * resolves only once that fresh file exists. A container whose conmon is gone is
   * FailedPreconditionError; this never blocks on a dead conmon.
   */
  async reopenLog(bundleDir: string, logPath?: string): Promise<void> {
    await reopenLog(bundleDir, logPath, this.opts.timeoutMs);
  }

  /** Tells the container's conmon its terminal's new size; it resizes the pty it holds. */
  async resizeTerminal(bundleDir: string, size: { width: number; height: number }): Promise<void> {
    await resizeTerminal(bundleDir, size);
  }

  private args(req: MonitorCreateRequest, runtime: string): string[] {
    const bundle = req.bundleDir;
    // prettier-ignore
    const args = [
      '--api-version', '1',
      '--cid', req.id,
      '--cuuid', req.id,
      '--name', req.name,
      '--runtime', runtime,
      '--bundle', bundle,
      '--container-pidfile', join(bundle, CONTAINER_PID_FILE),
      '--conmon-pidfile', join(bundle, MONITOR_PID_FILE),
      // "none:" is conmon's null driver: output is read (the container never blocks) and dropped.
      '--log-path', req.logPath === '' ? 'none:' : `k8s-file:${req.logPath}`,
      '--exit-dir', this.opts.exitDir,
      '--socket-dir-path', this.opts.socketDir,
      '--persist-dir', this.persistDirOf(req.id),
    ];
    // runc's global flags, in front of the `create` conmon adds. --log keeps what runc's init
    // said on failure (absent from its stderr); --systemd-cgroup comes from conmon's own -s.
    // prettier-ignore
    const runtimeArgs = [
      '--root', this.opts.runc.opts.root,
      '--log', join(bundle, CREATE_LOG),
      '--log-format', 'json',
    ];
    for (const arg of runtimeArgs) args.push('--runtime-arg', arg);
    if (this.opts.runc.opts.systemdCgroup) args.push('--systemd-cgroup');
    if (req.tty) args.push('--terminal');
    if (req.stdin) args.push('--stdin');
    if (req.stdin && !req.stdinOnce) args.push('--leave-stdin-open');
    if (req.restore) {
      // conmon runs `restore --detach --image-path <dir>` in place of `create`, these after it.
      args.push('--restore', req.restore.imagePath);
      for (const opt of ['--work-path', req.restore.workPath]) args.push('--runtime-opt', opt);
    }
    return args;
  }

  /**
   * Cleans up after a failed create and throws the failure, worded by runc or conmon when they
   * said something (`fallback` otherwise). A failed cleanup is added to the message.
   */
  private async fail(
    req: MonitorCreateRequest,
    containerPid: number,
    fallback: string,
    o: { relayed?: string; timedOut?: boolean } = {},
  ): Promise<never> {
    let leftover = '';
    try {
      await this.discard(req, containerPid);
    } catch (err) {
      leftover = `; cleaning up failed too: ${errorMessage(err)}`;
    }
    const said = await this.failureReason(req.bundleDir, o.relayed ?? '');
    throw new MonitorError(req.id, `${said || fallback}${leftover}`, o.timedOut ?? false);
  }

  /**
   * Moves the waiting conmon into the monitors' cgroup, then lets it go on. When the move fails,
   * kills it before closing the pipe (EOF would let it go on too) and returns why. A conmon that
   * could not be spawned has no pid: the sync outcome reports it.
   */
  private async releaseStart(child: ChildProcess): Promise<string | null> {
    const startPipe = child.stdio[START_PIPE_FD];
    if (child.pid === undefined || !(startPipe instanceof Writable)) return null;
    try {
      await this.opts.cgroup.place(child.pid);
    } catch (err) {
      killQuietly(child.pid);
      await waitForExit(child.pid, KILL_WAIT_MS);
      startPipe.destroy();
      return errorMessage(err);
    }
    // conmon only needs the read to return; it closes its end right after.
    startPipe.on('error', () => undefined);
    startPipe.end('0');
    return null;
  }

  private resolveRuntime(): Promise<string> {
    this.runtimePath ??= findProgram(this.opts.runc.opts.binary).catch((err: unknown) => {
      this.runtimePath = null;
      throw err;
    });
    return this.runtimePath;
  }

  /**
   * Undoes a failed create: kills the conmon daemon (before it can write an exit file), deletes
   * runc's container, then removes conmon's files. `containerPid` finds a daemon whose pid file
   * is missing: conmon is the container init's parent.
   */
  private async discard(req: MonitorCreateRequest, containerPid: number): Promise<void> {
    const candidates = [
      (await readPidFile(join(req.bundleDir, MONITOR_PID_FILE))) ?? 0,
      (await parentPid(containerPid)) ?? 0,
    ];
    for (const pid of new Set(candidates)) {
      if (pid > 0 && (await isConmonOf(pid, req.id))) {
        // Its process group too: the daemon leads one (setsid), which holds a `runc create` still
        // running and the OCI hooks runc runs, such as a CDI hook that never returns.
        killQuietly(-pid);
        killQuietly(pid);
        await waitForExit(pid, KILL_WAIT_MS);
      }
    }
    await this.opts.runc.delete(req.id, { force: true });
    await this.removeMonitorFiles(req.id);
    await Promise.all(BUNDLE_ARTEFACTS.map((name) => rm(join(req.bundleDir, name), { force: true })));
  }

  /**
   * Everything of a container's monitoring goes, for RemoveContainer and repairs: its conmon (only
   * if the process still names the id: pids are reused), runc's container, the exit file, persist
   * dir and socket link. Idempotent.
   */
  async release(id: string, monitorPid: number): Promise<void> {
    if (monitorPid > 0 && (await isConmonOf(monitorPid, id))) {
      killQuietly(monitorPid);
      await waitForExit(monitorPid, KILL_WAIT_MS);
    }
    await this.opts.runc.delete(id, { force: true });
    await this.removeMonitorFiles(id);
  }

  private async removeMonitorFiles(id: string): Promise<void> {
    await Promise.all([
      rm(join(this.opts.exitDir, id), { force: true }),
      rm(join(this.opts.socketDir, id), { force: true }),
    ]);
    // Last: start-up finds a leftover socket link only through the persist dir of its id.
    await rm(this.persistDirOf(id), { recursive: true, force: true });
  }

  /**
   * The best account of a failure: runc's logged errors (they include its init's), else what
   * conmon relayed from runc's stderr, else conmon's own output.
   */
  private async failureReason(bundleDir: string, fromConmon: string): Promise<string> {
    const logged = await readLoggedErrors(join(bundleDir, CREATE_LOG));
    if (logged.length > 0) return logged.join('; ');
    if (fromConmon.trim() !== '') return fromConmon.trim();
    const own = await readFile(join(bundleDir, CONMON_LOG), 'utf8').catch(() => '');
    return (
      own
        .split('\n')
        .map((line) => line.trim())
        // Printed on every start where CAP_SYS_RESOURCE is withheld; never the reason for a failure.
        .filter((line) => line !== '' && !line.includes('oom_score_adj'))
        .join('; ')
    );
  }
}

function validate(req: MonitorCreateRequest): void {
  if (!MONITOR_ID_PATTERN.test(req.id)) {
    throw new InvalidArgumentError('id', `"${req.id}" is not a valid container id for conmon`);
  }
  if (!isAbsolute(req.bundleDir)) {
    throw new InvalidArgumentError('bundleDir', `"${req.bundleDir}" is not absolute`);
  }
  if (req.logPath !== '') checkLogPath(req.logPath);
}

function remaining(startedMs: number, timeoutMs: number): number {
  return Math.max(0, startedMs + timeoutMs - Date.now());
}

/** True when `pid` is a live conmon monitoring `id`: a reused pid must never be killed. */
export async function isConmonOf(pid: number, id: string): Promise<boolean> {
  if (!(await isRunning(pid))) return false;
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  const argv = cmdline.split('\0');
  return argv.some((arg, i) => (arg === '--cid' || arg === '-c') && argv[i + 1] === id);
}
