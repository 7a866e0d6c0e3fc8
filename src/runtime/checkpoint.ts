/**
 * `runc checkpoint`: criu dumps a container's processes, driven by runc, which tells criu about
 * the container's namespaces, mounts and cgroups. crun takes the same command and flags.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ExecError } from '../errors.js';
import { run } from '../exec.js';
import type { Runc } from './runc.js';
import type { CheckpointOptions } from './runtime.js';

/**
 * How long criu may take over one container, dump or restore, when nothing else says: a small
 * container takes seconds, one with gigabytes of memory pages minutes. CheckpointContainer's
 * timeout 0 means this; a restore, which StartContainer gives no timeout for, always has it.
 */
export const CRIU_DEFAULT_TIMEOUT_S = 300;

/** criu's log of a dump, in the work dir runc hands it. */
export const DUMP_LOG = 'dump.log';
/** Of criu's log, what an error message carries: its failure is told in its last lines. */
const LOG_TAIL_LINES = 8;

/**
 * Established TCP connections are not dumped (no --tcp-established): restoring them needs the
 * same addresses, which a restore into another pod does not have, so such a container fails the
 * dump with criu's words instead of making an archive that cannot come back. File locks are not
 * dumped either (no --file-locks): a process holding one fails the dump the same way.
 */
export async function checkpointWithRunc(runc: Runc, id: string, opts: CheckpointOptions): Promise<void> {
  const before = await runc.state(id);
  const args = ['checkpoint', '--image-path', opts.imageDir, '--work-path', opts.workDir];
  if (opts.leaveRunning) args.push('--leave-running');
  const cmd = runc.command([...args, id]);
  try {
    await run(cmd.file, cmd.args, { timeoutMs: opts.timeoutMs });
  } catch (err) {
    // criu killed mid-dump (the timeout) leaves the cgroup frozen: what ran before runs again.
    if (before?.status === 'running' && (await runc.state(id).catch(() => null))?.status === 'paused') {
      await runc.resume(id).catch(() => undefined);
    }
    throw await withDumpLog(err, join(opts.workDir, DUMP_LOG));
  }
}

/** Whether the runtime has a `checkpoint` command at all (runc built without it, other runtimes). */
export async function hasCheckpointCommand(runc: Runc): Promise<boolean> {
  const cmd = runc.command(['checkpoint', '--help']);
  return run(cmd.file, cmd.args, { timeoutMs: runc.opts.timeoutMs }).then(
    () => true,
    () => false,
  );
}

async function withDumpLog(err: unknown, logPath: string): Promise<unknown> {
  if (!(err instanceof ExecError)) return err;
  const log = await readFile(logPath, 'utf8').catch(() => '');
  const tail = log.trim().split('\n').slice(-LOG_TAIL_LINES).join('\n');
  if (tail === '') return err;
  const said = `${err.stderr.trim()}\ncriu's ${DUMP_LOG} ends:\n${tail}`;
  return new ExecError(err.command, err.exitCode, said, err.timedOut, err.stdout);
}
