import { readdir, readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A process as berth recorded it when it started it: its pid, and its start time (clock ticks
 * after boot, field 22 of /proc/<pid>/stat). The kernel hands a dead process's pid to a later one,
 * which never shares its start time: the pair names one process for as long as the machine runs.
 */
export interface ProcessRef {
  pid: number;
  startTime: number;
}

/** What /proc/<pid>/stat says of a live process; null when it is gone or unreadable. */
interface Stat {
  state: string;
  ppid: number;
  startTime: number;
}

async function readStat(pid: number): Promise<Stat | null> {
  if (pid <= 0) return null;
  const text = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  return text === null ? null : parseStat(text);
}

/**
 * The fields of a stat line. They follow the parenthesised command name, which may itself hold
 * spaces and parentheses, so they are counted from its last ')': field 3 (state) comes first.
 */
export function parseStat(text: string): Stat | null {
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const ppid = Number.parseInt(fields[1] ?? '', 10);
  const startTime = Number.parseInt(fields[19] ?? '', 10);
  const state = fields[0] ?? '';
  if (state.length !== 1 || !Number.isInteger(ppid) || !Number.isInteger(startTime)) return null;
  return { state, ppid, startTime };
}

/**
 * True while the process exists and is not a zombie. A pid alone says only that *a* process has
 * it; a ProcessRef, that it is still the process recorded (a later one given its pid is not).
 * The infra process is not berthd's child (runc detaches it), so its exit is observed through
 * /proc rather than a wait().
 */
export async function isRunning(target: number | ProcessRef): Promise<boolean> {
  const { pid, startTime } = typeof target === 'number' ? { pid: target, startTime: null } : target;
  const stat = await readStat(pid);
  if (stat === null || stat.state === 'Z' || stat.state === 'X') return false;
  return startTime === null || stat.startTime === startTime;
}

/** The start time of live process `pid` (see ProcessRef); null when it is gone. */
export async function startTimeOf(pid: number): Promise<number | null> {
  const stat = await readStat(pid);
  return stat === null || stat.state === 'Z' || stat.state === 'X' ? null : stat.startTime;
}

/** Resolves true when the process has gone within the deadline, false otherwise. */
export async function waitForExit(
  target: number | ProcessRef,
  timeoutMs: number,
  pollMs = 10,
): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (await isRunning(target)) {
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
  return (await readStat(pid))?.ppid ?? null;
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
