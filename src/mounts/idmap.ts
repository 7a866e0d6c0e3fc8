/**
 * Idmapped bind mounts made in-process with the new mount API: runc 1.1 cannot make them, and the
 * kernel can (5.12 on; overlay's lower layers 5.19, tmpfs 6.3). A tree is cloned detached, marked
 * idmapped with a user namespace, and only then attached: nobody ever sees it unmapped at the
 * target, and a failure at any step leaves nothing mounted.
 */
import { closeSync, openSync } from 'node:fs';
import { errnoName, loadLibc } from '../libc.js';
import { MountSyscallError } from './syscalls.js';

const AT_FDCWD = -100;
const AT_EMPTY_PATH = 0x1000;
const AT_RECURSIVE = 0x8000;
const OPEN_TREE_CLONE = 0x1;
/** O_CLOEXEC: a runc or plugin started meanwhile must not inherit the detached tree. */
const OPEN_TREE_CLOEXEC = 0x80000;
const MOVE_MOUNT_F_EMPTY_PATH = 0x4;
const MOUNT_ATTR_IDMAP = 0x100000;
/** struct mount_attr: attr_set, attr_clr, propagation, userns_fd, each a u64. */
const MOUNT_ATTR_SIZE = 32;

export interface IdmapRequest {
  /** The directory (or file) whose mount is cloned. */
  source: string;
  /** Where the idmapped clone is attached; must exist. */
  target: string;
  /** A user namespace pinned as a file (see netns/userns.ts): its mappings become the mount's. */
  userns: string;
  /**
   * Clone the mounts below `source` too, all idmapped: a volume may have submounts. Every one of
   * them must support idmapping, or nothing is mounted.
   */
  recursive: boolean;
}

/**
 * Binds `source` on `target` idmapped with the pinned user namespace: a file owned by N on disk
 * shows as N to a process in that namespace, i.e. as the host id N maps to, and what such a
 * process writes is stored as N. Throws a MountSyscallError naming both paths, the step and errno.
 */
export async function idmappedBind(request: IdmapRequest): Promise<void> {
  const { source, target, userns, recursive } = request;
  const c = await loadLibc();
  const what = (step: string): string => `idmapped bind of ${source} on ${target} (${step})`;
  let usernsFd: number;
  try {
    // A plain fd rather than a FileHandle, whose collection would close the number again later.
    usernsFd = openSync(userns, 'r');
  } catch (err) {
    throw new MountSyscallError(`${what(`open user namespace ${userns}`)}`, errCode(err));
  }
  let tree = -1;
  try {
    const recursion = recursive ? AT_RECURSIVE : 0;
    tree = c.openTree(AT_FDCWD, source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | recursion);
    if (tree < 0) throw new MountSyscallError(what('open_tree'), errnoName(c.errno()));
    if (c.mountSetattr(tree, '', AT_EMPTY_PATH | recursion, mountAttrIdmap(usernsFd)) !== 0) {
      throw new MountSyscallError(what('mount_setattr'), errnoName(c.errno()));
    }
    if (c.moveMount(tree, '', AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) !== 0) {
      throw new MountSyscallError(what('move_mount'), errnoName(c.errno()));
    }
  } finally {
    // Closing a detached tree that was never attached unmounts it.
    if (tree >= 0) closeSync(tree);
    closeSync(usernsFd);
  }
}

/** Little-endian, as on every architecture berth runs on. */
function mountAttrIdmap(usernsFd: number): Buffer {
  const attr = Buffer.alloc(MOUNT_ATTR_SIZE);
  attr.writeBigUInt64LE(BigInt(MOUNT_ATTR_IDMAP), 0);
  attr.writeBigUInt64LE(BigInt(usernsFd), 24);
  return attr;
}

function errCode(err: unknown): string {
  return (err as NodeJS.ErrnoException).code ?? 'EIO';
}
