import { spawn } from 'node:child_process';
import { access, constants } from 'node:fs/promises';
import { ExecError, FailedPreconditionError } from './errors.js';
import { checkSpawned } from './process/spawn.js';

export interface ExecOptions {
  /** Every host program gets a deadline: a hung plugin or runc must not hang an RPC forever. */
  timeoutMs: number;
  input?: string;
  env?: Record<string, string>;
  /** Replace the environment instead of extending process.env (CNI plugins must see only CNI_*). */
  extendEnv?: boolean;
  cwd?: string;
  /**
   * 'ignore' sends stdout and stderr to /dev/null instead of capturing them (default 'pipe'). For
   * programs that leave a descendant running with their stdio, like runc create's container: with
   * pipes, the call would wait for that descendant to close them, i.e. until the container exits.
   */
  output?: 'pipe' | 'ignore';
}

export interface ExecResult {
  stdout: string;
  stderr: string;
}

/** Each of stdout and stderr is kept up to this; a program writing more is killed and fails. */
const MAX_OUTPUT_BYTES = 16 * 1024 * 1024;

interface Outcome {
  stdout: string;
  stderr: string;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** Why it did not run or was stopped: a spawn error, too much output. */
  failure: string | undefined;
  timedOut: boolean;
}

/**
 * Runs a program with an argument array (never a shell). Throws ExecError with its stderr; a
 * program that cannot be started for want of file descriptors is a ResourceExhaustedError. The
 * program leads its own process group, so a timeout also kills what it started (iptables under a
 * CNI plugin) instead of waiting for those to release the pipes.
 */
export async function run(file: string, args: readonly string[], opts: ExecOptions): Promise<ExecResult> {
  const result = await runToEnd(file, args, opts);
  const { stdout, stderr, exitCode, signal, failure, timedOut } = result;
  if (timedOut || failure !== undefined || exitCode !== 0) {
    const how = failure ?? (signal ? `killed by ${signal}` : `exit code ${exitCode ?? 'unknown'}`);
    const said = stderr.trim() || (exitCode !== 0 ? stdout.trim() : '') || how;
    const command = [file, ...args].join(' ');
    throw new ExecError(command, exitCode ?? undefined, said, timedOut, stdout);
  }
  return { stdout, stderr };
}

function runToEnd(file: string, args: readonly string[], opts: ExecOptions): Promise<Outcome> {
  return new Promise((resolve) => {
    const output = opts.output ?? 'pipe';
    const child = checkSpawned(
      spawn(file, args, {
        env: opts.extendEnv === false ? opts.env : { ...process.env, ...opts.env },
        cwd: opts.cwd,
        stdio: [opts.input === undefined ? 'ignore' : 'pipe', output, output],
        detached: true,
      }),
      file,
    );
    let failure: string | undefined;
    let timedOut = false;
    const killGroup = (): void => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone: nothing to kill.
      }
    };
    const collect = (stream: NodeJS.ReadableStream | null): (() => string) => {
      const chunks: Buffer[] = [];
      let size = 0;
      stream?.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size <= MAX_OUTPUT_BYTES) chunks.push(chunk);
        else if (failure === undefined) {
          failure = `wrote more than ${MAX_OUTPUT_BYTES} bytes of output`;
          killGroup();
        }
      });
      return () => Buffer.concat(chunks).toString('utf8');
    };
    const stdout = collect(child.stdout);
    const stderr = collect(child.stderr);
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, opts.timeoutMs);
    child.on('error', (err) => (failure ??= err.message));
    if (child.stdin) {
      // The program may exit before reading its input: its exit status says how it went.
      child.stdin.on('error', () => undefined);
      child.stdin.end(opts.input);
    }
    // 'close' follows the exit and the end of the output pipes, and also a failed spawn.
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
      clearTimeout(timer);
      resolve({
        stdout: stdout(),
        stderr: stderr(),
        exitCode: failure === undefined || code === null || code >= 0 ? code : null,
        signal,
        failure,
        timedOut,
      });
    });
  });
}

/**
 * The absolute path of a program named bare (looked up in PATH), for callers that exec it without
 * a PATH search of their own (conmon runs its runtime by path). Throws when nothing is found.
 */
export async function findProgram(name: string): Promise<string> {
  if (name.includes('/')) return name;
  const dirs = (process.env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin').split(
    ':',
  );
  for (const dir of dirs) {
    if (dir === '') continue;
    const candidate = `${dir}/${name}`;
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // Not here; keep looking.
    }
  }
  throw new FailedPreconditionError(`${name}: not found in PATH (${dirs.join(':')})`);
}
