/**
 * `task` on every item, at most `concurrency` at a time; results in the items' order. For work
 * whose items are independent but that must not start hundreds of execs or file reads at once.
 */
export async function inPool<Item, Result>(
  items: readonly Item[],
  concurrency: number,
  task: (item: Item, index: number) => Promise<Result>,
): Promise<Result[]> {
  const results = new Array<Result>(items.length);
  // One iterator shared by all workers: each takes the next item nobody has taken yet.
  const queue = items.entries();
  const worker = async (): Promise<void> => {
    for (const [index, item] of queue) results[index] = await task(item, index);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, items.length)) }, worker));
  return results;
}
