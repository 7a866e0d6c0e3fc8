/**
 * Work that may finish behind the reader: an entry's metadata (owner, mode, times, xattrs) and
 * closing its file. Each filesystem call is a round trip through libuv's thread pool; awaiting
 * them one by one made layers of many small files 4-5 times slower than letting a few dozen run
 * at once. The caller keeps ordering safe: a job only touches its own entry, and the caller
 * drains the backlog before removing anything, so no path changes under a pending job.
 */
export class Backlog {
  private readonly running = new Set<Promise<void>>();
  private failed = false;
  private failure: unknown;

  constructor(private readonly limit: number) {}

  /** Starts `job`; waits only when `limit` jobs are already running. Rethrows an earlier job's failure. */
  async add(job: () => Promise<void>): Promise<void> {
    this.rethrow();
    const p: Promise<void> = job()
      .catch((err: unknown) => {
        if (!this.failed) {
          this.failed = true;
          this.failure = err;
        }
      })
      .finally(() => this.running.delete(p));
    this.running.add(p);
    if (this.running.size >= this.limit) await Promise.race(this.running);
    this.rethrow();
  }

  /** Waits for every job; throws the first failure. */
  async drain(): Promise<void> {
    await this.settle();
    this.rethrow();
  }

  /** Waits for every job, whatever became of them: nothing may touch the tree after an unpack returns. */
  async settle(): Promise<void> {
    while (this.running.size > 0) await Promise.all([...this.running]);
  }

  private rethrow(): void {
    if (this.failed) throw this.failure;
  }
}
