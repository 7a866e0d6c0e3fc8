/**
 * Paths and files inside a container's rootfs, as the container will see them. The rootfs is the
 * image's, and an image is hostile until proven otherwise: every path is resolved as if the rootfs
 * were "/" (absolute symlink targets re-rooted at it, ".." stopping at it), so no link can point
 * berthd at a host file, and only regular files are ever opened: a FIFO blocks the thread that
 * opens it for as long as no writer comes (all of libuv's threads, one create after another), and
 * opening a device node is an act on the device itself. What is read is bounded too.
 */
import { constants, type Stats } from 'node:fs';
import { chmod, lstat, mkdir, open, readlink, type FileHandle } from 'node:fs/promises';
import { FailedPreconditionError } from '../errors.js';

/** Linux's limit on symlinks followed in one lookup (MAXSYMLINKS). */
const MAX_SYMLINK_HOPS = 40;

/**
 * The most berthd reads of one image file: an /etc/passwd of 10,000 users is about 0.5 MiB, and
 * the whole of it is parsed on every CreateContainer.
 */
export const MAX_IMAGE_FILE_BYTES = 4 * 1024 * 1024;

/** O_NOFOLLOW: the last component was checked; O_NONBLOCK: should it have become a FIFO, no wait. */
const READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;

/** Where a path inside the rootfs leads on the host, and what is there (null: nothing). */
interface Resolved {
  path: string;
  stat: Stats | null;
}

/**
 * The contents of `path` inside `rootfs`; '' when it does not exist there, or is a directory (which
 * libc reads as an empty file too). Anything else that is not a regular file, or one larger than
 * MAX_IMAGE_FILE_BYTES, is a FailedPreconditionError naming the file: the image is broken, and the
 * container's own libc would block on the same FIFO.
 */
export async function readInRoot(rootfs: string, path: string): Promise<string> {
  const what = `${path} in the image`;
  const found = await walk(rootfs, path, what, false);
  if (found.stat === null || found.stat.isDirectory()) return '';
  checkReadable(found.stat, what);
  let handle: FileHandle;
  try {
    handle = await open(found.path, READ_FLAGS);
  } catch (err) {
    if (isMissing(err)) return '';
    throw err;
  }
  try {
    const opened = await handle.stat();
    // The same file that was looked at, not something put in its place since.
    if (opened.ino !== found.stat.ino || opened.dev !== found.stat.dev) {
      throw new FailedPreconditionError(`${what} changed while it was being read`);
    }
    checkReadable(opened, what);
    return (await readBounded(handle, opened.size, what)).toString('utf8');
  } finally {
    await handle.close();
  }
}

/**
 * `path` inside `rootfs` made a directory if it is not one yet, the way runc makes a container's
 * cwd (mode 0755, owned by root), but resolved in the rootfs: a symlink pointing at a directory
 * that does not exist gets that directory made inside the rootfs, never on the host. A loop, or a
 * file where a directory should be, is a FailedPreconditionError naming `what`. Returns the
 * directory's host path.
 */
export async function makeDirInRoot(rootfs: string, path: string, what: string): Promise<string> {
  return (await walk(rootfs, path, what, true)).path;
}

/**
 * `path` resolved as if `rootfs` were "/": symlinks are followed with absolute targets re-rooted
 * at `rootfs` and ".." stopping at it. The host path returned lies inside `rootfs`; components
 * past one that does not exist are kept as they are. More than 40 links is a loop (ELOOP).
 */
export async function resolveInRoot(rootfs: string, path: string): Promise<string> {
  return (await walk(rootfs, path, `${path} in the image`, false)).path;
}

/**
 * The walk behind the functions above, one component at a time with lstat, never letting the
 * kernel follow a link. With `create`, a missing component is made a directory and the walk goes
 * on through it (so ".." after it stays inside too), and every component must end up a directory.
 */
async function walk(rootfs: string, path: string, what: string, create: boolean): Promise<Resolved> {
  const root = rootfs.replace(/\/+$/, '') || '/';
  const done: string[] = [];
  let todo = components(path);
  let hops = 0;
  while (todo.length > 0) {
    const [part, ...rest] = todo as [string, ...string[]];
    todo = rest;
    if (part === '..') {
      done.pop();
      continue;
    }
    const candidate = joinRoot(root, [...done, part]);
    let stat = await lstatOrNull(candidate);
    if (stat === null) {
      if (!create) return { path: joinRoot(root, [...done, part, ...todo]), stat: null };
      await mkdir(candidate, { mode: 0o755 });
      // mkdir's mode is subject to the umask; runc's is 0755 whatever berthd's umask.
      await chmod(candidate, 0o755);
      stat = await lstat(candidate);
    }
    if (!stat.isSymbolicLink()) {
      if (create && !stat.isDirectory()) {
        throw new FailedPreconditionError(`${what}: /${[...done, part].join('/')} is ${kindOf(stat)}`);
      }
      done.push(part);
      continue;
    }
    if (++hops > MAX_SYMLINK_HOPS) {
      throw new FailedPreconditionError(`${what}: too many levels of symbolic links`);
    }
    const target = await readlink(candidate);
    if (target.startsWith('/')) done.length = 0;
    todo = [...components(target), ...todo];
  }
  const resolved = joinRoot(root, done);
  // No link is left to follow: this is what the path names.
  return { path: resolved, stat: await lstatOrNull(resolved) };
}

function checkReadable(stat: Stats, what: string): void {
  if (!stat.isFile()) throw new FailedPreconditionError(`${what} is ${kindOf(stat)}, not a regular file`);
  if (stat.size > MAX_IMAGE_FILE_BYTES) {
    throw new FailedPreconditionError(
      `${what} is ${stat.size} bytes, more than the ${MAX_IMAGE_FILE_BYTES} berth reads`,
    );
  }
}

/** At most MAX_IMAGE_FILE_BYTES, whatever the size said: a file may grow while it is read. */
async function readBounded(handle: FileHandle, size: number, what: string): Promise<Buffer> {
  let buffer = Buffer.alloc(Math.min(size, MAX_IMAGE_FILE_BYTES) + 1);
  let length = 0;
  for (;;) {
    const { bytesRead } = await handle.read(buffer, length, buffer.length - length, null);
    if (bytesRead === 0) return buffer.subarray(0, length);
    length += bytesRead;
    if (length > MAX_IMAGE_FILE_BYTES) {
      throw new FailedPreconditionError(`${what} is more than the ${MAX_IMAGE_FILE_BYTES} bytes berth reads`);
    }
    if (length === buffer.length) {
      const grown = Buffer.alloc(Math.min(buffer.length * 2, MAX_IMAGE_FILE_BYTES + 1));
      buffer.copy(grown);
      buffer = grown;
    }
  }
}

function kindOf(stat: Stats): string {
  if (stat.isFIFO()) return 'a FIFO';
  if (stat.isCharacterDevice()) return 'a character device';
  if (stat.isBlockDevice()) return 'a block device';
  if (stat.isSocket()) return 'a socket';
  if (stat.isDirectory()) return 'a directory';
  if (stat.isSymbolicLink()) return 'a symbolic link';
  return 'a regular file';
}

function components(path: string): string[] {
  return path.split('/').filter((c) => c !== '' && c !== '.');
}

function joinRoot(root: string, parts: string[]): string {
  if (parts.length === 0) return root;
  return `${root === '/' ? '' : root}/${parts.join('/')}`;
}

async function lstatOrNull(path: string): Promise<Stats | null> {
  try {
    return await lstat(path);
  } catch (err) {
    if (isMissing(err)) return null;
    throw err;
  }
}

function isMissing(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}
