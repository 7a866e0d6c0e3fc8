/** What any local user can do on the host: tests try it as uid and gid 65534, with no groups. */
import { execFile } from 'node:child_process';

export const NOBODY = 65534;

export interface Attempt {
  ok: boolean;
  stdout: string;
  stderr: string;
}

/**
 * Runs `argv` as uid/gid 65534 without supplementary groups or capabilities (Node's setgroups,
 * setgid, setuid before the exec; setpriv would keep root's capabilities until its own exec), through
 * env, so that a program it cannot reach is a failure on stderr too. A failure is an outcome, not
 * a throw.
 */
export function asNobody(argv: readonly string[]): Promise<Attempt> {
  return new Promise((resolve, reject) => {
    execFile(
      'env',
      ['--', ...argv],
      { uid: NOBODY, gid: NOBODY, timeout: 30_000, encoding: 'utf8' },
      (err, stdout, stderr) => {
        if (err && (err.killed || typeof err.code !== 'number')) reject(err);
        else resolve({ ok: err === null, stdout, stderr });
      },
    );
  });
}
