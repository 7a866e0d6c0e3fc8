/** The file system as tests look at it: whether something is there, what a directory holds. */
import { access, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';

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

/**
 * A maker of fake file trees (a cgroup filesystem, say) in temp dirs named `prefix`..., each file
 * given by its path below the tree's root. The trees go when the test file's tests are done.
 */
export function fakeTreeMaker(prefix: string): (files: Record<string, string>) => Promise<string> {
  const roots: string[] = [];
  after(async () => {
    for (const root of roots) await rm(root, { recursive: true, force: true });
  });
  return async (files) => {
    const root = await mkdtemp(join(tmpdir(), prefix));
    roots.push(root);
    for (const [rel, text] of Object.entries(files)) {
      await mkdir(join(root, rel, '..'), { recursive: true });
      await writeFile(join(root, rel), text);
    }
    return root;
  };
}
