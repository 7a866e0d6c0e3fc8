import { run } from '../exec.js';

/** syncfs of the store's filesystems; slow only when the host has a lot of dirty data. */
const SYNC_TIMEOUT_MS = 120_000;

/**
 * One flush to disk for many writes. Blobs and layer trees are written and renamed into place
 * without syncing each one; before the database records anything that relies on them, flush()
 * runs a syncfs of the filesystems written to (one `sync --file-system`, whatever the number of
 * files), so a pull costs one durable commit instead of an fsync per blob and a syncfs per layer.
 *
 * Until that flush, a power loss can leave a published blob or layer with missing contents; no
 * row refers to it yet, so start-up recovery deletes it (src/image/recovery.ts). Writers call
 * noteWrite() before publishing, so whoever sees the published file and then flushes covers it,
 * even when another pull wrote it.
 */
export class StoreFlush {
  private written = 0;
  private flushed = 0;
  private running: Promise<void> | undefined;
  /** Every directory written to so far: a handful (the blob and layer dirs), all synced each time. */
  private readonly dirs = new Set<string>();

  /** Call before publishing anything a later database row will rely on; `dir` must exist by then. */
  noteWrite(dir: string): void {
    this.dirs.add(dir);
    this.written++;
  }

  /** Resolves once everything noted before this call is on disk; concurrent callers share a sync. */
  async flush(): Promise<void> {
    const needed = this.written;
    while (this.flushed < needed) {
      // A sync already running may have started before our writes were noted: wait, then look again.
      if (!this.running) this.running = this.sync();
      await this.running;
    }
  }

  private async sync(): Promise<void> {
    const covers = this.written;
    try {
      await run('sync', ['--file-system', ...this.dirs], { timeoutMs: SYNC_TIMEOUT_MS });
      this.flushed = Math.max(this.flushed, covers);
    } finally {
      this.running = undefined;
    }
  }
}
