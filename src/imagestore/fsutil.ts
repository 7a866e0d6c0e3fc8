import { NotFoundError } from '../errors.js';
import { directoryUsage } from '../stats/disk.js';

import type { DiskUsage } from './types.js';

export function isErrno(err: unknown, ...codes: string[]): boolean {
  return err instanceof Error && 'code' in err && typeof err.code === 'string' && codes.includes(err.code);
}

/**
 * Like `du -s -x --inodes` and `du -s -x -B1` over `roots` (see directoryUsage, which also
 * measures containers' writable layers). Missing roots count as empty.
 */
export async function diskUsage(roots: readonly string[]): Promise<DiskUsage> {
  let bytes = 0;
  let inodes = 0;
  for (const root of roots) {
    try {
      const usage = await directoryUsage(root);
      bytes += Number(usage.bytes);
      inodes += Number(usage.inodes);
    } catch (err) {
      if (err instanceof NotFoundError) continue;
      throw err;
    }
  }
  return { bytes, inodes };
}
