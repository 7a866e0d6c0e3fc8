import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../log.js';

/**
 * Test-only: an operation stops before acting on the step named by the daemon's pause hook, after
 * its journal entry and undo are recorded, and waits forever, so a test can kill -9 the daemon
 * there. The marker file tells the test it has arrived.
 */
export async function pauseIfAsked(
  hook: { pauseBeforeStep?: string | undefined; stateDir: string; operation: string },
  step: string,
  log: Logger,
): Promise<void> {
  if (hook.pauseBeforeStep !== step) return;
  log.warn({ step }, `test hook: pausing ${hook.operation}`);
  await writeFile(join(hook.stateDir, `test-paused-${step}`), String(process.pid), { mode: 0o644 });
  await new Promise<never>(() => undefined);
}
