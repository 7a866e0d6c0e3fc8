/**
 * Which CDI spec files and dirs berth trusts. A spec's hooks run on the host as root and its mounts
 * and device nodes go into containers, so a file (or the dir holding it) that another user could
 * write is someone else's say over the node: refused, as a sudoers file of another owner would be.
 * Trusted is what only root (or berthd's own user) can write: owned by it, no group or other write.
 */
import type { Stats } from 'node:fs';

/** Why `info` (a spec file's or dir's) is not trusted, or null. */
export function untrustedBecause(info: Pick<Stats, 'uid' | 'mode'>): string | null {
  const own = process.getuid?.() ?? 0;
  if (info.uid !== 0 && info.uid !== own) return `is owned by uid ${info.uid}, not root`;
  if ((info.mode & 0o022) !== 0) {
    const who = (info.mode & 0o020 ? ['group'] : []).concat(info.mode & 0o002 ? ['others'] : []);
    return `is writable by ${who.join(' and ')} (mode ${(info.mode & 0o7777).toString(8).padStart(4, '0')})`;
  }
  return null;
}
