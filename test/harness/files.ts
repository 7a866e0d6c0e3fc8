/** The file system as tests look at it: whether something is there, what a directory holds. */
import { access, readdir } from 'node:fs/promises';

/** Something is reachable at `path` (a symlink counts as its target). */
export async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}

/** The names in `dir`; none when it is not there (yet, or any more). */
export async function namesIn(dir: string): Promise<string[]> {
  return readdir(dir).catch(() => [] as string[]);
}
