/**
 * Space and inodes used by a directory tree, for a container's writable layer (the overlay upper
 * dir). Counts like `du -s -x` and `du -s -x --inodes`: bytes are st_blocks * 512 (what the files
 * occupy on disk, so sparse files count what they really use), each inode once however many hard
 * links it has, symlinks as themselves (never followed), and nothing below another mount point.
 */
import type { BigIntStats } from 'node:fs';
import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { NotFoundError } from '../errors.js';

export interface DirectoryUsage {
  bytes: bigint;
  inodes: bigint;
}

/** lstat calls in flight per directory: enough to keep libuv's pool busy, bounded for huge dirs. */
const BATCH = 32;

/**
 * Walks `path` iteratively (an explicit stack, so deep trees cannot overflow the call stack). The
 * root itself is counted, as du does. Entries that vanish during the walk are skipped: a running
 * container changes its layer while we look. A missing root is NotFoundError.
 */
export async function directoryUsage(path: string): Promise<DirectoryUsage> {
  let root: BigIntStats;
  try {
    root = await lstat(path, { bigint: true });
  } catch (err) {
    if (isVanished(err)) throw new NotFoundError('directory', path);
    throw err;
  }
  let bytes = root.blocks * 512n;
  let inodes = 1n;
  // Only inodes with several links can be met twice; directories cannot be hard-linked.
  const seen = new Set<bigint>();
  const dirs: string[] = root.isDirectory() ? [path] : [];
  for (let dir = dirs.pop(); dir !== undefined; dir = dirs.pop()) {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (err) {
      if (isVanished(err)) continue;
      throw err;
    }
    for (let i = 0; i < names.length; i += BATCH) {
      const batch = names.slice(i, i + BATCH).map((n) => join(dir, n));
      const stats = await Promise.all(batch.map(async (p) => ({ p, st: await lstatIfPresent(p) })));
      for (const { p, st } of stats) {
        // Same device as the root, else a mount point: neither counted nor entered (du -x).
        if (st === null || st.dev !== root.dev) continue;
        if (st.isDirectory()) {
          dirs.push(p);
        } else if (st.nlink > 1n) {
          if (seen.has(st.ino)) continue;
          seen.add(st.ino);
        }
        bytes += st.blocks * 512n;
        inodes += 1n;
      }
    }
  }
  return { bytes, inodes };
}

async function lstatIfPresent(p: string): Promise<BigIntStats | null> {
  try {
    return await lstat(p, { bigint: true });
  } catch (err) {
    if (isVanished(err)) return null;
    throw err;
  }
}

function isVanished(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}
