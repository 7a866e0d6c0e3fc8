import { StepError } from '../errors.js';
import type { Logger } from '../log.js';
import { UndoStack } from './undo.js';

/**
 * Runs the named steps of one operation: each is journaled (onBegin) before it acts, registers its
 * undo before it acts, is timed, and fails as a StepError naming it. Steps may run concurrently;
 * unwinding still undoes exactly what was registered, newest first.
 */
export class Steps {
  readonly timingsMs: Record<string, number> = {};
  private readonly undos: UndoStack;

  constructor(
    logger: Logger,
    private readonly onBegin: (step: string) => Promise<void>,
  ) {
    this.undos = new UndoStack(logger);
  }

  async run<T>(name: string, act: () => Promise<T>): Promise<T> {
    await this.onBegin(name);
    const started = performance.now();
    try {
      return await act();
    } catch (err) {
      throw err instanceof StepError ? err : new StepError(name, err);
    } finally {
      this.timingsMs[name] = Math.round((performance.now() - started) * 10) / 10;
    }
  }

  /** Call before the action it undoes, so a crash or failure inside the action is covered too. */
  onUndo(step: string, undo: () => Promise<void>): void {
    this.undos.push(step, undo);
  }

  release(): void {
    this.undos.release();
  }

  unwind(): Promise<string[]> {
    return this.undos.unwind();
  }
}

/**
 * Waits for every task, then throws the first failure: a failed branch must not start the unwind
 * while a sibling is still acting, or the sibling's work would escape the undo.
 */
export async function allSettledOrThrow(tasks: Array<Promise<unknown>>): Promise<void> {
  const results = await Promise.allSettled(tasks);
  const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failure) throw failure.reason;
}
