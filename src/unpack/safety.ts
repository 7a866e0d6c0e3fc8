import { lstat, mkdir, chmod } from 'node:fs/promises';
import { join } from 'node:path';
import { RefusedEntryError, UnpackError } from './errors.js';

/**
 * Turns a member name into path components under the layer root. A leading "/" is normal in tars
 * and means the layer root; any ".." is refused outright, even one that would stay inside: no
 * honest layer needs it, and refusing is simpler to trust than resolving it.
 */
export function entryComponents(name: string, entry: string = name): string[] {
  if (name.includes('\0')) throw new RefusedEntryError('path contains a NUL byte', entry);
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw new RefusedEntryError('path escapes the layer (".." component)', entry);
  if (parts.some((p) => Buffer.byteLength(p) > NAME_MAX)) {
    throw new RefusedEntryError(
      `a name in the path is longer than the ${NAME_MAX} bytes Linux allows`,
      entry,
    );
  }
  return parts;
}

/** Linux's longest file name, in bytes: no file system takes a longer one. */
const NAME_MAX = 255;

/**
 * Keeps every write inside the layer root. An entry's parent dirs are checked with lstat, never
 * followed: a symlink among them is refused, so an entry `a -> /etc` followed by `a/passwd` cannot
 * write to the host's /etc. Dirs known to be real are remembered, so a layer of many files costs
 * one lstat per dir rather than per file and level; only this unpack changes the tree, and it
 * calls forget() whenever it removes something.
 */
export class RootGuard {
  private readonly knownDirs = new Set<string>(['']);

  constructor(readonly root: string) {}

  path(parts: readonly string[]): string {
    return join(this.root, ...parts);
  }

  /**
   * Makes sure every parent of `parts` is a real directory, creating missing ones the way
   * containerd does (0755, owned by us). Returns the entry's absolute path.
   */
  async prepareParents(parts: readonly string[], entry: string): Promise<string> {
    return this.walkParents(parts, entry, true);
  }

  /** Like prepareParents, but a missing parent is an error (for hard link targets). */
  async checkParents(parts: readonly string[], entry: string): Promise<string> {
    return this.walkParents(parts, entry, false);
  }

  /** Records that `parts` is now a real directory created by this unpack. */
  noteDir(parts: readonly string[]): void {
    this.knownDirs.add(parts.join('/'));
  }

  /** Forgets `parts` (and, if it was a directory, everything below it): it was removed. */
  forget(parts: readonly string[], wasDir: boolean): void {
    const key = parts.join('/');
    this.knownDirs.delete(key);
    if (!wasDir) return;
    const below = `${key}/`;
    for (const dir of this.knownDirs) if (dir.startsWith(below)) this.knownDirs.delete(dir);
  }

  private async walkParents(parts: readonly string[], entry: string, create: boolean): Promise<string> {
    for (let i = 1; i < parts.length; i++) {
      const key = parts.slice(0, i).join('/');
      if (this.knownDirs.has(key)) continue;
      const dir = join(this.root, key);
      const st = await lstat(dir).catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return undefined;
        throw new UnpackError(`cannot inspect parent "${key}": ${err.message}`, entry, { cause: err });
      });
      if (st === undefined) {
        if (!create) throw new RefusedEntryError(`parent "${key}" does not exist`, entry);
        await mkdir(dir, { mode: 0o755 });
        // mkdir's mode is subject to the umask; the layer's own entry for this dir, if any, comes later.
        await chmod(dir, 0o755);
      } else if (st.isSymbolicLink()) {
        throw new RefusedEntryError(`refusing to write through symlink "${key}"`, entry);
      } else if (!st.isDirectory()) {
        throw new RefusedEntryError(`parent "${key}" is not a directory`, entry);
      }
      this.knownDirs.add(key);
    }
    return this.path(parts);
  }
}
