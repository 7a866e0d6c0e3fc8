/**
 * Streaming exec: a command in a running container, its stdio connected to the client's streams.
 *
 * Without a terminal, `runc exec` gets pipes: its output is piped to the client with backpressure
 * (a slow client slows the command, nothing piles up in berthd), and the end of the client's stdin
 * closes the command's stdin.
 *
 * With a terminal, runc itself makes the container's pty (`runc exec --tty`, in the foreground) and
 * copies between it and its own stdio; runc's stdio is a pty of berthd's (node-pty), so runc reads
 * the window size from it and passes every change on (SIGWINCH). CRI-O runs exec the same way.
 *
 * When the client goes away (the signal aborts) the exec'd process is killed, then runc; the
 * per-exec files go with the call.
 */
import { spawn } from 'node:child_process';
import type { EventEmitter } from 'node:events';
import type { Readable, Writable } from 'node:stream';
import type { IPty } from 'node-pty';
import { ExecError } from '../errors.js';
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

export interface ExecStreamIo {
  stdin: Readable | null;
  stdout: Writable | null;
  stderr: Writable | null;
  tty: boolean;
  /** Size changes; `current` is the latest, sent before there was a terminal to resize. */
  resize: EventEmitter<{ resize: [{ width: number; height: number }] }> & {
    current: { width: number; height: number } | null;
  };
  signal: AbortSignal;
}

/** Until the client says otherwise, the size of a classic terminal. */
const DEFAULT_COLS = 80;
const DEFAULT_ROWS = 24;

/** Resolves with the command's exit code; throws when runc could not run it (with runc's reason). */
export function execStream(
  runc: Runc,
  id: string,
  process: Process,
  io: ExecStreamIo,
  tmpDir?: string,
): Promise<number> {
  const spec: Process = { ...process, terminal: io.tty };
  if (io.tty && !spec.env?.some((e) => e.startsWith('TERM='))) spec.env = [...(spec.env ?? []), 'TERM=xterm'];
  return withExecFiles(spec, tmpDir, async (files) => {
    const cmd = execCommand(runc, id, files, io.tty);
    const result = io.tty ? await runWithPty(cmd, files.pid, io) : await runWithPipes(cmd, files.pid, io);
    const command = [cmd.file, ...cmd.args].join(' ');
    const missing = await runcVerdict(runc, id, command, files.log, result.exitCode);
    if (missing) {
      // runc with a terminal already printed the reason there; without one it went to its log only.
      const out = io.tty ? null : (io.stderr ?? io.stdout);
      if (out && !out.destroyed) out.write(`${missing.message}\n`);
      return missing.exitCode;
    }
    if (result.exitCode === null) {
      if (io.signal.aborted) return signalExitCode('SIGKILL');
      throw new ExecError(command, undefined, `runc was killed by ${result.signal ?? 'a signal'}`, false);
    }
    return result.exitCode;
  });
}

interface RuncResult {
  exitCode: number | null;
  signal: NodeJS.Signals | number | null;
}

function runWithPipes(
  cmd: { file: string; args: string[] },
  pidFile: string,
  io: ExecStreamIo,
): Promise<RuncResult> {
  return new Promise((resolve, reject) => {
    // runc leads its own process group so that a last-resort kill also takes its runc init helpers.
    const child = checkSpawned(
      spawn(cmd.file, cmd.args, {
        stdio: [io.stdin ? 'pipe' : 'ignore', io.stdout ? 'pipe' : 'ignore', io.stderr ? 'pipe' : 'ignore'],
        detached: true,
      }),
      cmd.file,
    );
    let exited = false;
    const stopOnAbort = onAbort(io.signal, () => {
      if (exited) return;
      void killExecProcess(child.pid, pidFile, () => exited).then(() => {
        setTimeout(() => {
          if (!exited) killGroup(child.pid);
        }, KILL_GRACE_MS).unref();
      });
    });
    if (io.stdin && child.stdin) {
      // The command may exit before reading all of its input: that is not an error of ours.
      child.stdin.on('error', () => undefined);
      io.stdin.on('error', () => child.stdin?.end());
      io.stdin.pipe(child.stdin);
    }
    if (io.stdout && child.stdout) child.stdout.pipe(io.stdout, { end: false });
    if (io.stderr && child.stderr) child.stderr.pipe(io.stderr, { end: false });
    child.on('error', (err) => {
      stopOnAbort();
      reject(new ExecError(cmd.file, undefined, err.message, false));
    });
    child.on('exit', () => {
      exited = true;
    });
    // 'close' comes once runc exited and its output pipes are drained into the client's streams.
    child.on('close', (code, signal) => {
      exited = true;
      stopOnAbort();
      if (io.stdin && child.stdin) io.stdin.unpipe(child.stdin);
      resolve({ exitCode: code, signal });
    });
  });
}

async function runWithPty(
  cmd: { file: string; args: string[] },
  pidFile: string,
  io: ExecStreamIo,
): Promise<RuncResult> {
  // Loaded by the first exec with a terminal: a berthd nobody execs into does not hold it.
  const { spawn: spawnPty } = await import('node-pty');
  return new Promise((resolve, reject) => {
    let pty: IPty;
    try {
      pty = spawnPty(cmd.file, cmd.args, {
        name: 'xterm',
        cols: io.resize.current?.width ?? DEFAULT_COLS,
        rows: io.resize.current?.height ?? DEFAULT_ROWS,
        cwd: '/',
        env: process.env,
        encoding: null,
      });
    } catch (err) {
      reject(new ExecError(cmd.file, undefined, err instanceof Error ? err.message : String(err), false));
      return;
    }
    let exited = false;
    const out = io.stdout;
    // With encoding null node-pty hands out Buffers, though its typings say string.
    const dataSub = pty.onData((data: string | Buffer) => {
      if (!out || out.destroyed) return;
      if (!out.write(data)) {
        pty.pause();
        out.once('drain', () => pty.resume());
      }
    });
    const onResize = (size: { width: number; height: number }): void => {
      if (!exited) pty.resize(size.width, size.height);
    };
    io.resize.on('resize', onResize);
    const onInput = (chunk: Buffer): void => {
      if (!exited) pty.write(chunk);
    };
    io.stdin?.on('data', onInput);
    const stopOnAbort = onAbort(io.signal, () => {
      if (exited) return;
      void killExecProcess(pty.pid, pidFile, () => exited).then(() => {
        setTimeout(() => {
          if (!exited) {
            killGroup(pty.pid);
            pty.kill('SIGKILL');
          }
        }, KILL_GRACE_MS).unref();
      });
    });
    pty.onExit(({ exitCode, signal }) => {
      exited = true;
      stopOnAbort();
      dataSub.dispose();
      io.resize.off('resize', onResize);
      io.stdin?.off('data', onInput);
      resolve(signal ? { exitCode: null, signal } : { exitCode, signal: null });
    });
  });
}

/** Runs `fn` once when `signal` aborts; returns the unsubscribe. */
function onAbort(signal: AbortSignal, fn: () => void): () => void {
  if (signal.aborted) {
    fn();
    return () => undefined;
  }
  signal.addEventListener('abort', fn, { once: true });
  return () => signal.removeEventListener('abort', fn);
}
