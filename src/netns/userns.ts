/**
 * A pod's user namespace, made with given id mappings and pinned as a file like its other
 * namespaces. Node cannot unshare one in-process (a user namespace needs a single-threaded caller),
 * and `unshare --map-users` needs newuidmap, which few nodes have. So a short-lived `unshare --user
 * cat` makes the namespace and waits in it; berthd, root in the parent namespace, writes its
 * uid_map and gid_map (any mapping is allowed to a writer with CAP_SETUID there), binds
 * /proc/<pid>/ns/user on the pin, and lets cat end: the pin keeps the namespace alive.
 */
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { errorMessage } from '../errors.js';
import { MountFlags, mountSyscall } from '../mounts/syscalls.js';
import { checkSpawned } from '../process/spawn.js';
import { createEmptyFile, NetnsError, removePin } from './index.js';

/** One line of a uid_map or gid_map: `length` ids from `containerId` inside are `hostId` on. */
export interface IdMapping {
  containerId: number;
  hostId: number;
  length: number;
}

export interface UsernsPinRequest {
  /** Where to pin the new user namespace; must not exist. */
  path: string;
  uids: readonly IdMapping[];
  gids: readonly IdMapping[];
}

/**
 * Creates a user namespace with the mappings asked for and pins it at `path`. On failure nothing
 * is left behind (no pin, no file, no process); the error names the path and why.
 */
export async function createPinnedUserns(request: UsernsPinRequest, timeoutMs: number): Promise<void> {
  const { path } = request;
  await createEmptyFile(path);
  try {
    await withHolder(timeoutMs, async (pid) => {
      // Each map must be written whole, in one write(2): writeFile of a short text is one.
      await writeFile(`/proc/${pid}/uid_map`, mapText(request.uids));
      await writeFile(`/proc/${pid}/gid_map`, mapText(request.gids));
      await mountSyscall({
        source: `/proc/${pid}/ns/user`,
        target: path,
        fstype: null,
        flags: MountFlags.BIND,
        data: null,
      });
    });
  } catch (err) {
    await removePin(path).catch(() => undefined);
    throw new NetnsError(path, 'create user namespace', err);
  }
}

/** The pin goes; the namespace with it once no process or mount uses it. Idempotent. */
export const removeUserns = removePin;

function mapText(mappings: readonly IdMapping[]): string {
  return mappings.map((m) => `${m.containerId} ${m.hostId} ${m.length}\n`).join('');
}

/**
 * Runs `act` with the pid of a process waiting in a new user namespace, and ends that process
 * afterwards however `act` went. cat echoes a line once it runs, i.e. once unshare has made the
 * namespace and exec'd it there; closing its input ends it.
 */
async function withHolder(timeoutMs: number, act: (pid: number) => Promise<void>): Promise<void> {
  const child = checkSpawned(
    spawn('unshare', ['--user', '--', 'cat'], { stdio: ['pipe', 'pipe', 'pipe'], detached: true }),
    'unshare',
  );
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    if (stderr.length < 4096) stderr += chunk.toString('utf8');
  });
  child.stdin.on('error', () => undefined);
  const exited = new Promise<string>((resolve) => {
    child.once('error', (err) => resolve(errorMessage(err)));
    child.once('close', (code, signal) => resolve(stderr.trim() || `exit ${code ?? signal ?? 'unknown'}`));
  });
  const kill = (): void => {
    if (child.pid === undefined || child.exitCode !== null) return;
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // Gone already.
    }
  };
  const timer = setTimeout(kill, timeoutMs);
  try {
    const ready = new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
    child.stdin.write('\n');
    const early = await Promise.race([ready.then(() => null), exited]);
    if (early !== null) throw new Error(`unshare --user ended before it was ready: ${early}`);
    if (child.pid === undefined) throw new Error('unshare --user has no pid');
    await act(child.pid);
  } finally {
    child.stdin.end();
    // On a failure of act, or a holder that does not end on EOF, the kill is what ends it.
    const ended = setTimeout(kill, 1000);
    await exited;
    clearTimeout(ended);
    clearTimeout(timer);
  }
}
