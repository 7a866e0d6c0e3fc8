/**
 * Watches one pull's blob downloads as their bytes arrive: logs how far long ones got, and
 * cancels them all when none of them received a byte for the stall timeout (containerd's
 * image_pull_progress_timeout), so a registry that stops sending mid-blob cannot hold a pull forever.
 */
import { Transform, type Readable } from 'node:stream';
import type { Logger } from '../log.js';
import { PullStalledError } from './errors.js';

export interface TransferWatchOptions {
  /** The image being pulled, named in every log line and in the stall error. */
  image: string;
  /** No byte for this long on any download cancels them all; 0: never. */
  stallTimeoutMs: number;
  /** How often a download still running logs its progress. */
  progressIntervalMs?: number;
  logger: Logger;
}

export interface WatchedBlob {
  digest: string;
  /** Expected size in bytes. */
  size: number;
}

const DEFAULT_PROGRESS_INTERVAL_MS = 10_000;

interface Transfer {
  blob: WatchedBlob;
  counter: Transform;
  bytes: number;
  bytesAtLastReport: number;
  report: NodeJS.Timeout;
}

export class TransferWatch {
  private readonly active = new Set<Transfer>();
  private stallTimer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: TransferWatchOptions) {}

  /**
   * `stream`'s bytes, counted on their way through. Destroying the returned stream destroys
   * `stream`; a stall destroys it with a PullStalledError, which its reader sees as a stream error.
   * The reader must read it to the end or destroy it: until then its timers run.
   */
  track(stream: Readable, blob: WatchedBlob): Readable {
    const interval = this.opts.progressIntervalMs ?? DEFAULT_PROGRESS_INTERVAL_MS;
    const transfer: Transfer = {
      blob,
      bytes: 0,
      bytesAtLastReport: 0,
      counter: new Transform({
        transform: (chunk: Buffer, _encoding, done) => {
          transfer.bytes += chunk.length;
          this.stallTimer?.refresh();
          done(null, chunk);
        },
      }),
      report: setInterval(() => this.report(transfer, interval), interval),
    };
    stream.on('error', (err) => transfer.counter.destroy(err));
    transfer.counter.on('close', () => {
      if (!stream.destroyed) stream.destroy();
      this.finished(transfer);
    });
    this.active.add(transfer);
    this.armStallTimer();
    return stream.pipe(transfer.counter);
  }

  private armStallTimer(): void {
    if (this.opts.stallTimeoutMs <= 0) return;
    // A download starting is progress too: the clock runs from the last thing that moved.
    if (this.stallTimer) this.stallTimer.refresh();
    else this.stallTimer = setTimeout(() => this.stalled(), this.opts.stallTimeoutMs);
  }

  private finished(transfer: Transfer): void {
    clearInterval(transfer.report);
    this.active.delete(transfer);
    if (this.active.size === 0) {
      clearTimeout(this.stallTimer);
      this.stallTimer = undefined;
    }
  }

  private stalled(): void {
    this.stallTimer = undefined;
    const transfers = [...this.active];
    const where = transfers.map((t) => `${t.blob.digest} at ${t.bytes} of ${t.blob.size} bytes`).join(', ');
    const err = new PullStalledError(
      `pull of ${this.opts.image} stalled: no data received for ${this.opts.stallTimeoutMs} ms ` +
        `(image_pull_progress_timeout), cancelled ${where}`,
    );
    this.opts.logger.warn({ image: this.opts.image, err: err.message }, 'pull stalled');
    for (const transfer of transfers) transfer.counter.destroy(err);
  }

  private report(transfer: Transfer, intervalMs: number): void {
    const bytesPerSecond = Math.round(((transfer.bytes - transfer.bytesAtLastReport) * 1000) / intervalMs);
    transfer.bytesAtLastReport = transfer.bytes;
    this.opts.logger.info(
      {
        image: this.opts.image,
        layer: transfer.blob.digest,
        bytes: transfer.bytes,
        total: transfer.blob.size,
        bytesPerSecond,
      },
      'pull progress',
    );
  }
}
