/**
 * Counting the commits a running berthd makes, from outside it: every commit of a database in WAL
 * mode appends frames to its -wal file, the last of which carries the database size (a commit
 * frame). Read before and after an rpc, the count says how many transactions it committed, and
 * so how many fsyncs it waited for, whatever code made them.
 */
import { readFileSync } from 'node:fs';

const WAL_HEADER = 32;
const FRAME_HEADER = 24;

/** Where the -wal file stood: its generation (salts) and the commit frames of that generation. */
export interface WalMark {
  salts: string;
  commits: number;
}

export function walMark(databasePath: string): WalMark {
  const wal = readFileSync(`${databasePath}-wal`);
  if (wal.length < WAL_HEADER) return { salts: '', commits: 0 };
  const pageSize = wal.readUInt32BE(8);
  const salts = wal.subarray(16, 24).toString('hex');
  let commits = 0;
  for (let at = WAL_HEADER; at + FRAME_HEADER + pageSize <= wal.length; at += FRAME_HEADER + pageSize) {
    // Frames of an earlier generation, left after a checkpoint restarted the log, carry old salts.
    if (wal.subarray(at + 8, at + 16).toString('hex') !== salts) break;
    if (wal.readUInt32BE(at + 4) !== 0) commits++;
  }
  return { salts, commits };
}

/** The commits between two marks of the same generation; throws if a checkpoint restarted the log. */
export function commitsBetween(before: WalMark, after: WalMark): number {
  if (before.salts !== after.salts) throw new Error('the WAL was restarted by a checkpoint: count again');
  return after.commits - before.commits;
}
