import { lstat, open, readdir } from 'node:fs/promises';
import { join } from 'node:path';

import type { DiskUsage } from './types.js';

/**
 * A rename is only durable once the directory holding the new entry is on disk; without this a
 * crash can lose a blob or layer the database already records as present.
 */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export function isErrno(err: unknown, ...codes: string[]): boolean {
  return err instanceof Error && 'code' in err && typeof err.code === 'string' && codes.includes(err.code);
}

/**
 * Like `du -s --inodes` and `du -s -B1` over `roots` together: symlinks are not followed, and an
 * inode reached twice (hard links inside a layer) counts once. Missing roots count as empty.
 */
export async function diskUsage(roots: readonly string[]): Promise<DiskUsage> {
  const seen = new Set<string>();
  let bytes = 0;
  const visit = async (path: string): Promise<void> => {
    let st;
    try {
      st = await lstat(path, { bigint: true });
    } catch (err) {
      // Gone since its directory was listed (a concurrent removal): nothing to count.
      if (isErrno(err, 'ENOENT')) return;
      throw err;
    }
    const key = `${st.dev}:${st.ino}`;
    if (seen.has(key)) return;
    seen.add(key);
    bytes += Number(st.blocks) * 512;
    if (!st.isDirectory()) return;
    let names: string[];
    try {
      names = await readdir(path);
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return;
      throw err;
    }
    await Promise.all(names.map((name) => visit(join(path, name))));
  };
  for (const root of roots) await visit(root);
  return { bytes, inodes: seen.size };
}
