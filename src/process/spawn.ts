import type { ChildProcess } from 'node:child_process';
import { ResourceExhaustedError } from '../errors.js';

/**
 * Node reports a failed spawn as an 'error' event on the next tick. After EMFILE or ENFILE (no file
 * descriptor left for the child's pipes) it also leaves the child without its stdio streams, so
 * code that wires those up right after spawn() throws a TypeError and leaves the 'error' unheard,
 * which ends berthd. Called right after spawn(), this makes that case a typed throw before any
 * wiring, and consumes the event that follows. Other spawn failures (ENOENT, EACCES) still come as
 * the 'error' event, with the child's streams in place.
 */
export function checkSpawned<C extends ChildProcess>(child: C, file: string): C {
  if (child.pid !== undefined || Array.isArray(child.stdio)) return child;
  child.once('error', () => undefined);
  throw new ResourceExhaustedError(
    `cannot start ${file}: berthd has no file descriptor left for its pipes (EMFILE or ENFILE)`,
  );
}
