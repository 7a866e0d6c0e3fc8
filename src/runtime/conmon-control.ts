/**
 * conmon's control fifo in a container's bundle (`ctl`): how berthd asks a running conmon to reopen
 * the container's log file or resize the terminal it holds.
 */
import { constants, watch, type Stats } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { FailedPreconditionError } from '../errors.js';

/** conmon's control message asking it to reopen the log file (type 2; height and width unused). */
const REOPEN_LOG_MESSAGE = '2 0 0\n';
/** conmon's control message type for a terminal resize: "1 <height> <width>". */
const RESIZE_MESSAGE_TYPE = 1;

/** See Conmon.reopenLog. */
export async function reopenLog(
  bundleDir: string,
  logPath: string | undefined,
  timeoutMs: number,
): Promise<void> {
  const before = logPath ? await statOrNull(logPath) : null;
  const changed = logPath ? watchForNewFile(logPath, before, timeoutMs) : null;
  try {
    await writeControl(bundleDir, REOPEN_LOG_MESSAGE, 'reopen its log');
    if (changed && !(await changed.done)) {
      throw new FailedPreconditionError(
        `conmon did not reopen ${logPath} within ${timeoutMs} ms (did it exit?)`,
      );
    }
  } finally {
    changed?.cancel();
  }
}

/** See Conmon.resizeTerminal. */
export async function resizeTerminal(
  bundleDir: string,
  size: { width: number; height: number },
): Promise<void> {
  await writeControl(
    bundleDir,
    `${RESIZE_MESSAGE_TYPE} ${size.height} ${size.width}\n`,
    'resize its terminal',
  );
}

/** The file at `path`, or null when there is none (yet): conmon replaces the log file by a rename. */
async function statOrNull(path: string): Promise<Stats | null> {
  try {
    return await stat(path);
  } catch {
    return null;
  }
}

/**
 * Resolves true once a file other than `before` (another inode, or any file when there was none)
 * sits at `path`, false after `timeoutMs`. Watches the directory: conmon creates `<path>.tmp`
 * and renames it over `path`.
 */
function watchForNewFile(
  path: string,
  before: Stats | null,
  timeoutMs: number,
): { done: Promise<boolean>; cancel: () => void } {
  let cancel = (): void => undefined;
  const done = new Promise<boolean>((resolve) => {
    let settled = false;
    const watcher = watch(dirname(path), { persistent: false });
    const finish = (ok: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      watcher.close();
      resolve(ok);
    };
    cancel = () => finish(false);
    const timer = setTimeout(() => finish(false), timeoutMs);
    const check = async (): Promise<void> => {
      const now = await statOrNull(path);
      if (now && (!before || now.ino !== before.ino || now.dev !== before.dev)) finish(true);
    };
    watcher.on('change', (_event, name) => {
      if (name === null || String(name) === basename(path)) void check();
    });
    watcher.on('error', () => finish(false));
    void check();
  });
  return { done, cancel };
}

/**
 * Writes one message to conmon's control fifo. A container whose conmon is gone is
 * FailedPreconditionError; this never blocks on a dead conmon.
 */
async function writeControl(bundleDir: string, message: string, what: string): Promise<void> {
  const ctl = join(bundleDir, 'ctl');
  let fifo: FileHandle;
  try {
    // O_NONBLOCK: opening a fifo for writing blocks until it has a reader; with no conmon
    // holding the read end it fails at once with ENXIO instead.
    fifo = await open(ctl, constants.O_WRONLY | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENXIO' || code === 'ENOENT') {
      throw new FailedPreconditionError(`no conmon is running for bundle ${bundleDir}: cannot ${what}`);
    }
    throw err;
  }
  try {
    await fifo.write(message);
  } finally {
    await fifo.close();
  }
}
