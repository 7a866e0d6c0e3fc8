/**
 * berthd's claim on its root, state and netns dirs: an exclusive flock(2) on each dir itself, held
 * for the daemon's life. A second berthd given one of them (two services with one netns dir, a
 * copy started by hand) refuses to start instead of sweeping the first one's pins, runc
 * containers and exec dirs as orphans at start-up.
 *
 * The lock is on the dir, not on a file in it: the netns dir is shared with `ip netns`, which
 * would list a lock file there as a namespace. A flock goes with the process that holds it, so a
 * berthd killed with -9 leaves nothing stale behind, and the fd is close-on-exec (as every fd
 * Node opens), so conmon and runc, which outlive berthd, never hold it.
 */
import { closeSync, constants, fstatSync, openSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { BerthError } from './errors.js';
import { errnoName, loadLibc } from './libc.js';

const LOCK_EX = 2;
const LOCK_NB = 4;
const LOCK_UN = 8;

/** Another live process holds the lock on one of berthd's dirs. */
export class DirInUseError extends BerthError {
  override name = 'DirInUseError';
}

export interface ClaimedDir {
  /** What the dir is to berthd, for the error: `root dir`, `netns dir`. */
  what: string;
  path: string;
}

export interface DirLocks {
  /** Lets go of every dir; idempotent. */
  release(): void;
}

/**
 * Takes an exclusive lock on each dir (which must exist), or none: throws DirInUseError naming the
 * first one another process holds, and its pid when /proc/locks tells. Dirs given twice (a state
 * dir that is also the root) are locked once.
 */
export async function lockDirs(dirs: readonly ClaimedDir[]): Promise<DirLocks> {
  const libc = await loadLibc();
  const held: number[] = [];
  const release = (): void => {
    for (const fd of held.splice(0)) {
      libc.flock(fd, LOCK_UN);
      closeSync(fd);
    }
  };
  const seen = new Set<string>();
  try {
    for (const { what, path } of dirs) {
      const fd = openSync(path, constants.O_RDONLY | constants.O_DIRECTORY);
      const { dev, ino } = fstatSync(fd, { bigint: true });
      const key = `${dev}:${ino}`;
      if (seen.has(key)) {
        closeSync(fd);
        continue;
      }
      seen.add(key);
      if (libc.flock(fd, LOCK_EX | LOCK_NB) === 0) {
        held.push(fd);
        continue;
      }
      const code = errnoName(libc.errno());
      closeSync(fd);
      if (code !== 'EAGAIN' && code !== 'EWOULDBLOCK') throw new Error(`lock ${what} ${path}: ${code}`);
      const holder = await lockHolder(dev, ino);
      throw new DirInUseError(
        `${what} ${path} is in use by another berthd${holder === null ? '' : ` (pid ${holder})`}; ` +
          'each berthd needs a root, state and netns dir of its own',
      );
    }
  } catch (err) {
    release();
    throw err;
  }
  return { release };
}

/** The pid /proc/locks gives for the flock on dev:ino, or null. */
async function lockHolder(dev: bigint, ino: bigint): Promise<number | null> {
  const text = await readFile('/proc/locks', 'utf8').catch(() => '');
  // glibc's major()/minor() of a dev_t; /proc/locks writes them in hex.
  const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
  const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
  const id = `${major.toString(16).padStart(2, '0')}:${minor.toString(16).padStart(2, '0')}:${ino}`;
  for (const line of text.split('\n')) {
    // "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; lines of waiters have "->" after the number.
    const fields = line.trim().split(/\s+/);
    if (fields[1] !== 'FLOCK' || fields[5] !== id) continue;
    const pid = Number(fields[4]);
    if (Number.isInteger(pid) && pid > 0) return pid;
  }
  return null;
}
