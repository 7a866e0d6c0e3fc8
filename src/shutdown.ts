/**
 * Waiting at shutdown, bounded: berthd must exit even when what it waits for hangs (a call stuck on
 * runc, a client that never reads), and at once when a second signal says so.
 */
import { errorMessage } from './errors.js';
import { settledWithin } from './kit/deadline.js';
import type { Logger } from './log.js';

export interface ShutdownOptions {
  /** How long calls already running may take to finish before they are cancelled. */
  graceMs: number;
  /** Aborted to stop waiting for anything: what still runs is cut short. */
  force: AbortSignal;
}

/**
 * Waits for the named tasks together, for at most `ms` or until `force` aborts, and logs those that
 * failed and those still running then: what they left undone is start-up's to finish. True when
 * every task finished.
 */
export async function allSettledWithin(
  tasks: ReadonlyMap<string, Promise<unknown>>,
  ms: number,
  force: AbortSignal,
  logger: Logger,
): Promise<boolean> {
  const running = new Set(tasks.keys());
  const all = Promise.all(
    [...tasks].map(async ([name, task]) => {
      try {
        await task;
      } catch (err) {
        logger.warn({ task: name, err: errorMessage(err) }, 'shutdown task failed');
      }
      running.delete(name);
    }),
  );
  if (await settledWithin(all, ms, force)) return true;
  logger.warn(
    { unfinished: [...running], waitedMs: force.aborted ? undefined : ms, forced: force.aborted },
    'stopped waiting at shutdown; start-up finishes what is left',
  );
  return false;
}

/** Work under way that a shutdown waits for: requests being served. */
export class RunningWork {
  private readonly running = new Set<Promise<unknown>>();

  /** `work`, counted as running until it settles. */
  track<T>(work: Promise<T>): Promise<T> {
    this.running.add(work);
    const forget = (): void => {
      this.running.delete(work);
    };
    work.then(forget, forget);
    return work;
  }

  /** Resolves once what runs now has settled, however it ended. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.running]);
  }
}
