import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';

interface UndoEntry {
  step: string;
  undo: () => Promise<void>;
}

/**
 * Cleanups registered before each step acts, run in reverse when a later step fails, so a failed
 * operation (RunPodSandbox, CreateContainer) undoes exactly what it did. Undo failures are logged,
 * never thrown: the caller's error (the step that failed) is the one the client must see.
 */
export class UndoStack {
  private entries: UndoEntry[] = [];

  constructor(private readonly logger: Logger) {}

  push(step: string, undo: () => Promise<void>): void {
    this.entries.push({ step, undo });
  }

  /** Success: keep everything. */
  release(): void {
    this.entries = [];
  }

  /** Returns the steps whose undo failed, so the caller can leave a record for the next repair. */
  async unwind(): Promise<string[]> {
    const failed: string[] = [];
    for (const entry of this.entries.reverse()) {
      try {
        await entry.undo();
      } catch (err) {
        failed.push(entry.step);
        this.logger.error({ step: entry.step, err: errorMessage(err) }, 'undo failed');
      }
    }
    this.entries = [];
    return failed;
  }
}
