/**
 * Waits for every task, then throws the first failure: a failed branch must not start a cleanup
 * (an unwind, a delete) while a sibling is still acting, or the sibling's work would escape it.
 */
export async function allSettledOrThrow(tasks: ReadonlyArray<Promise<unknown>>): Promise<void> {
  const results = await Promise.allSettled(tasks);
  const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failure) throw failure.reason;
}
