/**
 * Waits for every task, then throws the first failure (in the tasks' order), or gives their values
 * as Promise.all would: a failed branch must not start a cleanup (an unwind, a delete) while a
 * sibling is still acting, or the sibling's work would escape it.
 */
export async function allSettledOrThrow<T extends readonly unknown[] | []>(
  tasks: T,
): Promise<{ -readonly [K in keyof T]: Awaited<T[K]> }> {
  const results = await Promise.allSettled<readonly unknown[]>(tasks);
  const values: unknown[] = [];
  for (const result of results) {
    if (result.status === 'rejected') throw result.reason;
    values.push(result.value);
  }
  return values as { -readonly [K in keyof T]: Awaited<T[K]> };
}
