/** Waiting for something tests cannot be told about, only see: polling until it holds. */
import { BOUND_SCALE } from './bounds.js';

export interface WaitOptions {
  /** How long between two checks. */
  pollMs?: number;
  /** What is awaited, for the error when it does not come. */
  what?: string;
}

/**
 * Resolves once `check` holds; rejects when it still does not after `timeoutMs` (a hang bound, so
 * scaled by BOUND_SCALE where the run is emulated).
 */
export async function waitFor(
  check: () => Promise<boolean>,
  timeoutMs: number,
  { pollMs = 50, what = 'condition' }: WaitOptions = {},
): Promise<void> {
  const boundMs = timeoutMs * BOUND_SCALE;
  const deadline = Date.now() + boundMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`${what} not met within ${boundMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, pollMs));
  }
}

/** A promise the test resolves itself: holds work at a point of the test's choosing. */
export function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}
