/**
 * conmon's start-up handshake with berthd: the environment naming its pipes, and the first message
 * it writes on its sync pipe once runc has created (or failed to create) the container.
 */
import type { ChildProcess } from 'node:child_process';

/**
 * The child's fds for conmon's pipes. conmon blocks on the start pipe before it forks anything, so
 * the cgroup it is moved into meanwhile is the one its daemon, and runc, are born in.
 */
const SYNC_PIPE_FD = 3;
export const START_PIPE_FD = 4;
/** conmon writes one JSON object on its sync pipe; more than this is not conmon talking. */
const SYNC_MESSAGE_MAX = 64 * 1024;

/** The first message conmon writes on its sync pipe (fd 3, _OCI_SYNCPIPE). */
interface SyncMessage {
  /** The container init's pid, or -1 when the create failed. */
  data: number;
  message?: string;
}

/** How waiting for the sync message ended. */
export type SyncOutcome =
  | { kind: 'message'; message: SyncMessage }
  | { kind: 'closed' }
  | { kind: 'timeout' }
  | { kind: 'spawn-error'; error: Error };

/** The environment conmon gets: ours, with its sync and start pipes named. */
export function conmonEnv(): NodeJS.ProcessEnv {
  return { ...process.env, _OCI_SYNCPIPE: String(SYNC_PIPE_FD), _OCI_STARTPIPE: String(START_PIPE_FD) };
}

/**
 * Waits for conmon's first complete JSON line on fd 3. The daemon keeps its end open while the
 * container lives, so EOF is never waited for after a message; EOF before one means conmon died.
 */
export function awaitSyncMessage(child: ChildProcess, timeoutMs: number): Promise<SyncOutcome> {
  const pipe = child.stdio[SYNC_PIPE_FD];
  return new Promise<SyncOutcome>((resolve) => {
    let buffered = '';
    let settled = false;
    const finish = (outcome: SyncOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      pipe?.destroy();
      resolve(outcome);
    };
    const timer = setTimeout(() => finish({ kind: 'timeout' }), timeoutMs);
    child.once('error', (error) => finish({ kind: 'spawn-error', error }));
    if (!pipe) {
      finish({ kind: 'spawn-error', error: new Error('no sync pipe') });
      return;
    }
    pipe.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      const newline = buffered.indexOf('\n');
      if (newline < 0) {
        if (buffered.length > SYNC_MESSAGE_MAX) finish({ kind: 'closed' });
        return;
      }
      const message = parseSyncMessage(buffered.slice(0, newline));
      finish(message ? { kind: 'message', message } : { kind: 'closed' });
    });
    pipe.once('end', () => finish({ kind: 'closed' }));
    pipe.once('error', () => finish({ kind: 'closed' }));
  });
}

function parseSyncMessage(line: string): SyncMessage | null {
  try {
    const raw: unknown = JSON.parse(line);
    if (typeof raw !== 'object' || raw === null) return null;
    const { data, message } = raw as Record<string, unknown>;
    if (typeof data !== 'number' || !Number.isInteger(data)) return null;
    return typeof message === 'string' ? { data, message } : { data };
  } catch {
    return null;
  }
}

/** The exit code of the first conmon (null if killed by a signal). */
export function exitCodeOf(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode);
    child.once('exit', (code) => resolve(code));
    child.once('error', () => resolve(null));
  });
}
