/**
 * A pod's user namespace, made with given id mappings and pinned as a file like its other
 * namespaces. Node cannot unshare one in-process (a user namespace needs a single-threaded caller),
 * and `unshare --map-users` needs newuidmap, which few nodes have. So a short-lived `unshare --user
 * cat` makes the namespace and waits in it; berthd, root in the parent namespace, writes its
 * uid_map and gid_map (any mapping is allowed to a writer with CAP_SETUID there), binds
 * /proc/<pid>/ns/user on the pin, and lets cat end: the pin keeps the namespace alive.
 *
 * A pod's network, IPC and UTS namespaces are made by the same unshare, so that they are owned by
 * its user namespace: its root may then set their sysctls and mount /sys. Their hostname and
 * sysctls are set by `nsenter` into all of them, before any pod process.
 */
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { AlreadyExistsError, errorMessage } from '../errors.js';
import { MountFlags, mountSyscall } from '../mounts/syscalls.js';
import type { IdMapping } from '../oci/userns.js';
import { checkSpawned } from '../process/spawn.js';
import { run } from '../exec.js';
import {
  createEmptyFile,
  NetnsError,
  removePin,
  settingsCommand,
  type NamespacePinRequest,
} from './index.js';

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
export function createPinnedUserns(request: UsernsPinRequest, timeoutMs: number): Promise<void> {
  return pinWithHolder(['unshare', '--user'], [['user', request.path]], timeoutMs, async (pid) => {
    // Each map must be written whole, in one write(2): writeFile of a short text is one.
    await writeFile(`/proc/${pid}/uid_map`, mapText(request.uids));
    await writeFile(`/proc/${pid}/gid_map`, mapText(request.gids));
  });
}

/**
 * Creates the network, IPC and UTS namespaces `request` asks for, owned by the pinned user
 * namespace `userns`, pins them, and sets their hostname and sysctls.
 * On failure nothing is left behind; the error names the pins and why.
 */
export function createPinnedNamespacesIn(
  userns: string,
  request: NamespacePinRequest,
  timeoutMs: number,
): Promise<void> {
  const wanted: [string, string | null][] = [
    ['net', request.net],
    ['ipc', request.ipc],
    ['uts', request.uts],
  ];
  const pins = wanted.filter((pin): pin is [string, string] => pin[1] !== null);
  const flags = pins.map(([type]) => `--${type}`);
  // unshare runs as the user namespace's root, so what it makes is owned by that namespace.
  const holder = ['nsenter', `--user=${userns}`, '--', 'unshare', ...flags];
  return pinWithHolder(holder, pins, timeoutMs, undefined, async (pid) => {
    const settings = settingsCommand(request);
    if (settings === null) return;
    // As the host's root, not the pod's: /proc/sys/kernel/hostname and others are the host
    // root's files, which only network and IPC sysctls let the namespace's root write.
    await run('nsenter', [`--target=${pid}`, ...flags, '--', ...settings], { timeoutMs });
  });
}

/**
 * Starts `holder` (a command that ends by making new namespaces), lets `before` act on it, binds
 * each of its namespaces `pins` names on its file, and lets `after` act while it still runs.
 */
async function pinWithHolder(
  holder: readonly string[],
  pins: readonly [string, string][],
  timeoutMs: number,
  before?: (pid: number) => Promise<void>,
  after?: (pid: number) => Promise<void>,
): Promise<void> {
  const made: string[] = [];
  try {
    for (const [, path] of pins) {
      await createEmptyFile(path);
      made.push(path);
    }
    await withHolder(holder, timeoutMs, async (pid) => {
      await before?.(pid);
      for (const [type, path] of pins) {
        const source = `/proc/${pid}/ns/${type}`;
        await mountSyscall({ source, target: path, fstype: null, flags: MountFlags.BIND, data: null });
      }
      await after?.(pid);
    });
  } catch (err) {
    for (const path of made) await removePin(path).catch(() => undefined);
    if (err instanceof AlreadyExistsError) throw err;
    const what = `create ${pins.map(([type]) => type).join(', ')} namespace${pins.length > 1 ? 's' : ''}`;
    throw new NetnsError(pins.map(([, path]) => path).join(', '), what, err);
  }
}

/** The pin goes; the namespace with it once no process or mount uses it. Idempotent. */
export const removeUserns = removePin;

function mapText(mappings: readonly IdMapping[]): string {
  return mappings.map((m) => `${m.containerId} ${m.hostId} ${m.length}\n`).join('');
}

/**
 * Runs `act` with the pid of a `cat` that `holder` runs in the namespaces it makes, and ends that
 * process afterwards however `act` went. cat echoes a line once it runs, i.e. once the namespaces
 * are made and it was exec'd in them; closing its input ends it.
 */
async function withHolder(
  holder: readonly string[],
  timeoutMs: number,
  act: (pid: number) => Promise<void>,
): Promise<void> {
  const [program = 'unshare', ...args] = holder;
  const child = checkSpawned(
    spawn(program, [...args, '--', 'cat'], { stdio: ['pipe', 'pipe', 'pipe'], detached: true }),
    program,
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
    if (early !== null) throw new Error(`${holder.join(' ')} ended before it was ready: ${early}`);
    if (child.pid === undefined) throw new Error(`${program} has no pid`);
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
