/**
 * An overlayfs mount whose dirs are named relative to one dir: a container's rootfs (lowers, upper
 * and work) and its image volumes (lowers alone, read-only). mount(2) takes its options in one
 * page (4096 bytes), and absolute layer paths are ~90 bytes each, so an image with ~40 layers
 * would not fit; Docker's overlay2 hit the same limit. The mount is made in-process with absolute
 * paths when they fit (an exec costs milliseconds), and otherwise by mount(8) with cwd = `dir`,
 * naming each dir by its short relative path, which the kernel resolves against the mounting
 * process's cwd. That fits overlayfs's own maximum of 500 lowers in the page.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { InvalidArgumentError } from '../errors.js';
import { run } from '../exec.js';
import { mountSyscall } from '../mounts/syscalls.js';

/** Mounting is a local syscall; it only takes long when the host is in trouble. */
const MOUNT_TIMEOUT_MS = 30_000;
/** The kernel copies mount data into one page and rejects anything longer. */
const MOUNT_DATA_MAX = 4095;

export interface OverlayDirs {
  /** Top-most first, relative to the dir. A read-only overlay needs two at least. */
  lowers: readonly string[];
  /** Relative to the dir; without them the overlay is read-only. */
  upper?: { upperdir: string; workdir: string };
}

let indexOption: Promise<boolean> | null = null;

/**
 * Whether overlayfs takes `index=`: kept once true. Until the overlay module is loaded (the first
 * overlay mount loads it) its parameters are not there, so a false is asked again next time.
 */
function overlayHasIndexOption(): Promise<boolean> {
  indexOption ??= stat('/sys/module/overlay/parameters/index').then(
    () => true,
    () => {
      indexOption = null;
      return false;
    },
  );
  return indexOption;
}

/** Mounts the overlay of `dirs`, each relative to `dir`, on `target`. */
export async function mountOverlay(dir: string, target: string, dirs: OverlayDirs): Promise<void> {
  // As containerd and Docker do: with index=on (some distros' default) a lower reused under
  // other uppers, or a layer dir that moved, can fail to mount with "failed to verify origin".
  const indexOff = await overlayHasIndexOption();
  const data = (at: (path: string) => string): string =>
    [`lowerdir=${dirs.lowers.map(at).join(':')}`]
      .concat(dirs.upper ? [`upperdir=${at(dirs.upper.upperdir)}`, `workdir=${at(dirs.upper.workdir)}`] : [])
      .concat(indexOff ? ['index=off'] : [])
      .join(',');
  const absolute = data((path) => join(dir, path));
  // overlayfs splits its options on these; relative names from the dir avoid them.
  if (absolute.length <= MOUNT_DATA_MAX && !/[,:\\]/.test(dir)) {
    await mountSyscall({ source: 'overlay', target, fstype: 'overlay', flags: 0, data: absolute });
    return;
  }
  const relative = data((path) => path);
  if (relative.length > MOUNT_DATA_MAX) {
    throw new InvalidArgumentError('layers', `${dirs.lowers.length} layers exceed the mount options limit`);
  }
  await run('mount', ['-t', 'overlay', 'overlay', '-o', relative, target], {
    cwd: dir,
    timeoutMs: MOUNT_TIMEOUT_MS,
  });
}
