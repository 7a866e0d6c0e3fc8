/**
 * ExecSync: runs a command in a running container with `runc exec` and collects its output.
 *
 * runc is spawned directly rather than through run() because we need its pid (to tell the exec'd
 * process apart from a recycled pid on timeout) and must cap the output while it streams.
 *
 * Behaviour worth knowing, learnt from kubelet and containerd:
 * - kubelet's exec prober keeps only 10 KiB of combined output (pkg/probe/exec maxReadLength);
 *   containerd caps each stream at 16 MiB so that the reply fits its gRPC limit. The caller picks
 *   the cap (the daemon uses EXEC_SYNC_OUTPUT_CAP); output past it is read and discarded, so the
 *   command never blocks on a full pipe.
 * - On timeout containerd SIGKILLs the exec'd process and fails the call with an error wrapping
 *   context.DeadlineExceeded, which reaches kubelet as gRPC DeadlineExceeded; kubelet's remote
 *   runtime turns exactly that code into its "command timed out" error (a failed probe, not an
 *   errored one). Here a timeout is a result with timedOut set, for the service layer to map.
 * - Non-detached `runc exec` copies the process' stdio through pipes of its own and only exits once
 *   every holder of those pipes has closed them, so `sh -c 'daemon &'` lasts as long as the daemon.
 *   containerd's default (drain_exec_sync_io_timeout = 0) waits the same way; the timeout, when
 *   set, bounds the whole call including that wait.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable } from 'node:stream';
import { ExecError, InvalidArgumentError } from '../errors.js';
import { checkSpawned } from '../process/spawn.js';
import {
  KILL_GRACE_MS,
  execCommand,
  killExecProcess,
  killGroup,
  runcVerdict,
  signalExitCode,
  withExecFiles,
} from './exec-process.js';
import type { Runc } from './runc.js';
import type { Process } from '../oci/spec.js';

/**
 * What ExecSync keeps of each stream: enough for any probe (kubelet reads 10 KiB) or
 * `crictl exec -s`, bounded so that a chatty command cannot exhaust berthd (CVE-2022-1708).
 */
export const EXEC_SYNC_OUTPUT_CAP = 16 * 1024 * 1024;

/** After runc has exited, how long its stdio may stay open before we stop reading. */
const DRAIN_MS = 2_000;

export interface ExecSyncResult {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number;
  /** The command did not finish within the request's timeout and was killed. */
  timedOut: boolean;
}

export interface ExecSyncOptions {
  /** 0 means no timeout. */
  timeoutMs: number;
  /** Cap for stdout and for stderr, each. */
  maxOutputBytes: number;
  /** Parent of the per-exec temp dir (process.json, pid file, runc log); default os.tmpdir(). */
  tmpDir?: string;
  /** The caller went away (the RPC was cancelled): the command is killed as on a timeout. */
  signal?: AbortSignal;
}

/**
 * Runs `process` (the container's process spec with args replaced) in container `id`. Resolves
 * with the command's exit code (128+n when a signal killed it, as runc reports it), or with
 * timedOut set after killing it on timeout; then exitCode is what runc reported for the killed
 * process, typically 137, or 128+n for the signal that killed runc. Throws
 * FailedPreconditionError when the container is not running, ExecError when runc could not
 * start the process, with runc's reason; a command that does not exist or may not be executed is
 * a result instead: exit code 127 or 126 with the reason on stderr, as a shell reports it.
 */
