/**
 * The few libc calls Node lacks, made in-process through koffi (a maintained FFI with prebuilt
 * binaries, so no compiler is needed to install berth), loaded on first use.
 *
 * The calls are synchronous: each returns in microseconds, and errno is only readable on the
 * thread that made the call.
 */
import { getSystemErrorMap } from 'node:util';

export interface Libc {
  mount(
    source: string | null,
    target: string,
    fstype: string | null,
    flags: number,
    data: string | null,
  ): number;
  umount2(target: string, flags: number): number;
  flock(fd: number, operation: number): number;
  /**
   * mount_setattr(2) with no attributes, through syscall(2) (glibc before 2.36 has no wrapper):
   * only ever called to learn whether the kernel has it (ENOSYS when it has not).
   */
  mountSetattrWithoutAttrs(dfd: number, path: string, flags: number): number;
  errno(): number;
}

/** mount_setattr's number in the syscall table every architecture berth runs on shares. */
const SYS_MOUNT_SETATTR = 442;

let libc: Promise<Libc> | undefined;

export function loadLibc(): Promise<Libc> {
  libc ??= import('koffi').then(({ default: koffi }) => {
    const lib = koffi.load('libc.so.6');
    const mount = lib.func(
      'int mount(const char *source, const char *target, const char *fstype, unsigned long flags, const char *data)',
    );
    const umount2 = lib.func('int umount2(const char *target, int flags)');
    const flock = lib.func('int flock(int fd, int operation)');
    const syscall = lib.func('long syscall(long number, ...)');
    return {
      mount: (source, target, fstype, flags, data) => Number(mount(source, target, fstype, flags, data)),
      umount2: (target, flags) => Number(umount2(target, flags)),
      flock: (fd, operation) => Number(flock(fd, operation)),
      mountSetattrWithoutAttrs: (dfd, path, flags) =>
        Number(
          syscall(SYS_MOUNT_SETATTR, 'int', dfd, 'str', path, 'uint', flags, 'void *', null, 'size_t', 0),
        ),
      errno: () => koffi.errno(),
    };
  });
  return libc;
}

const errnoNames = new Map<number, [string, string]>();

/** `EBUSY` for the errno number of EBUSY. */
export function errnoName(errno: number): string {
  if (errnoNames.size === 0) for (const [code, entry] of getSystemErrorMap()) errnoNames.set(-code, entry);
  return errnoNames.get(errno)?.[0] ?? `errno ${errno}`;
}

/** strerror's text for an errno name. */
export function describeErrno(name: string): string {
  for (const [, [code, message]] of getSystemErrorMap()) if (code === name) return message;
  return 'unknown error';
}
