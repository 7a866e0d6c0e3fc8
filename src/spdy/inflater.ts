/**
 * The receiving half of SPDY header compression: every header block of a session is a piece of one
 * zlib stream (primed with the SPDY dictionary), inflated in the order the frames came.
 *
 * Output is taken as zlib makes it, not once the block is done: zlib stops working when its output
 * is not read, so a block bigger than its buffer would never finish. That also lets a block that
 * inflates past the bound (a zlib bomb) be cut off there, after a bounded amount of work.
 */
import { constants as zlibConstants, createInflate, type Inflate } from 'node:zlib';
import { SPDY3_DICTIONARY } from './dictionary.js';
import { SpdyProtocolError } from './frames.js';

interface Pending {
  parts: Buffer[];
  size: number;
  resolve: (block: Buffer) => void;
  reject: (err: Error) => void;
}

export class HeaderInflater {
  private readonly zlib: Inflate;
  private pending: Pending | null = null;
  private failure: Error | null = null;

  constructor(private readonly maxBytes: number) {
    this.zlib = createInflate({ dictionary: SPDY3_DICTIONARY });
    this.zlib.on('readable', () => this.take());
    this.zlib.on('error', (err) => this.stop(new SpdyProtocolError(`header block: ${err.message}`)));
  }

  /**
   * Inflates the next block. One at a time: the caller awaits each before the next. Rejects with a
   * SpdyProtocolError when the block is not valid zlib or inflates to more than maxBytes; the
   * stream is then out of step with the peer's, and unusable.
   */
  inflate(block: Buffer): Promise<Buffer> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.pending) return Promise.reject(new Error('HeaderInflater: one block at a time'));
    return new Promise((resolve, reject) => {
      const pending: Pending = { parts: [], size: 0, resolve, reject };
      this.pending = pending;
      this.zlib.write(block);
      this.zlib.flush(zlibConstants.Z_SYNC_FLUSH, () => {
        // Output made before the flush completed may still sit unread: take it now.
        this.take();
        if (this.pending !== pending) return;
        this.pending = null;
        resolve(Buffer.concat(pending.parts, pending.size));
      });
    });
  }

  destroy(): void {
    this.stop(new Error('header inflater closed'));
    this.zlib.destroy();
  }

  private take(): void {
    const pending = this.pending;
    if (!pending) return;
    for (
      let chunk = this.zlib.read() as Buffer | null;
      chunk !== null;
      chunk = this.zlib.read() as Buffer | null
    ) {
      pending.parts.push(chunk);
      pending.size += chunk.length;
      if (pending.size > this.maxBytes) {
        this.stop(new SpdyProtocolError(`header block larger than ${this.maxBytes} bytes`));
        this.zlib.destroy();
        return;
      }
    }
  }

  private stop(err: Error): void {
    if (!this.failure) this.failure = err;
    const pending = this.pending;
    this.pending = null;
    pending?.reject(err);
  }
}
