/**
 * A SPDY connection's socket: frames read off it and handed, one at a time, to the session; frames
 * written through a FrameWriter; and the socket's life.
 *
 * Frames are read only while they can be handled: not while the session waits on one (a header
 * block being inflated), not while it is not ready for more (a stream's reader is full), and not
 * while the peer leaves our answers unread past the writer's bound. The socket is paused meanwhile,
 * so the kernel's buffers, not berthd's memory, hold what the peer sends on.
 *
 * A paused socket does not tell that its peer went away, so while paused the peer is sent a frame
 * now and then: a peer that is gone answers it with a TCP reset, and the next write fails. The
 * frame is an empty SETTINGS, which asks for no answer: a Go client answers a PING under its write
 * lock, so PINGs sent while its writes are stuck (on the stdin we do not read) would stop its frame
 * workers one by one, and with them the reading of our output. A peer that ended the connection is
 * let go once its frames are handled, or after goneGraceMs if they cannot be (nobody reads the
 * stream they are for).
 */
import type { Duplex } from 'node:stream';
import { FrameType, controlFrame, u32 } from './frames.js';
import { FrameReader, type OversizedData } from './reader.js';
import { FrameWriter } from './writer.js';
import type { Frame } from './frames.js';

export type IncomingFrame = Frame | OversizedData;

/** What a connection may hold and for how long; each has a default. */
export interface TransportLimits {
  /** Close the connection after this long without a frame either way; 0 (the default) for never. */
  idleTimeoutMs?: number;
  /** Bytes of answers (PING, RST_STREAM, SYN_REPLY) the peer may leave unsent before it is not read. */
  maxWriteBacklog?: number;
  /** A peer past maxWriteBacklog that takes none of it for this long is closed. */
  writeStallMs?: number;
  /** While the peer is not read from, it is sent a frame this often, to learn whether it went away. */
  probeIntervalMs?: number;
  /** A peer that ended the connection is let go once its frames are handled, or after this long. */
  goneGraceMs?: number;
}

const DEFAULT_MAX_WRITE_BACKLOG = 1024 * 1024;
const DEFAULT_WRITE_STALL_MS = 60_000;
const DEFAULT_PROBE_INTERVAL_MS = 2_000;
const DEFAULT_GONE_GRACE_MS = 10_000;

export interface TransportHandler {
  /** Handles one frame; until a returned promise settles, no other frame is read. */
  frame(frame: IncomingFrame): void | Promise<void>;
  /** Whether frames may be handled now; after it was false, the session calls pump(). */
  ready(): boolean;
  /** A frame handler threw. */
  frameFailed(err: unknown): void;
  /** The socket failed, stalled or idled out (with the reason), or the peer is gone (null). */
  ended(err: Error | null): void;
}

/** SETTINGS with no entries: a valid frame that changes nothing and is not answered. */
const PROBE = controlFrame(FrameType.SETTINGS, 0, u32(0));

export class SpdyTransport {
  readonly writer: FrameWriter;
  private readonly reader = new FrameReader();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly idleTimer: NodeJS.Timeout | null = null;
  private probeTimer: NodeJS.Timeout | null = null;
  private goneTimer: NodeJS.Timeout | null = null;
  /** A run of frames is being handled. */
  private busy = false;
  /** The run waits for a frame's handler. */
  private waiting = false;
  /** The peer ended or closed the socket. */
  private gone = false;
  private closed = false;

  constructor(
    private readonly socket: Duplex,
    private readonly opts: TransportLimits,
    private readonly handler: TransportHandler,
  ) {
    this.writer = new FrameWriter(socket, {
      maxBacklog: opts.maxWriteBacklog ?? DEFAULT_MAX_WRITE_BACKLOG,
      stallMs: opts.writeStallMs ?? DEFAULT_WRITE_STALL_MS,
      onCaughtUp: () => this.pump(),
      onStalled: (err) => this.end(err),
    });
    socket.on('data', (chunk: Buffer) => this.feed(chunk));
    socket.on('error', (err: Error) => this.end(err));
    socket.on('end', () => this.peerGone());
    socket.on('close', () => this.peerGone());
    const idleMs = opts.idleTimeoutMs ?? 0;
    if (idleMs > 0) {
      const ms = idleMs;
      this.idleTimer = this.timer(ms, () => this.end(new Error(`no traffic for ${ms} ms`)));
      // Hours by default: no reason on its own to keep a process alive.
      this.idleTimer.unref();
    }
  }

  /** Bytes read off the socket, or ones the HTTP upgrade read past its request. */
  feed(chunk: Buffer): void {
    if (this.closed || chunk.length === 0) return;
    this.reader.push(chunk);
    this.pump();
  }

  /** Handles the frames that can be handled now. */
  pump(): void {
    if (this.busy || this.closed) return;
    void this.handleFrames();
  }

  /** Traffic either way: the idle timeout starts over. */
  activity(): void {
    this.idleTimer?.refresh();
  }

  /** Stops reading and writing. The socket is destroyed, unless we are ending it in order. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.writer.close();
    // A socket the peer ended is not left half open (CLOSE-WAIT); one that we are ending is read
    // on, what comes dropped, so that the peer's end is seen.
    if (this.gone || !this.socket.writableEnded) this.socket.destroy();
    else this.socket.resume();
  }

  private async handleFrames(): Promise<void> {
    this.busy = true;
    this.writer.batching = true;
    try {
      while (!this.closed && !this.writer.backedUp && this.handler.ready()) {
        const frame = this.reader.next();
        if (!frame) break;
        this.goneTimer?.refresh();
        this.activity();
        const handled = this.handler.frame(frame);
        if (handled) {
          this.waiting = true;
          this.writer.flush();
          this.setFlow();
          await handled;
          this.waiting = false;
        }
      }
    } catch (err) {
      this.waiting = false;
      this.handler.frameFailed(err);
    } finally {
      this.busy = false;
      this.writer.batching = false;
    }
    this.writer.flush();
    this.setFlow();
  }

  /** Reads the socket only while frames can be handled; probes the peer while it is not read. */
  private setFlow(): void {
    if (this.closed) return;
    if (!this.waiting && !this.writer.backedUp && this.handler.ready()) {
      this.socket.resume();
      this.clearProbe();
      // Every frame the peer sent before it went has been handled.
      if (this.gone && !this.busy) this.end(null);
      return;
    }
    this.socket.pause();
    this.probeTimer ??= this.timer(this.opts.probeIntervalMs ?? DEFAULT_PROBE_INTERVAL_MS, () => {
      this.probeTimer?.refresh();
      this.writer.write(PROBE);
    });
  }

  private peerGone(): void {
    if (this.gone || this.closed) return;
    this.gone = true;
    this.goneTimer = this.timer(this.opts.goneGraceMs ?? DEFAULT_GONE_GRACE_MS, () => this.end(null));
    if (!this.busy) this.setFlow();
  }

  private end(err: Error | null): void {
    if (this.closed) return;
    this.handler.ended(err);
    this.close();
  }

  private timer(ms: number, fn: () => void): NodeJS.Timeout {
    // Kept in `timers` even once fired: a timer that refreshes itself is still cleared at the end.
    const t = setTimeout(fn, ms);
    this.timers.add(t);
    return t;
  }

  private clearProbe(): void {
    if (!this.probeTimer) return;
    clearTimeout(this.probeTimer);
    this.timers.delete(this.probeTimer);
    this.probeTimer = null;
  }
}
