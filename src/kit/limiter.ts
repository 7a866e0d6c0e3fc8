/**
 * A bound on tasks in flight shared by every caller that holds the same Limiter: where inPool
 * bounds one call's items, this bounds all calls together, so that many calls at once (several
 * stats lists, fifty streams) cost no more descriptors than one. Tasks start in the order they
 * came; a task whose `signal` was aborted while it waited is not started.
 */
export class Limiter {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(readonly concurrency: number) {}

  async run<T>(task: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    if (this.running < this.concurrency) this.running++;
    // A finished task hands its place to the next waiter, so `running` stays as it was.
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      signal?.throwIfAborted();
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }
}