export async function execSync(
  runc: Runc,
  id: string,
  process: Process,
  opts: ExecSyncOptions,
): Promise<ExecSyncResult> {
  if (process.args.length === 0) throw new InvalidArgumentError('cmd', 'must not be empty');
  if (!Number.isInteger(opts.maxOutputBytes) || opts.maxOutputBytes < 0) {
    throw new InvalidArgumentError(
      'maxOutputBytes',
      `must be a non-negative integer, got ${opts.maxOutputBytes}`,
    );
  }
  if (!Number.isFinite(opts.timeoutMs) || opts.timeoutMs < 0) {
    throw new InvalidArgumentError('timeout', `must be non-negative, got ${opts.timeoutMs}`);
  }
  return withExecFiles({ ...process, terminal: false }, opts.tmpDir, async (files) => {
    // No console socket is ever handed to runc, so a terminal cannot be honoured.
    const cmd = execCommand(runc, id, files, false);
    const outcome = await spawnExec(cmd, files.pid, opts);
    const command = [cmd.file, ...cmd.args].join(' ');
    if (outcome.timedOut) {
      const exitCode = outcome.exitCode ?? (outcome.signal ? signalExitCode(outcome.signal) : -1);
      return { stdout: outcome.stdout, stderr: outcome.stderr, exitCode, timedOut: true };
    }
    const missing = await runcVerdict(runc, id, command, files.log, outcome.exitCode);
    if (missing) {
      return {
        stdout: Buffer.alloc(0),
        stderr: Buffer.from(`${missing.message}\n`),
        exitCode: missing.exitCode,
        timedOut: false,
      };
    }
    if (outcome.exitCode === null) {
      throw new ExecError(command, undefined, `runc was killed by ${outcome.signal ?? 'a signal'}`, false);
    }
    return { stdout: outcome.stdout, stderr: outcome.stderr, exitCode: outcome.exitCode, timedOut: false };
  });
}

interface ExecOutcome {
  stdout: Buffer;
  stderr: Buffer;
  /** runc's exit code; null when runc died of a signal. */
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
}

function spawnExec(
  cmd: { file: string; args: string[] },
  pidFile: string,
  opts: ExecSyncOptions,
): Promise<ExecOutcome> {
  return new Promise((resolve, reject) => {
    // runc leads its own process group so that a last-resort kill also takes its runc init helpers.
    const child = checkSpawned(
      spawn(cmd.file, cmd.args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true }),
      cmd.file,
    );
    const stdout = new CappedBuffer(opts.maxOutputBytes);
    const stderr = new CappedBuffer(opts.maxOutputBytes);
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));

    let exited = false;
    let timedOut = false;
    const timers: NodeJS.Timeout[] = [];
    const clearTimers = (): void => timers.forEach((t) => clearTimeout(t));

    child.on('error', (err) => {
      clearTimers();
      child.stdout.destroy();
      child.stderr.destroy();
      reject(new ExecError([cmd.file, ...cmd.args].join(' '), undefined, err.message, false));
    });
    child.on('exit', () => {
      exited = true;
      // Only runc holds our pipes, so they close with it; this is a guard, not the usual path.
      timers.push(setTimeout(() => destroyStdio(child), DRAIN_MS));
    });
    child.on('close', (code, signal) => {
      clearTimers();
      resolve({ stdout: stdout.toBuffer(), stderr: stderr.toBuffer(), exitCode: code, signal, timedOut });
    });

    const kill = (): void => {
      if (exited || timedOut) return;
      timedOut = true;
      void killExecProcess(child.pid, pidFile, () => exited).then((killedProcess) => {
        if (exited) return;
        // Without a pid there is nothing better than runc itself; otherwise runc gets a moment
        // to reap its process and report, and is killed if its pipes are held by a descendant.
        if (!killedProcess) killGroup(child.pid);
        else timers.push(setTimeout(() => killGroup(child.pid), KILL_GRACE_MS));
      });
    };
    if (opts.timeoutMs > 0) timers.push(setTimeout(kill, opts.timeoutMs));
    if (opts.signal) {
      if (opts.signal.aborted) kill();
      else opts.signal.addEventListener('abort', kill, { once: true });
      child.once('close', () => opts.signal?.removeEventListener('abort', kill));
    }
  });
}

function destroyStdio(child: ChildProcessByStdio<null, Readable, Readable>): void {
  child.stdout.destroy();
  child.stderr.destroy();
}

/** Keeps the first `cap` bytes pushed to it and drops the rest. */
class CappedBuffer {
  private readonly chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly cap: number) {}

  push(chunk: Buffer): void {
    const room = this.cap - this.size;
    if (room <= 0) return;
    // A copy of a partial chunk, so the dropped remainder is not kept alive by a view.
    const kept = chunk.length <= room ? chunk : Buffer.from(chunk.subarray(0, room));
    this.chunks.push(kept);
    this.size += kept.length;
  }

  toBuffer(): Buffer {
    return Buffer.concat(this.chunks, this.size);
  }
}
