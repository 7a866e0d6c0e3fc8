import { execa } from 'execa';
import { ExecError } from './errors.js';

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

/** Runs a program with an argument array (never a shell). Throws ExecError with its stderr. */
export async function run(file: string, args: readonly string[], opts: ExecOptions): Promise<ExecResult> {
  const result = await execa(file, args, {
    timeout: opts.timeoutMs,
    input: opts.input,
    env: opts.env,
    extendEnv: opts.extendEnv ?? true,
    cwd: opts.cwd,
    reject: false,
    stripFinalNewline: false,
    stdin: opts.input === undefined ? 'ignore' : 'pipe',
    stdout: opts.output ?? 'pipe',
    stderr: opts.output ?? 'pipe',
    killSignal: 'SIGKILL',
  });
  const stdout = String(result.stdout ?? '');
  const stderr = String(result.stderr ?? '');
  if (result.timedOut || result.failed || result.exitCode !== 0) {
    const said = stderr.trim() || (result.exitCode !== 0 ? stdout.trim() : '') || result.shortMessage;
    throw new ExecError([file, ...args].join(' '), result.exitCode, said ?? '', result.timedOut === true);
  }
  return { stdout, stderr };
}
