/**
 * Pinned namespaces: a new netns (and a pod's ipc and uts namespaces) bind-mounted on a file, so it
 * outlives every process in it and can be handed to CNI plugins and runc by path. `unshare
 * --net=<file>` creates the namespace and performs the bind mount itself: a thread of this process
 * cannot enter a new namespace safely. Unmounting is a syscall.
 */
import { mkdir, open, readdir, statfs, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { BerthError, InvalidArgumentError, AlreadyExistsError, errorMessage } from '../errors.js';
import { run } from '../exec.js';
import { canonicalPath, readMountInfo, topMount, type MountInfoEntry } from '../mounts/mountinfo.js';
import { changePropagation, MountFlags, mountSyscall, unmountAll } from '../mounts/syscalls.js';
import { allSettledOrThrow } from '../kit/settle.js';
import { SingleFlight } from '../kit/single-flight.js';

/** A namespace could not be created, mounted or unmounted. */
export class NetnsError extends BerthError {
  override name = 'NetnsError';
  constructor(
    readonly path: string,
    what: string,
    override readonly cause: unknown,
  ) {
    super(`${what} ${path}: ${errorMessage(cause)}`);
  }
}

/** nsfs's magic number (linux/magic.h): what statfs(2) says of a path a namespace is bound on. */
const NSFS_MAGIC = 0x6e736673;

/**
 * True when a namespace is bound on `path`: a pin that is still one (a reboot leaves at most a
 * plain file). One statfs, where isMounted reads and parses the whole mount table, which grows
 * with every pod.
 */
export async function isPinned(path: string): Promise<boolean> {
  try {
    return (await statfs(path)).type === NSFS_MAGIC;
  } catch {
    return false;
  }
}

/** True when `path` is a mount point in this process's mount namespace. */
export async function isMounted(path: string): Promise<boolean> {
  const canonical = await canonicalPath(path);
  if (canonical === null) return false;
  return topMount(await readMountInfo(), canonical) !== undefined;
}

/** As `ip netns` makes /run/netns: pins are for root, but listing them is not a secret. */
export const NETNS_DIR_MODE = 0o755;

const preparing = new SingleFlight<void>();

/**
 * Makes `dir` a shared mount point, as `ip netns add` does for /run/netns: pins made later inside
 * it then propagate to mount namespaces created afterwards as copies (e.g. a CNI plugin run in
 * its own mount namespace), instead of showing up there as empty files. Idempotent; concurrent
 * calls for the same dir share one attempt so the dir is not bound on itself twice.
 */
export function prepareNetnsDir(dir: string): Promise<void> {
  return preparing.run(dir, () => doPrepareNetnsDir(dir));
}

async function doPrepareNetnsDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: NETNS_DIR_MODE });
  const canonical = await canonicalPath(dir);
  if (canonical === null) throw new NetnsError(dir, 'resolve', new Error('path vanished'));
  let table = await readMountInfo();
  let top = topMount(table, canonical);
  if (!top) {
    await withNetnsError(dir, 'bind netns dir', () =>
      mountSyscall({ source: dir, target: dir, fstype: null, flags: MountFlags.BIND, data: null }),
    );
    table = await readMountInfo();
    top = topMount(table, canonical);
  }
  const group = peerGroup(top);
  const parentGroup = peerGroup(table.find((e) => e.mountId === top?.parentId));
  // A bind of a dir on a shared mount (/ is shared on systemd hosts) joins that mount's peer
  // group: every pin made in the dir would then be mounted a second time on the parent, and
  // outlive its unmount there. Leaving the group first gives the dir a peer group of its own.
  if (group !== null && group === parentGroup) {
    await withNetnsError(dir, 'make private', () => changePropagation(dir, MountFlags.PRIVATE));
  }
  if (group === null || group === parentGroup) {
    await withNetnsError(dir, 'make shared', () => changePropagation(dir, MountFlags.SHARED));
  }
}

/** The `shared:N` peer group of a mount; null for a private or slave-only one. */
function peerGroup(entry: MountInfoEntry | undefined): string | null {
  return entry?.optionalFields.find((f) => f.startsWith('shared:')) ?? null;
}

async function withNetnsError(path: string, what: string, act: () => Promise<void>): Promise<void> {
  try {
    await act();
  } catch (err) {
    throw new NetnsError(path, what, err);
  }
}

/** A pin's name becomes a file name directly in the netns dir. */
function checkName(name: string): void {
  if (name === '' || name === '.' || name === '..' || name.includes('/') || name.includes('\0')) {
    throw new InvalidArgumentError('netns name', `${JSON.stringify(name)} is not a plain file name`);
  }
}

/**
 * Creates a new, empty network namespace pinned at `${dir}/${name}` and returns that path.
 * `lo` stays down: the CNI loopback plugin brings it up. On failure nothing is left behind.
 */
export async function createPinnedNetns(dir: string, name: string, timeoutMs: number): Promise<string> {
  checkName(name);
  const path = join(dir, name);
  await createPinnedNamespaces({ net: path, ipc: null, uts: null, hostname: '', sysctls: {} }, timeoutMs);
  return path;
}

