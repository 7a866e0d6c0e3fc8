/**
 * Each checkpoint stages its files in a dir of its own under `<root>/checkpoints/`, whose journal
 * says which container it paused and where its temp archive is: after a kill of berthd mid-way,
 * start-up repair (repair.ts) finds there what to resume and what to remove.
 */
import { join, resolve } from 'node:path';

export const JOURNAL = 'journal.json';

export interface CheckpointJournal {
  containerId: string;
  /** The archive as it is written, renamed to the client's location once complete. */
  tempArchive: string;
}

export function checkpointsDir(rootDir: string): string {
  return join(resolve(rootDir), 'checkpoints');
}

export function parseJournal(text: string): CheckpointJournal | null {
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== 'object' || value === null) return null;
    const { containerId, tempArchive } = value as Record<string, unknown>;
    if (typeof containerId !== 'string' || typeof tempArchive !== 'string') return null;
    return { containerId, tempArchive };
  } catch {
    return null;
  }
}
