/**
 * A container brought back from a checkpoint under a new conmon: conmon runs `runc restore` in
 * place of `runc create`, so the monitor holds the restored process' stdio and records its exit as
 * it does for a started container. criu's work dir lives only as long as the restore.
 */
import { mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { PRIVATE_DIR } from '../file-modes.js';
import { MonitorError, type Conmon, type MonitorCreated } from './conmon.js';
import { CRIU_DEFAULT_TIMEOUT_S } from './checkpoint.js';
import type { RestoreRequest } from './runtime.js';

/** criu's own account of a failed restore ends with its reason; the lines before give its context. */
const RESTORE_LOG_TAIL_LINES = 8;

export async function restoreUnderMonitor(conmon: Conmon, req: RestoreRequest): Promise<MonitorCreated> {
  const { imagePath, workPath, ...create } = req;
  await rm(workPath, { recursive: true, force: true });
  await mkdir(workPath, { recursive: true, mode: PRIVATE_DIR });
  try {
    return await conmon.create({
      ...create,
      restore: { imagePath, workPath, timeoutMs: CRIU_DEFAULT_TIMEOUT_S * 1000 },
    });
  } catch (err) {
    if (!(err instanceof MonitorError)) throw err;
    const tail = await restoreLogTail(workPath);
    const reason = tail === '' ? err.reason : `${err.reason}; criu's restore.log: ${tail}`;
    throw new MonitorError(req.id, reason, err.timedOut, 'restore');
  } finally {
    await rm(workPath, { recursive: true, force: true });
  }
}

async function restoreLogTail(workPath: string): Promise<string> {
  const log = await readFile(join(workPath, 'restore.log'), 'utf8').catch(() => '');
  return log
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '')
    .slice(-RESTORE_LOG_TAIL_LINES)
    .join(' | ');
}
