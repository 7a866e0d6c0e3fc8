/**
 * Pinned network namespaces: a new netns bind-mounted on a file, so it outlives every process in
 * it and can be handed to CNI plugins and runc by path. Done with util-linux programs, not native
 * code: `unshare --net=<file>` creates the namespace and performs the bind mount itself.
 */
import { mkdir, open, readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { BerthError, ExecError, InvalidArgumentError, AlreadyExistsError, errorMessage } from '../errors.js';
import { run } from '../exec.js';
import { canonicalPath, readMountInfo, topMount, type MountInfoEntry } from '../mounts/mountinfo.js';

/** Mounting and unmounting are local syscalls; they only take long when the host is in trouble. */
const MOUNT_TIMEOUT_MS = 10_000;

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

/** True when `path` is a mount point in this process's mount namespace. */
export async function isMounted(path: string): Promise<boolean> {
  const canonical = await canonicalPath(path);
  if (canonical === null) return false;
  return topMount(await readMountInfo(), canonical) !== undefined;
}

const preparing = new Map<string, Promise<void>>();

/**
 * Makes `dir` a shared mount point, as `ip netns add` does for /run/netns: pins made later inside
 * it then propagate to mount namespaces created afterwards as copies (e.g. a CNI plugin run in
 * its own mount namespace), instead of showing up there as empty files. Idempotent; concurrent
 * calls for the same dir share one attempt so the dir is not bound on itself twice.
 */
export function prepareNetnsDir(dir: string): Promise<void> {
  const pending = preparing.get(dir);
  if (pending) return pending;
  const attempt = doPrepareNetnsDir(dir).finally(() => preparing.delete(dir));
  preparing.set(dir, attempt);
  return attempt;
}

async function doPrepareNetnsDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o755 });
  const canonical = await canonicalPath(dir);
  if (canonical === null) throw new NetnsError(dir, 'resolve', new Error('path vanished'));
  let table = await readMountInfo();
  let top = topMount(table, canonical);
  if (!top) {
    await mountCmd(dir, 'bind netns dir', ['--bind', dir, dir]);
    table = await readMountInfo();
    top = topMount(table, canonical);
  }
  const group = peerGroup(top);
  const parentGroup = peerGroup(table.find((e) => e.mountId === top?.parentId));
  // A bind of a dir on a shared mount (/ is shared on systemd hosts) joins that mount's peer
  // group: every pin made in the dir would then be mounted a second time on the parent, and
  // outlive its unmount there. Leaving the group first gives the dir a peer group of its own.
  if (group !== null && group === parentGroup) {
    await mountCmd(dir, 'make private', ['--make-private', dir]);
  }
  if (group === null || group === parentGroup) {
    await mountCmd(dir, 'make shared', ['--make-shared', dir]);
  }
}

/** The `shared:N` peer group of a mount; null for a private or slave-only one. */
function peerGroup(entry: MountInfoEntry | undefined): string | null {
  return entry?.optionalFields.find((f) => f.startsWith('shared:')) ?? null;
}

async function mountCmd(path: string, what: string, args: string[]): Promise<void> {
  try {
    await run('mount', args, { timeoutMs: MOUNT_TIMEOUT_MS });
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
  await createEmptyFile(path);
  try {
    // unshare refuses to create the mount target itself, hence the file above.
    await run('unshare', [`--net=${path}`, 'true'], { timeoutMs });
    if (!(await isMounted(path))) throw new Error('unshare succeeded but nothing is mounted there');
  } catch (err) {
    await removeNetns(path).catch(() => undefined);
    throw new NetnsError(path, 'create network namespace', err);
  }
  return path;
}

async function createEmptyFile(path: string): Promise<void> {
  try {
    // Exclusive: a name collision must not mount a second namespace over a pin someone uses.
    await (await open(path, 'wx', 0o444)).close();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') {
      throw new AlreadyExistsError(`network namespace ${path} already exists`);
    }
    throw new NetnsError(path, 'create pin file', err);
  }
}

/**
 * Unmounts the pin; the namespace itself goes away once no process is left in it. Keeps the file.
 * Idempotent: a missing or unmounted path is fine. Loops because a path can be mounted more than
 * once (stacked mounts), and falls back to a lazy detach when a plain unmount is refused (busy).
 */
export async function unmountNetns(path: string): Promise<void> {
  for (let attempt = 0; attempt < 8 && (await isMounted(path)); attempt++) {
    try {
      await run('umount', [path], { timeoutMs: MOUNT_TIMEOUT_MS });
    } catch (err) {
      if (!(await isMounted(path))) return;
      await lazyUnmount(path, err);
    }
  }
  if (await isMounted(path)) throw new NetnsError(path, 'unmount', new Error('still mounted'));
}

async function lazyUnmount(path: string, firstError: unknown): Promise<void> {
  try {
    await run('umount', ['--lazy', path], { timeoutMs: MOUNT_TIMEOUT_MS });
  } catch (err) {
    if (!(await isMounted(path))) return;
    const said = err instanceof ExecError ? err.stderr : errorMessage(err);
    throw new NetnsError(path, 'unmount', new Error(`${errorMessage(firstError)}; lazy: ${said}`));
  }
}

/** Unmounts the pin if mounted and deletes the file. Idempotent. */
export async function removeNetns(path: string): Promise<void> {
  await unmountNetns(path);
  try {
    await unlink(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new NetnsError(path, 'remove', err);
  }
}

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
