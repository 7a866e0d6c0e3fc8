import { readdir, readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * True while the process exists and is not a zombie. The infra process is not berthd's child
 * (runc detaches it), so its exit is observed through /proc rather than a wait().
 */
export async function isRunning(pid: number): Promise<boolean> {
  if (pid <= 0) return false;
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // The state letter follows the parenthesised command name, which may itself hold spaces.
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/** Resolves true when the process has gone within the deadline, false otherwise. */
export async function waitForExit(pid: number, timeoutMs: number, pollMs = 10): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (await isRunning(pid)) {
    if (Date.now() >= deadline) return false;
    await sleep(pollMs);
  }
  return true;
}

/** The pid a pid file (runc's, conmon's) holds; null when the file is missing or holds no pid. */
export async function readPidFile(path: string): Promise<number | null> {
  const text = await readFile(path, 'utf8').catch(() => '');
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

/** The parent pid of a live process, from /proc/<pid>/stat; null when it is gone. */
export async function parentPid(pid: number): Promise<number | null> {
  if (pid <= 0) return null;
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  // Fields after the parenthesised command name (which may hold anything but ')'): state, ppid.
  const ppid = Number.parseInt(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1] ?? '', 10);
  return Number.isInteger(ppid) ? ppid : null;
}

/** A process's argv from /proc; null when it is gone. */
export async function commandLine(pid: number): Promise<string[] | null> {
  const raw = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => null);
  if (raw === null) return null;
  return raw.split('\0').slice(0, -1);
}

/** Pids of processes whose argv mentions `text` anywhere (berthd's own pid excluded). */
export async function processesMentioning(text: string): Promise<number[]> {
  const entries = await readdir('/proc').catch(() => [] as string[]);
  const pids = entries.filter((e) => /^\d+$/.test(e) && Number(e) !== process.pid).map(Number);
  // Side by side: a node runs hundreds of processes, and one read after another costs a
  // thread-pool round trip each (start-up's monitor adoption reads them all).
  const mentioning = await Promise.all(
    pids.map(async (pid) => (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).includes(text)),
  );
  return pids.filter((_pid, i) => mentioning[i]);
}

/** SIGKILL, where a process that is already gone (or no pid at all) is no error. */
export function killQuietly(pid: number | undefined): void {
  if (pid === undefined || pid === 0) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}
