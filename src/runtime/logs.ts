/**
 * Container log files, which conmon's k8s-file driver writes in the CRI log format (kubelet reads
 * them; test/harness/cri-log.ts parses them for the tests).
 */
import { mkdir } from 'node:fs/promises';
import { dirname, isAbsolute } from 'node:path';
import { InvalidArgumentError } from '../errors.js';

/**
 * Throws InvalidArgumentError for a log path conmon cannot take: it must be absolute, and conmon
 * splits its --log-path value at ':' (driver:path), so a path holding one would be cut short.
 */
export function checkLogPath(logPath: string): void {
  if (!isAbsolute(logPath)) throw new InvalidArgumentError('log_path', `"${logPath}" is not absolute`);
  if (logPath.includes(':')) {
    throw new InvalidArgumentError('log_path', `"${logPath}" contains ':', which conmon cannot take`);
  }
}

/**
 * Checks a container log path and creates its directory: kubelet normally creates the pod's log
 * directory, but a runtime must not fail when it has not.
 */
export async function prepareLogPath(logPath: string): Promise<void> {
  checkLogPath(logPath);
  // As kubelet makes its log dirs; the files conmon writes in them are 0600.
  await mkdir(dirname(logPath), { recursive: true, mode: 0o755 });
}
