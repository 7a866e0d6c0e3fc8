/**
 * The sending half of a SPDY connection: frames onto the socket in order, the answers to the peer's
 * frames batched and accounted for, and the socket's end.
 *
 * Answers (PING replies, RST_STREAM, SYN_REPLY, GOAWAY) are made as fast as the peer sends frames,
 * so a peer that sends without reading would have them pile up in memory. Their unsent bytes are
 * counted: past maxBacklog the writer is `backedUp` and the connection stops reading; when the peer
 * takes none of them for stallMs it is given up on. Our own data is not counted: it waits for the
 * socket to drain anyway, and were it counted, two peers sending each other much at once would
 * both stop reading.
 */
import type { Duplex } from 'node:stream';

/** Answers are written in batches of about this much (a PING flood costs one write per batch). */
const REPLY_BATCH = 16 * 1024;
/** How long an ending socket may take to deliver what is left before it is destroyed. */
const END_GRACE_MS = 30_000;

export interface FrameWriterOptions {
  maxBacklog: number;
  stallMs: number;
  /** The backlog came down to half of maxBacklog: reading may go on. */
  onCaughtUp(): void;
  /** The peer took none of the backlog for stallMs. */
  onStalled(err: Error): void;
}

export class FrameWriter {
  private replies: Buffer[] = [];
  private repliesSize = 0;
  private unsent = 0;
  private stallTimer: NodeJS.Timeout | null = null;
  private closed = false;
  /** Past maxBacklog, and not yet down to half of it. */
  backedUp = false;
  /** While set (the connection is handling a run of frames), answers wait for flush(). */
  batching = false;

  constructor(
    private readonly socket: Duplex,
    private readonly opts: FrameWriterOptions,
  ) {}

  private get writable(): boolean {
    return !this.closed && !this.socket.destroyed && !this.socket.writableEnded;
  }

  /** Writes a frame of ours after any answers made before it; false when the socket is full. */
  write(frame: Buffer): boolean {
    if (!this.writable) return true;
    // A SYN_REPLY must precede the stream's data, so answers already made go first.
    this.flush();
    return this.socket.write(frame);
  }

  /** Writes an answer to one of the peer's frames. */
  reply(frame: Buffer): void {
    if (!this.writable) return;
    this.replies.push(frame);
    this.repliesSize += frame.length;
    this.unsent += frame.length;
    if (!this.batching || this.repliesSize >= REPLY_BATCH) this.flush();
    if (!this.backedUp && this.unsent > this.opts.maxBacklog) {
      this.backedUp = true;
      this.armStallTimer(this.unsent);
    }
  }

  flush(): void {
    if (this.replies.length === 0) return;
    const size = this.repliesSize;
    const batch = Buffer.concat(this.replies, size);
    this.replies = [];
    this.repliesSize = 0;
    if (!this.writable) return;
    this.socket.write(batch, () => this.flushed(size));
  }

  /** Ends our side after what is queued; a peer that does not take it within END_GRACE_MS is cut off. */
  end(): void {
    if (!this.writable) return;
    this.flush();
    this.socket.end();
    const timer = setTimeout(() => this.socket.destroy(), END_GRACE_MS);
    timer.unref();
    this.socket.once('close', () => clearTimeout(timer));
  }

  /** Nothing more is written. */
  close(): void {
    this.closed = true;
    this.replies = [];
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = null;
  }

  private flushed(length: number): void {
    this.unsent -= length;
    if (this.backedUp && this.unsent <= this.opts.maxBacklog / 2) {
      this.backedUp = false;
      if (this.stallTimer) clearTimeout(this.stallTimer);
      this.stallTimer = null;
      if (!this.closed) this.opts.onCaughtUp();
    }
  }

  private armStallTimer(unsent: number): void {
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = setTimeout(() => {
      this.stallTimer = null;
      if (!this.backedUp || this.closed) return;
      if (this.unsent < unsent) this.armStallTimer(this.unsent);
      else
        this.opts.onStalled(
          new Error(`the peer took none of ${unsent} unsent bytes for ${this.opts.stallMs} ms`),
        );
    }, this.opts.stallMs);
  }
}
