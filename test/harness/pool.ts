/** Many calls at once, but not all of them: a test's or a benchmark's load at a chosen concurrency. */

/** `task` on every item, at most `concurrency` in flight; results in the items' order. */
export async function inPool<Item, Result>(
  items: readonly Item[],
  concurrency: number,
  task: (item: Item, index: number) => Promise<Result>,
): Promise<Result[]> {
  const results = new Array<Result>(items.length);
  // One iterator shared by all workers: each takes the next item not yet taken.
  const queue = items.entries();
  const worker = async (): Promise<void> => {
    for (const [index, item] of queue) results[index] = await task(item, index);
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  return results;
}
