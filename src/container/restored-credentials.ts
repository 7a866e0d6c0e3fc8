/**
 * What criu really restored. criu brings each process back with the credentials its own images
 * (core-*.img) hold, which berth does not read: spec.dump's user (checkRestoredUser) is only the
 * archive's word for them. So once the restore has run, and before StartContainer answers, every
 * process of the restored tree is read back from /proc and held to the spec's process.user.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { FailedPreconditionError } from '../errors.js';
import { groupSet } from '../oci/restored-spec.js';
import type { User } from '../oci/spec.js';
import { credentialsFrom, type ProcessCredentials } from '../process/identity.js';

/** A restored process and its ids; null when its status could not be parsed. */
export interface RestoredProcess {
  pid: number;
  credentials: ProcessCredentials | null;
}

/** The restored container ran with other ids than its spec's: it was killed, nothing of it runs. */
export class RestoredCredentialsError extends FailedPreconditionError {
  override name = 'RestoredCredentialsError';
}

/**
 * The restored init and every process below it, as criu made them (it forks the whole tree from
 * its root task), found by the `PPid:` of every process in `procRoot`: the per-thread children
 * files are not on every kernel. A process gone while it is read is left out: it runs no more.
 */
export async function restoredProcesses(initPid: number, procRoot = '/proc'): Promise<RestoredProcess[]> {
  const pids = (await readdir(procRoot)).filter((name) => /^\d+$/.test(name)).map(Number);
  const read = (pid: number, file: string): Promise<string | null> =>
    readFile(join(procRoot, String(pid), file), 'utf8').catch(gone);
  const statuses = new Map<number, string>();
  const children = new Map<number, number[]>();
  await Promise.all(
    pids.map(async (pid) => {
      const text = await read(pid, 'status');
      if (text === null) return;
      statuses.set(pid, text);
      const parent = Number(/^PPid:\s*(\d+)/m.exec(text)?.[1] ?? -1);
      children.set(parent, [...(children.get(parent) ?? []), pid]);
    }),
  );
  const found: RestoredProcess[] = [];
  const queue = statuses.has(initPid) ? [initPid] : [];
  // A pid reused between two reads could make a loop of parents.
  const seen = new Set(queue);
  for (let pid = queue.shift(); pid !== undefined; pid = queue.shift()) {
    const [uidMap, gidMap] = await Promise.all([read(pid, 'uid_map'), read(pid, 'gid_map')]);
    found.push({ pid, credentials: credentialsFrom(statuses.get(pid) ?? '', uidMap ?? '', gidMap ?? '') });
    for (const child of children.get(pid) ?? []) {
      if (!seen.has(child)) queue.push(child);
      seen.add(child);
    }
  }
  return found;
}

/** ENOENT and ESRCH: the process (or thread) has ended. Anything else is thrown. */
function gone(err: unknown): null {
  const code = (err as { code?: unknown }).code;
  if (code === 'ENOENT' || code === 'ESRCH') return null;
  throw err;
}

/**
 * How a restored process differs from the spec's user (runc's defaults, uid 0 and gid 0, where it
 * names none), or null when it does not. Every uid (real, effective, saved, filesystem) must be the
 * spec's uid and every gid its gid; the groups are compared as sets with the primary gid counted
 * on both sides, as checkRestoredUser does, for berth lists it among additionalGids and the kernel
 * keeps whatever setgroups was given.
 */
export function credentialsMismatch(proc: RestoredProcess, user: User | undefined): string | null {
  const uid = user?.uid ?? 0;
  const gid = user?.gid ?? 0;
  const wanted = groupSet(gid, user?.additionalGids ?? []);
  const expected = `uid ${uid} gid ${gid} groups [${wanted.join(',')}]`;
  const { credentials: has } = proc;
  if (has === null) return `process ${proc.pid} has unreadable credentials, the spec's user is ${expected}`;
  const groups = groupSet(gid, has.groups);
  const same =
    has.uids.every((u) => u === uid) && has.gids.every((g) => g === gid) && groups.join() === wanted.join();
  if (same) return null;
  return (
    `process ${proc.pid} runs with uids ${has.uids.join('/')} gids ${has.gids.join('/')} ` +
    `groups [${[...new Set(has.groups)].sort((a, b) => a - b).join(',')}] (real/effective/saved/fs), ` +
    `the spec's user is ${expected}`
  );
}

/** The first restored process whose ids are not the spec's user, or null when all are. */
export function firstMismatch(processes: readonly RestoredProcess[], user: User | undefined): string | null {
  for (const proc of processes) {
    const why = credentialsMismatch(proc, user);
    if (why !== null) return why;
  }
  return null;
}
