/**
 * What ExecSync and streaming exec share: the per-exec temp dir (process.json, pid file, runc's
 * log), the `runc exec` command line, killing the exec'd process by its pid, and telling runc's
 * own failures apart from the command's exit status.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { constants as osConstants, tmpdir } from 'node:os';
import { join } from 'node:path';
import { ExecError, FailedPreconditionError, InvalidArgumentError } from '../errors.js';
import { commandLine, killQuietly, parentPid, processesMentioning, readPidFile } from '../process/index.js';
import { readLoggedErrors, type Runc } from './runc.js';
import type { Process } from '../oci/spec.js';
import { PRIVATE_DIR, PRIVATE_FILE } from '../file-modes.js';

/** How long a kill waits for runc to write the pid file (runc still setting up). */
const PID_FILE_WAIT_MS = 1_000;
/** How long runc gets to exit after its process was killed before runc itself is killed. */
export const KILL_GRACE_MS = 2_000;

export interface ExecFiles {
  dir: string;
  process: string;
  pid: string;
  log: string;
}

/** The exec dirs start with this, so that start-up can sweep what a killed berthd left. */
export const EXEC_DIR_PREFIX = 'berth-exec-';

/**
 * Empties the parent of the exec dirs at start-up. No exec outlives a berthd that stops, so each
 * dir there is one a killed berthd left, perhaps with its `runc exec` and the command still
 * running: both are killed first (runc's argv names the dir; the command is the pid runc wrote,
 * trusted only while its argv is still the command's).
 */
export async function resetExecDirs(parent: string): Promise<void> {
  for (const name of await readdir(parent).catch(() => [] as string[])) {
    if (name.startsWith(EXEC_DIR_PREFIX)) await killLeftovers(join(parent, name));
  }
  await rm(parent, { recursive: true, force: true });
  await mkdir(parent, { recursive: true, mode: PRIVATE_DIR });
}

async function killLeftovers(dir: string): Promise<void> {
  for (const pid of await processesMentioning(dir)) killQuietly(pid);
  const pid = await readPidFile(join(dir, 'exec.pid'));
  if (pid === null) return;
  const spec = await readFile(join(dir, 'process.json'), 'utf8')
    .then((text) => JSON.parse(text) as Partial<Process>)
    .catch(() => null);
  const argv = await commandLine(pid);
  if (spec?.args && argv && argv.join('\0') === spec.args.join('\0')) killQuietly(pid);
}

export async function withExecFiles<T>(
  process: Process,
  tmpDir: string | undefined,
  body: (files: ExecFiles) => Promise<T>,
): Promise<T> {
  if (process.args.length === 0) throw new InvalidArgumentError('cmd', 'must not be empty');
  const dir = await mkdtemp(join(tmpDir ?? tmpdir(), EXEC_DIR_PREFIX));
  try {
    const files = {
      dir,
      process: join(dir, 'process.json'),
      pid: join(dir, 'exec.pid'),
      log: join(dir, 'log.json'),
    };
    await writeFile(files.process, JSON.stringify(process), { mode: PRIVATE_FILE });
    return await body(files);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** `runc exec` of the process file; with `tty`, runc allocates the container's terminal itself. */
export function execCommand(
  runc: Runc,
  id: string,
  files: ExecFiles,
  tty: boolean,
): { file: string; args: string[] } {
  return runc.command([
    '--log',
    files.log,
    '--log-format',
    'json',
    'exec',
    ...(tty ? ['--tty'] : []),
    '--process',
    files.process,
    '--pid-file',
    files.pid,
    id,
  ]);
}

/** `exec: "<name>": ` as runc words a failed exec, the name Go-quoted, a stat of a path maybe following. */
const RUNC_EXEC_NAME = String.raw`exec: "(?:[^"\\]|\\.)*": (?:stat .*: )?`;

/** A command runc could not start: the exit code a shell gives it, and runc's reason. */
export interface NotRunnable {
  exitCode: 126 | 127;
  message: string;
}

/**
 * What runc's log says of an exec, read once after runc ended. runc's own failures are told apart
 * from a command that exits 255 by the log: the command's exit status never produces an error
 * entry there. Returns null when runc ran the command, a NotRunnable for a missing command (127)
 * or one that may not be executed (126), and throws any other runc failure. A command that cannot
 * run is answered as a shell does, an exit code with the reason on stderr, rather than as a
 * runtime failure: kubectl then prints the reason and "command terminated with exit code 127",
 * and an exec probe fails with the reason as its output.
 */
export async function runcVerdict(
  runc: Runc,
  id: string,
  command: string,
  logFile: string,
  exitCode: number | null,
): Promise<NotRunnable | null> {
  const reasons = await readLoggedErrors(logFile);
  if (reasons.length === 0) return null;
  const message = reasons.join('; ');
  // runc quotes the name Go-style: a quote or backslash in it arrives escaped.
  if (new RegExp(`${RUNC_EXEC_NAME}(?:no such file or directory|executable file not found)`).test(message)) {
    return { exitCode: 127, message };
  }
  if (new RegExp(`${RUNC_EXEC_NAME}permission denied`).test(message)) return { exitCode: 126, message };
  // Only to name the cause: when runc cannot say, the logged reason is reported as it is.
  const st = await runc.state(id).catch(() => undefined);
  if (st === null || (st !== undefined && st.status !== 'running')) {
    throw new FailedPreconditionError(
      `container "${id}" is not running (${st?.status ?? 'gone'}): ${message}`,
    );
  }
  throw new ExecError(command, exitCode ?? undefined, message, false);
}

/**
 * SIGKILLs the exec'd process, whose host pid runc wrote to the pid file. The pid is only trusted
 * while that process is still runc's child: runc exec is its parent until it reaps it, so a pid
 * recycled after that can never be mistaken for it. Returns whether a process was signalled.
 */
export async function killExecProcess(
  runcPid: number | undefined,
  pidFile: string,
  hasExited: () => boolean,
): Promise<boolean> {
  const deadline = Date.now() + PID_FILE_WAIT_MS;
  let pid = await readPidFile(pidFile);
  while (pid === null && !hasExited() && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
    pid = await readPidFile(pidFile);
  }
  if (pid === null || runcPid === undefined || hasExited()) return false;
  if ((await parentPid(pid)) !== runcPid) return false;
  try {
    process.kill(pid, 'SIGKILL');
    return true;
  } catch {
    return false;
  }
}

/** SIGKILL to a process group led by `pid` (runc runs detached, leading its own group). */
export function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}

/** 128+n for a signal name, the shell's and runc's convention for "killed by signal n". */
export function signalExitCode(signal: NodeJS.Signals | number): number {
  return 128 + (typeof signal === 'number' ? signal : (osConstants.signals[signal] ?? 0));
}
