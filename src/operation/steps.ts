import { StepError } from '../errors.js';
import type { Logger } from '../log.js';
import { UndoStack } from './undo.js';

/** What a failed operation does with its journal record once its undos have run. */
export interface AbandonedOperation {
  /** As the failure is logged: `${operation} failed, undoing`. */
  operation: string;
  /** The step an error from outside every step is blamed on. */
  outsideStep: string;
  /** Every undo succeeded: nothing is left for the record to describe. */
  forget(): void;
  /** Some undo failed: the record stays, marked failed, so that a later Remove or repair retries. */
  keepFailed(failure: StepError): void;
}

/** How one step of an operation ended, for whoever watches them (berthd's metrics). */
export interface StepOutcome {
  operation: string;
  step: string;
  seconds: number;
  ok: boolean;
}

export type StepWatcher = (outcome: StepOutcome) => void;

// Process-wide rather than handed to each Steps: the services that run operations need not carry
// an observer they never use, and this module stays free of any metrics library.
const stepWatchers = new Set<StepWatcher>();

/** Tells `watcher` of every step's end from now on; returns the function that stops it. */
export function watchSteps(watcher: StepWatcher): () => void {
  stepWatchers.add(watcher);
  return () => stepWatchers.delete(watcher);
}

/**
 * Runs the named steps of one operation: each is journaled (onBegin) before it acts, registers its
 * undo before it acts, is timed, and fails as a StepError naming it. Steps may run concurrently;
 * unwinding still undoes exactly what was registered, newest first.
 */
export class Steps {
  readonly timingsMs: Record<string, number> = {};
  private readonly undos: UndoStack;

  constructor(
    /** The operation's name as watchers see it, e.g. RunPodSandbox. */
    private readonly operation: string,
    private readonly logger: Logger,
    private readonly onBegin: (step: string) => Promise<void>,
  ) {
    this.undos = new UndoStack(logger);
  }

  async run<T>(name: string, act: () => Promise<T>): Promise<T> {
    await this.onBegin(name);
    const started = performance.now();
    let ok = false;
    try {
      const result = await act();
      ok = true;
      return result;
    } catch (err) {
      throw toStepError(name, err);
    } finally {
      const ms = performance.now() - started;
      this.timingsMs[name] = Math.round(ms * 10) / 10;
      const outcome = { operation: this.operation, step: name, seconds: ms / 1000, ok };
      for (const watcher of stepWatchers) watcher(outcome);
    }
  }

  /** Call before the action it undoes, so a crash or failure inside the action is covered too. */
  onUndo(step: string, undo: () => Promise<void>): void {
    this.undos.push(step, undo);
  }

  release(): void {
    this.undos.release();
  }

  /**
   * The end of a failed operation: logs the failure, undoes what the steps did, then forgets the
   * journal record or keeps it marked failed. Returns the error for the caller to throw.
   */
  async abandon(err: unknown, operation: AbandonedOperation): Promise<StepError> {
    const failure = toStepError(operation.outsideStep, err);
    this.logger.error({ step: failure.step, err: failure.message }, `${operation.operation} failed, undoing`);
    const failedUndos = await this.undos.unwind();
    if (failedUndos.length === 0) operation.forget();
    else operation.keepFailed(failure);
    return failure;
  }
}

/** A StepError already names the step that failed; anything else is blamed on `step`. */
function toStepError(step: string, err: unknown): StepError {
  return err instanceof StepError ? err : new StepError(step, err);
}

/** Runs `act`, failing as a StepError naming `step`: what the client sees says which part failed. */
export async function asStep<T>(step: string, act: () => Promise<T>): Promise<T> {
  try {
    return await act();
  } catch (err) {
    throw new StepError(step, err);
  }
}
