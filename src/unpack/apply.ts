import { constants, type Stats } from 'node:fs';
import {
  chmod,
  lchown,
  link,
  lstat,
  lutimes,
  mkdir,
  open,
  rm,
  symlink,
  type FileHandle,
} from 'node:fs/promises';
import type { Logger } from '../log.js';
import { Backlog } from './backlog.js';
import { RefusedEntryError, asUnpackError } from './errors.js';
import { hostErrno, mknod, setXattr } from './host-ops.js';
import { RootGuard, entryComponents } from './safety.js';
import type { TarEntry } from './tar-reader.js';
import { OVERLAY_OPAQUE_XATTR, OVERLAY_XATTR_PREFIX, classifyWhiteout } from './whiteout.js';

export interface ApplyOptions {
  logger?: Logger;
  /** The deadline for the next host program (mknod, setfattr), in ms. */
  hostTimeoutMs(): number;
}

interface Times {
  parts: readonly string[];
  atime: number;
  mtime: number;
}

// O_EXCL|O_NOFOLLOW: never open through whatever is at the path (above all a symlink). If
// something is there, it is removed and the open retried.
const CREATE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
/** Entries whose metadata may still be in flight; also bounds the open file descriptors. */
const BACKLOG = 32;

/**
 * Applies tar members to a directory the way containerd's archive.Apply does for an overlayfs
 * lower layer: full ownership, modes and times, device nodes, xattrs, and OCI whiteouts turned
 * into overlayfs ones. Members are created one at a time in archive order; their metadata may
 * complete behind (see Backlog), and finish() waits for all of it.
 */
export class LayerApplier {
  private readonly guard: RootGuard;
  private readonly backlog = new Backlog(BACKLOG);
  /** Directory times, set in finish(): creating anything inside a dir changes its mtime. */
  private readonly dirTimes = new Map<string, Times>();

  constructor(
    root: string,
    private readonly opts: ApplyOptions,
  ) {
    this.guard = new RootGuard(root);
  }

  /** Applies one member; `body` is its data (read only for regular files). */
  async apply(entry: TarEntry, body: AsyncIterable<Buffer>): Promise<void> {
    try {
      await this.applyEntry(entry, body);
    } catch (err) {
      throw asUnpackError(err, `cannot create ${entry.type}`, entry.path);
    }
  }

  /** Completes pending metadata, then sets directory times: nothing more is created inside them. */
  async finish(): Promise<void> {
    await this.backlog.drain();
    for (const t of this.dirTimes.values()) {
      await this.backlog.add(async () => {
        await lutimes(this.guard.path(t.parts), t.atime, t.mtime).catch((err: unknown) => {
          throw asUnpackError(err, 'cannot set directory times', t.parts.join('/') || '.');
        });
      });
    }
    await this.backlog.drain();
  }

  /** Waits for whatever is still in flight, ignoring failures: for the error path. */
  async settle(): Promise<void> {
    await this.backlog.settle();
  }

  private async applyEntry(entry: TarEntry, body: AsyncIterable<Buffer>): Promise<void> {
    const parts = entryComponents(entry.path);
    const base = parts[parts.length - 1];
    if (base === undefined) return this.applyRoot(entry);
    const whiteout = classifyWhiteout(base);
    switch (whiteout.kind) {
      case 'opaque':
        return this.markOpaque(entry, parts.slice(0, -1));
      case 'file':
        return this.whiteOut(entry, parts.slice(0, -1), whiteout.name);
      case 'meta':
        this.opts.logger?.debug({ entry: entry.path }, 'unpack: skipping AUFS metadata entry');
        return;
      case 'none':
        break;
    }

    // Checked before anything at the path is removed: a refused link must leave the tree as it was.
    const linkTarget = entry.type === 'hardlink' ? await this.hardLinkTarget(entry, parts) : undefined;
    const path = await this.guard.prepareParents(parts, entry.path);
    switch (entry.type) {
      case 'file': {
        const fh = await this.create(parts, () => open(path, CREATE_FLAGS, 0o600));
        return this.writeFile(fh, path, entry, body);
      }
      case 'dir': {
        await this.makeDir(parts, path);
        this.guard.noteDir(parts);
        this.dirTimes.set(parts.join('/'), { parts, ...times(entry) });
        return this.later(entry, async () => {
          await this.setOwnerAndMode(path, entry);
          await this.setXattrs(path, entry);
        });
      }
      case 'symlink':
        await this.create(parts, () => symlink(entry.linkPath, path));
        return this.later(entry, async () => {
          await lchown(path, entry.uid, entry.gid);
          await this.setXattrs(path, entry);
          await lutimes(path, times(entry).atime, times(entry).mtime);
        });
      case 'hardlink':
        // link(2) does not follow a symlink target: it links the symlink itself, which stays inside.
        // Owner, mode and times are the target's: the header repeats them and must not change them.
        await this.create(parts, () => link(linkTarget as string, path));
        return;
      case 'char':
      case 'block':
      case 'fifo': {
        // mknod is a program, not a call that reports EEXIST: look first.
        const existing = await lstatOrUndefined(path);
        if (existing !== undefined) await this.remove(parts, existing.isDirectory());
        await mknod(path, entry.type, 0o600, entry.devMajor, entry.devMinor, this.opts.hostTimeoutMs());
        return this.later(entry, async () => {
          await this.setOwnerAndMode(path, entry);
          await this.setXattrs(path, entry);
          await lutimes(path, times(entry).atime, times(entry).mtime);
        });
      }
    }
  }

