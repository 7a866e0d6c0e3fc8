/**
 * Whether a user namespace's root can get to berth's dirs. runc sets a user-namespaced pod's
 * container up as the namespace's root, an unprivileged host id that owns none of the dirs above
 * berth's and is in none of their groups: every one of them must let others search it (o+x), or
 * the container cannot reach its rootfs. Dirs above berth's are the operator's (a `mktemp -d` dir
 * is 0700): berth does not change their modes, it says which one stops such pods.
 */
import { realpath, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';

/** Others may search a dir with this bit. */
const OTHERS_SEARCH = 0o001;

/**
 * Why a user namespace's root cannot reach `paths` ("/tmp/x is 0700: ..."), naming the first dir
 * above one of them it cannot pass; null when it can pass them all. The paths themselves are
 * berth's, which gives them the modes such pods need.
 */
export async function impassableAncestor(paths: readonly string[]): Promise<string | null> {
  for (const path of paths) {
    // A symlink on the way is followed by the kernel too: its target's dirs are the way.
    const real = await realpath(path).catch(() => resolve(path));
    for (const dir of ancestors(real)) {
      const mode = (await stat(dir)).mode & 0o7777;
      if ((mode & OTHERS_SEARCH) === 0) {
        return `${dir} is ${mode.toString(8).padStart(4, '0')}: a user namespace's root cannot pass it on the way to ${path} (give it o+x, or move berth's dirs)`;
      }
    }
  }
  return null;
}

/** "/a/b/c" → "/", "/a", "/a/b": the dirs passed on the way to it. */
function ancestors(path: string): string[] {
  const dirs: string[] = [];
  for (let dir = dirname(path); ; dir = dirname(dir)) {
    dirs.unshift(dir);
    if (dirname(dir) === dir) return dirs;
  }
}
