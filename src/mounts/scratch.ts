/**
 * Scratch dirs for probes that mount things: each run gets a fresh dir, and a run cut short (a
 * berthd killed mid-probe) is cleared by the next, by names alone, with no mount table to read.
 */
import { chmod, mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { unmountAll } from './syscalls.js';

export interface ScratchLayout {
  /** Where the scratch dirs go; made if missing. */
  parent: string;
  /** Names the scratch dirs start with; every entry of `parent` so named is a leftover. */
  prefix: string;
  /** The mode of the parent and of each scratch dir. */
  mode: number;
  /** What a run may mount in its dir (namespace pins too), those stacked on others first. */
  mounts: readonly string[];
}

/** Runs `act` in a fresh scratch dir and removes the dir, and whatever is mounted in it, after. */
export async function withScratchDir<T>(layout: ScratchLayout, act: (dir: string) => Promise<T>): Promise<T> {
  await mkdir(layout.parent, { recursive: true, mode: layout.mode });
  for (const name of await readdir(layout.parent)) {
    if (name.startsWith(layout.prefix)) await removeScratch(layout, join(layout.parent, name));
  }
  const dir = await mkdtemp(join(layout.parent, layout.prefix));
  try {
    await chmod(dir, layout.mode);
    return await act(dir);
  } finally {
    await removeScratch(layout, dir);
  }
}

/** Best effort: what cannot go now is left to the next run. */
async function removeScratch(layout: ScratchLayout, dir: string): Promise<void> {
  for (const name of layout.mounts) await unmountAll(join(dir, name)).catch(() => undefined);
  await rm(dir, { recursive: true, force: true }).catch(() => undefined);
}
