/**
 * Racing work against a deadline, for waits that must end even when the work hangs (a conmon
 * that never exits, a session that never closes, a peer that never reads).
 */

/** What else may end a race, and whether its timer may hold the process. */
export interface DeadlineOptions {
  /** Stops waiting at once when aborted, as if the deadline had passed. */
  signal?: AbortSignal | undefined;
  /**
   * False when the timer must not keep the process alive on its own: a wait nobody needs to sit
   * out when nothing else is left to do. True by default.
   */
  ref?: boolean;
}

/**
 * `work`'s value, or `late` once `ms` have passed or `signal` aborted, whichever comes first. A
 * rejection of `work` before then is passed on; the timer and the abort listener never outlive
 * the race.
 */
export async function beforeDeadline<T, L>(
  work: Promise<T>,
  ms: number,
  late: L,
  { signal, ref = true }: DeadlineOptions = {},
): Promise<T | L> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort = (): void => undefined;
  const cutShort = new Promise<L>((resolve) => {
    onAbort = () => resolve(late);
    if (signal?.aborted) return onAbort();
    timer = setTimeout(onAbort, ms);
    if (!ref) timer.unref();
    signal?.addEventListener('abort', onAbort, { once: true });
  });
  try {
    // Even when already aborted, `work` joins the race: a rejection of it is then handled, not
    // left unhandled. cutShort comes first, so an abort wins over work that is already done.
    return await Promise.race([cutShort, work]);
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * True once `work` has settled, false when `ms` have passed or `signal` aborted first. A rejection
 * of `work` is passed on. The timer keeps the process alive: at shutdown it is what keeps berthd
 * running to exit when nothing else would.
 */
export function settledWithin(work: Promise<unknown>, ms: number, signal?: AbortSignal): Promise<boolean> {
  return beforeDeadline(
    work.then(() => true as const),
    ms,
    false,
    { signal },
  );
}
