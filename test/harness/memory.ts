/** Resident memory of a process, for tests and benchmarks that check a daemon stays bounded. */
import { readFile } from 'node:fs/promises';

/** How often watchRss samples: often enough to see a burst of a second or two. */
const RSS_SAMPLE_MS = 100;

/** A `Name:  123 kB` field of a /proc/<pid> file, in KiB; NaN when unreadable or not there. */
export async function procKiB(pid: number | undefined, file: string, field: string): Promise<number> {
  if (pid === undefined) return NaN;
  const text = await readFile(`/proc/${pid}/${file}`, 'utf8').catch(() => '');
  return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN);
}

/** VmRSS of `pid` in KiB; NaN when the process (or the pid) is not there. */
export function rssKiB(pid: number | undefined): Promise<number> {
  return procKiB(pid, 'status', 'VmRSS');
}

/** Peak RSS of `pid` while `task` runs, sampled on a timer, so a very short burst can be missed. */
export async function watchRss<T>(
  pid: number | undefined,
  task: () => Promise<T>,
): Promise<[T, { before: number; peak: number }]> {
  const before = await rssKiB(pid);
  let peak = before;
  const sampler = setInterval(() => {
    void rssKiB(pid).then((kib) => {
      if (kib > peak || Number.isNaN(peak)) peak = kib;
    });
  }, RSS_SAMPLE_MS);
  try {
    const value = await task();
    peak = Math.max(peak, await rssKiB(pid));
    return [value, { before, peak }];
  } finally {
    clearInterval(sampler);
  }
}

/**
 * VmRSS of `pid` in KiB after `settleMs` of leaving it alone: right after a burst a daemon still
 * holds garbage and deferred work, which a figure for "idle" or "after" should not count.
 */
export async function settledRssKiB(pid: number | undefined, settleMs: number): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, settleMs));
  return rssKiB(pid);
}
