import { access, constants } from 'node:fs/promises';
import { execa } from 'execa';
import { ExecError, FailedPreconditionError } from './errors.js';

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

/**
 * Runs a program with an argument array (never a shell). Throws ExecError with its stderr. The
 * program leads its own process group, so a timeout also kills what it started (iptables under a
 * CNI plugin) instead of waiting for those to release the pipes.
 */
export async function run(file: string, args: readonly string[], opts: ExecOptions): Promise<ExecResult> {
  const child = execa(file, args, {
    input: opts.input,
    env: opts.env,
    extendEnv: opts.extendEnv ?? true,
    cwd: opts.cwd,
    reject: false,
    stripFinalNewline: false,
    stdin: opts.input === undefined ? 'ignore' : 'pipe',
    stdout: opts.output ?? 'pipe',
    stderr: opts.output ?? 'pipe',
    detached: true,
  });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // Already gone: nothing to kill.
    }
  }, opts.timeoutMs);
  const result = await child.finally(() => clearTimeout(timer));
  const stdout = String(result.stdout ?? '');
  const stderr = String(result.stderr ?? '');
  if (timedOut || result.failed || result.exitCode !== 0) {
    const said = stderr.trim() || (result.exitCode !== 0 ? stdout.trim() : '') || result.shortMessage;
    const command = [file, ...args].join(' ');
    throw new ExecError(command, result.exitCode, said ?? '', timedOut, stdout);
  }
  return { stdout, stderr };
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
