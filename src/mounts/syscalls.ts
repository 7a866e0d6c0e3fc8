/**
 * mount(2) and umount2(2) called in-process (see libc.ts). An exec of util-linux's mount or umount
 * costs 2–5 ms here, and a pod start, a container create and a pod stop each paid it at least once.
 */
import { BerthError } from '../errors.js';
import { describeErrno, errnoName, loadLibc } from '../libc.js';

/** mount(2) flags berth uses (linux/mount.h). */
export const MountFlags = {
  RDONLY: 0x1,
  NOSUID: 0x2,
  NODEV: 0x4,
  NOEXEC: 0x8,
  REMOUNT: 0x20,
  BIND: 0x1000,
  REC: 0x4000,
  PRIVATE: 0x40000,
  SHARED: 0x100000,
} as const;

const MNT_DETACH = 0x2;

/** A mount(2) or umount2(2) call failed; `code` is the errno name (EBUSY, EINVAL, …). */
export class MountSyscallError extends BerthError {
  override name = 'MountSyscallError';
  constructor(
    what: string,
    readonly code: string,
  ) {
    super(`${what}: ${code} (${describeErrno(code)})`);
  }
}

export interface MountRequest {
  source: string;
  target: string;
  /** null for a change of propagation (MS_SHARED, MS_PRIVATE) or a bind. */
  fstype: string | null;
  flags: number;
  /** The filesystem's options, e.g. `mode=1777,size=64m`; absolute paths for overlay. */
  data: string | null;
}

export async function mountSyscall(request: MountRequest): Promise<void> {
  const c = await loadLibc();
  const { source, target, fstype, flags, data } = request;
  if (c.mount(source, target, fstype, flags, data) !== 0) {
    throw new MountSyscallError(`mount ${fstype ?? source} on ${target}`, errnoName(c.errno()));
  }
}

/** Makes `target`, a mount point, shared or private (MountFlags.SHARED, MountFlags.PRIVATE). */
export function changePropagation(target: string, flag: number): Promise<void> {
  return mountSyscall({ source: 'none', target, fstype: null, flags: flag, data: null });
}

/**
 * Unmounts everything stacked on `target` (a path can be mounted more than once) and returns how
 * many mounts went. Idempotent: a path that is no mount point (EINVAL) or does not exist is done.
 * A mount refused as busy is detached instead: it goes away when its last user does.
 */
export async function unmountAll(target: string, maxMounts = 8): Promise<number> {
  const c = await loadLibc();
  // One call more than maxMounts: the last one must find nothing left.
  for (let count = 0; count <= maxMounts; count++) {
    if (c.umount2(target, 0) === 0) continue;
    const code = errnoName(c.errno());
    if (code === 'EINVAL' || code === 'ENOENT') return count;
    if (code !== 'EBUSY') throw new MountSyscallError(`unmount ${target}`, code);
    if (c.umount2(target, MNT_DETACH) !== 0) {
      throw new MountSyscallError(`unmount ${target} (busy, then lazily)`, errnoName(c.errno()));
    }
  }
  throw new MountSyscallError(`unmount ${target}: gave up after ${maxMounts + 1} unmounts`, 'EBUSY');
}
