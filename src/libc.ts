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
   * The new mount API, through syscall(2): glibc before 2.36 has no wrappers. open_tree(2)
   * returns a file descriptor (or -1); `attr` is a struct mount_attr, or null to ask nothing of
   * mount_setattr(2), which only tells whether the kernel has it (ENOSYS when it has not).
   */
  openTree(dfd: number, path: string, flags: number): number;
  mountSetattr(dfd: number, path: string, flags: number, attr: Buffer | null): number;
  moveMount(fromDfd: number, fromPath: string, toDfd: number, toPath: string, flags: number): number;
  errno(): number;
}

/**
 * The new mount API's numbers: from 424 on, every architecture berth runs on (x86_64, arm64)
 * shares one syscall table.
 */
const SYS_OPEN_TREE = 428;
const SYS_MOVE_MOUNT = 429;
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
      openTree: (dfd, path, flags) => Number(syscall(SYS_OPEN_TREE, 'int', dfd, 'str', path, 'uint', flags)),
      mountSetattr: (dfd, path, flags, attr) =>
        Number(
          syscall(
            SYS_MOUNT_SETATTR,
            'int',
            dfd,
            'str',
            path,
            'uint',
            flags,
            'void *',
            attr,
            'size_t',
            attr?.length ?? 0,
          ),
        ),
      moveMount: (fromDfd, fromPath, toDfd, toPath, flags) =>
        Number(
          syscall(
            SYS_MOVE_MOUNT,
            'int',
            fromDfd,
            'str',
            fromPath,
            'int',
            toDfd,
            'str',
            toPath,
            'uint',
            flags,
          ),
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
