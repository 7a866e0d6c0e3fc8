/**
 * `task` on every item, at most `concurrency` at a time; results in the items' order. For work
 * whose items are independent but that must not start hundreds of execs, downloads or file reads
 * at once. After a failure no further item starts; the tasks running then are waited for (none
 * escapes the call), and the first failure is thrown.
 */
export async function inPool<Item, Result>(
  items: readonly Item[],
  concurrency: number,
  task: (item: Item, index: number) => Promise<Result>,
): Promise<Result[]> {
  const results = new Array<Result>(items.length);
  let failure: { reason: unknown } | undefined;
  // One iterator shared by all workers: each takes the next item nobody has taken yet.
  const queue = items.entries();
  const worker = async (): Promise<void> => {
    for (let next = queue.next(); !next.done && !failure; next = queue.next()) {
      const [index, item] = next.value;
      try {
        results[index] = await task(item, index);
      } catch (reason) {
        failure ??= { reason };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, worker));
  if (failure) throw failure.reason;
  return results;
}