  /**
   * Runs `make`; if the path is taken (the same path twice in one layer), the later member wins:
   * the old one is removed and `make` retried.
   */
  private async create<T>(parts: readonly string[], make: () => Promise<T>): Promise<T> {
    try {
      return await make();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    await this.remove(parts, (await lstat(this.guard.path(parts))).isDirectory());
    return make();
  }

  /**
   * Like create(), except that a directory already there (listed twice, or made as a parent) stays,
   * contents and all.
   */
  private async makeDir(parts: readonly string[], path: string): Promise<void> {
    try {
      await mkdir(path, { mode: 0o700 });
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const existing = await lstat(path);
    if (existing.isDirectory()) return;
    await this.remove(parts, false);
    await mkdir(path, { mode: 0o700 });
  }

  /** "./" itself: the layer root's owner, mode and times; the root dir already exists. */
  private async applyRoot(entry: TarEntry): Promise<void> {
    if (entry.type !== 'dir')
      throw new RefusedEntryError(`the layer root must be a directory, not a ${entry.type}`, entry.path);
    const path = this.guard.path([]);
    this.dirTimes.set('', { parts: [], ...times(entry) });
    return this.later(entry, async () => {
      await this.setOwnerAndMode(path, entry);
      await this.setXattrs(path, entry);
    });
  }

  private async hardLinkTarget(entry: TarEntry, parts: readonly string[]): Promise<string> {
    let targetParts: string[];
    try {
      targetParts = entryComponents(entry.linkPath, entry.path);
    } catch {
      throw new RefusedEntryError(
        `hard link target ${JSON.stringify(entry.linkPath)} is not a path inside the layer`,
        entry.path,
      );
    }
    if (targetParts.length === 0) throw new RefusedEntryError('hard link to the layer root', entry.path);
    if (targetParts.join('/') === parts.join('/'))
      throw new RefusedEntryError('hard link to itself', entry.path);
    const target = await this.guard.checkParents(targetParts, entry.path);
    const st = await lstatOrUndefined(target);
    if (st === undefined) {
      throw new RefusedEntryError(
        `hard link target ${JSON.stringify(entry.linkPath)} is not in the layer (yet)`,
        entry.path,
      );
    }
    if (st.isDirectory())
      throw new RefusedEntryError(
        `hard link target ${JSON.stringify(entry.linkPath)} is a directory`,
        entry.path,
      );
    return target;
  }

  private async writeFile(
    fh: FileHandle,
    path: string,
    entry: TarEntry,
    body: AsyncIterable<Buffer>,
  ): Promise<void> {
    try {
      for await (const chunk of body) await writeAll(fh, chunk);
    } catch (err) {
      await fh.close();
      throw err;
    }
    return this.later(entry, async () => {
      try {
        // The real mode only after the owner: chown clears setuid and setgid.
        await fh.chown(entry.uid, entry.gid);
        await fh.chmod(entry.mode);
        const t = times(entry);
        await fh.utimes(t.atime, t.mtime);
      } finally {
        await fh.close();
      }
      await this.setXattrs(path, entry);
    });
  }

  /** Hands an entry's remaining metadata work to the backlog, naming the entry if it fails. */
  private later(entry: TarEntry, job: () => Promise<void>): Promise<void> {
    return this.backlog.add(() =>
      job().catch((err: unknown) => {
        throw asUnpackError(err, `cannot set metadata of ${entry.type}`, entry.path);
      }),
    );
  }

  private async setOwnerAndMode(path: string, entry: TarEntry): Promise<void> {
    await lchown(path, entry.uid, entry.gid);
    await chmod(path, entry.mode);
  }

  /** After the owner: chown(2) drops security.capability. */
  private async setXattrs(path: string, entry: TarEntry): Promise<void> {
    for (const [name, value] of entry.xattrs) {
      if (name.startsWith(OVERLAY_XATTR_PREFIX)) {
        // Set by a layer, these would forge whiteouts or redirects; OCI expresses those as .wh. files.
        this.opts.logger?.warn(
          { entry: entry.path, xattr: name },
          'unpack: ignoring an overlayfs xattr in a layer',
        );
        continue;
      }
      try {
        await setXattr(path, name, value, this.opts.hostTimeoutMs());
      } catch (err) {
        const privileged = name.startsWith('security.') || name.startsWith('trusted.');
        if (!(privileged && hostErrno(err) === 'EPERM'))
          throw asUnpackError(err, `cannot set xattr ${name}`, entry.path);
        // E.g. an LSM refusing a security label: the file is still usable, as containerd also decides.
        this.opts.logger?.warn({ entry: entry.path, xattr: name }, 'unpack: xattr not permitted, skipped');
      }
    }
  }

  /** `.wh..wh..opq` in `dirParts`: the dir hides whatever lower layers have in it. */
  private async markOpaque(entry: TarEntry, dirParts: readonly string[]): Promise<void> {
    // The marker's parents include the dir itself, which is created if the layer did not list it.
    await this.guard.prepareParents([...dirParts, '.wh..wh..opq'], entry.path);
    await setXattr(
      this.guard.path(dirParts),
      OVERLAY_OPAQUE_XATTR,
      Buffer.from('y'),
      this.opts.hostTimeoutMs(),
    );
  }

  /** `.wh.<name>`: a 0/0 character device named `name`, overlayfs's mark for a deleted file. */
  private async whiteOut(entry: TarEntry, dirParts: readonly string[], name: string): Promise<void> {
    if (name === '' || name === '.' || name === '..')
      throw new RefusedEntryError('malformed whiteout name', entry.path);
    const parts = [...dirParts, name];
    const path = await this.guard.prepareParents(parts, entry.path);
    if ((await lstatOrUndefined(path)) !== undefined) {
      // OCI: a whiteout only hides lower layers' files, never one this layer itself has.
      this.opts.logger?.debug({ entry: entry.path }, 'unpack: whiteout of a file in the same layer ignored');
      return;
    }
    await mknod(path, 'char', 0, 0, 0, this.opts.hostTimeoutMs());
    return this.later(entry, async () => {
      await lchown(path, entry.uid, entry.gid);
      // The marker's own time, so that unpacking the same layer twice gives the same tree.
      await lutimes(path, times(entry).atime, times(entry).mtime);
    });
  }

  private async remove(parts: readonly string[], wasDir: boolean): Promise<void> {
    // Pending jobs work by path: none may find a different file there once this one is gone.
    await this.backlog.drain();
    await rm(this.guard.path(parts), { recursive: wasDir, force: true });
    this.guard.forget(parts, wasDir);
    const key = parts.join('/');
    this.dirTimes.delete(key);
    if (!wasDir) return;
    for (const k of this.dirTimes.keys()) if (k.startsWith(`${key}/`)) this.dirTimes.delete(k);
  }
}

function times(entry: TarEntry): { atime: number; mtime: number } {
  return { atime: entry.atime ?? entry.mtime, mtime: entry.mtime };
}

async function lstatOrUndefined(path: string): Promise<Stats | undefined> {
  try {
    return await lstat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

async function writeAll(fh: FileHandle, chunk: Buffer): Promise<void> {
  let offset = 0;
  while (offset < chunk.length) {
    const { bytesWritten } = await fh.write(chunk, offset, chunk.length - offset);
    if (bytesWritten === 0) throw new Error('write made no progress');
    offset += bytesWritten;
  }
}