/** New namespaces to pin as files, and what to set inside them before anything joins them. */
export interface NamespacePinRequest {
  /** Where to pin a new network namespace; null: none. */
  net: string | null;
  /** Where to pin a new ipc namespace; null: none. */
  ipc: string | null;
  /** Where to pin a new uts namespace; null: none. */
  uts: string | null;
  /** The new uts namespace's hostname; '' leaves it as the host's. Needs `uts`. */
  hostname: string;
  /** Written inside the new namespaces, e.g. net.* for the netns, kernel.shm* for the ipc one. */
  sysctls: Record<string, string>;
}

/**
 * Creates and pins the requested namespaces with ONE program run (each exec costs milliseconds):
 * `unshare --net=<f> --ipc=<f> --uts=<f>` bind-mounts them itself, and the program it runs inside
 * them, `sysctl`, sets the hostname and the namespaced sysctls, which are per namespace of the
 * writer. On failure nothing is left behind: every pin made is unmounted and its file removed.
 */
export async function createPinnedNamespaces(request: NamespacePinRequest, timeoutMs: number): Promise<void> {
  const pins = [
    ['net', request.net],
    ['ipc', request.ipc],
    ['uts', request.uts],
  ].filter((pin): pin is [string, string] => pin[1] !== null);
  if (pins.length === 0) return;
  const made: string[] = [];
  try {
    // unshare refuses to create the mount targets itself, hence the files.
    for (const [, path] of pins) {
      await createEmptyFile(path);
      made.push(path);
    }
    const inside = settingsCommand(request) ?? ['true'];
    await run('unshare', [...pins.map(([type, path]) => `--${type}=${path}`), ...inside], { timeoutMs });
    const mounted = await mountedAmong(made);
    const missing = made.filter((path) => !mounted.includes(path));
    if (missing.length > 0) {
      throw new Error(`unshare succeeded but nothing is mounted at ${missing.join(', ')}`);
    }
  } catch (err) {
    // RunPodSandbox's undos, registered before this call, remove again what stays; this error is
    // the one to report.
    for (const path of made) await removePin(path).catch(() => undefined);
    if (err instanceof AlreadyExistsError || err instanceof NetnsError) throw err;
    throw new NetnsError(made.join(', '), 'create namespaces', err);
  }
}

/**
 * The command that sets the hostname and sysctls of a request, run inside its namespaces; null
 * when there is nothing to set.
 */
export function settingsCommand(request: NamespacePinRequest): string[] | null {
  const writes = Object.entries(request.sysctls).map(([key, value]) => `${key}=${value}`);
  if (request.hostname !== '' && request.uts !== null) writes.unshift(`kernel.hostname=${request.hostname}`);
  // `--` so that no value kubelet sent can be read as an option of sysctl.
  return writes.length > 0 ? ['sysctl', '-q', '-w', '--', ...writes] : null;
}

/** Creates the empty file a pin is bound on; a name taken already is an AlreadyExistsError. */
export async function createEmptyFile(path: string): Promise<void> {
  try {
    // Exclusive: a name collision must not mount a second namespace over a pin someone uses.
    await (await open(path, 'wx', 0o444)).close();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') {
      throw new AlreadyExistsError(`namespace pin ${path} already exists`);
    }
    throw new NetnsError(path, 'create pin file', err);
  }
}

/**
 * Unmounts the pin; the namespace itself goes away once no process is left in it. Keeps the file.
 * Idempotent: a missing or unmounted path is fine. Every mount stacked on the path goes, and a
 * busy one is detached lazily.
 */
export async function unmountPin(path: string): Promise<void> {
  try {
    await unmountAll(path);
  } catch (err) {
    throw new NetnsError(path, 'unmount', err);
  }
}

/** A pinned netns is a pin like any other. */
export const unmountNetns = unmountPin;

/** Unmounts several pins (or any mount points). Idempotent; the first failure is thrown after all were tried. */
export async function unmountPins(paths: readonly string[]): Promise<void> {
  await allSettledOrThrow(paths.map(unmountPin));
}

/** Those of `paths` that are mount points now, from one read of the mount table. */
export async function mountedAmong(paths: readonly string[]): Promise<string[]> {
  if (paths.length === 0) return [];
  const table = await readMountInfo();
  const mounted: string[] = [];
  for (const path of paths) {
    const canonical = await canonicalPath(path);
    if (canonical !== null && topMount(table, canonical) !== undefined) mounted.push(path);
  }
  return mounted;
}

/** Unmounts the pin if mounted and deletes the file. Idempotent. */
export async function removePin(path: string): Promise<void> {
  await unmountPin(path);
  try {
    await unlink(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new NetnsError(path, 'remove', err);
  }
}

export const removeNetns = removePin;

/** Full paths of the entries of `dir` whose names start with `prefix`, sorted; [] if dir is missing. */
export async function listNetns(dir: string, prefix: string): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  return names
    .filter((n) => n.startsWith(prefix))
    .sort()
    .map((n) => join(dir, n));
}
