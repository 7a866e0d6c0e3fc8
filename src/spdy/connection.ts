/**
 * A SPDY/3.1 session over one socket, as Kubernetes streaming uses it: plain multiplexed byte
 * streams (no HTTP semantics), each opened with SYN_STREAM and a few headers, accepted with an
 * empty SYN_REPLY, half-closed with FIN, cancelled with RST_STREAM.
 *
 * Flow control is TCP's: Go's spdystream (kubelet, kubectl, crictl) never sends WINDOW_UPDATE and
 * hands each DATA frame to an unbuffered reader, so its socket stops being read when a consumer is
 * slow. Here the same holds both ways: a stream's write completes only when the socket accepted
 * the bytes, and no frame is read while a stream's reader is full (see SpdyTransport). What one
 * connection holds is thereby bounded: about one frame, its streams' reader buffers (at most
 * maxStreams of them), and the answers the writer may queue.
 *
 * Bad frames get the answers of the draft's sections 2.4 and 2.6: a stream error (RST_STREAM) when
 * the session can go on, else a session error (GOAWAY with PROTOCOL_ERROR, then the socket closed).
 * When the connection ends, however it ends, its streams see the end of their data and the
 * connection emits 'close': whatever serves them stops.
 *
 * Both roles are implemented (the server for berth's streaming server, the client for tests and
 * benchmarks that speak SPDY without crictl).
 */
import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import {
  FLAG_FIN,
  FLAG_UNIDIRECTIONAL,
  FrameType,
  GoAwayStatus,
  MAX_DATA_CHUNK,
  MAX_HEADER_BLOCK,
  RstStatus,
  SpdyProtocolError,
  StoredHeaderWriter,
  controlFrame,
  dataFrame,
  decodeHeaderBlock,
  encodeHeaderBlock,
  streamIdBody,
  synStreamBody,
  u32,
  type Frame,
} from './frames.js';
import { HeaderInflater } from './inflater.js';
import { SpdyTransport, type IncomingFrame, type TransportLimits } from './transport.js';
import { SpdyStream, type StreamOwner } from './stream.js';
import type { FrameWriter } from './writer.js';

export { SpdyStream } from './stream.js';

export type SpdyRole = 'server' | 'client';

export interface SpdyConnectionOptions extends TransportLimits {
  role: SpdyRole;
  /** Peer-opened streams allowed at once; more are refused with RST_STREAM. */
  maxStreams?: number;
}

const DEFAULT_MAX_STREAMS = 1000;
const MAX_STREAM_ID = 0x7fffffff;

export interface SpdyConnectionEvents {
  stream: [SpdyStream];
  close: [];
  error: [Error];
}

export class SpdyConnection extends EventEmitter<SpdyConnectionEvents> implements StreamOwner {
  private readonly streams = new Map<number, SpdyStream>();
  /** Streams whose reader is full: no frame is read while any is listed. */
  private readonly blocked = new Set<number>();
  private readonly headerWriter = new StoredHeaderWriter();
  private readonly inflater = new HeaderInflater(MAX_HEADER_BLOCK);
  private readonly transport: SpdyTransport;
  private readonly writer: FrameWriter;
  private readonly pendingReplies = new Map<number, (stream: SpdyStream | Error) => void>();
  /** Writers waiting for the socket to drain; told of an error instead when it closes. */
  private readonly drainWaiters = new Set<(err?: Error) => void>();
  private readonly maxStreams: number;
  /** Ids of streams the peer opens are odd from a client, even from a server. */
  private readonly peerParity: 0 | 1;
  private nextStreamId: number;
  private lastPeerStreamId = 0;
  /** Streams the peer opened that are still open: maxStreams bounds them. */
  private peerOpen = 0;
  private closed = false;
  private goingAway = false;

  constructor(
    private readonly socket: Duplex,
    opts: SpdyConnectionOptions,
  ) {
    super();
    this.nextStreamId = opts.role === 'server' ? 2 : 1;
    this.peerParity = opts.role === 'server' ? 1 : 0;
    this.maxStreams = opts.maxStreams ?? DEFAULT_MAX_STREAMS;
    this.transport = new SpdyTransport(socket, opts, {
      frame: (frame) => this.onFrame(frame),
      ready: () => this.blocked.size === 0,
      frameFailed: (err) => this.sessionError(err),
      ended: (err) => {
        if (err) this.report(err);
        this.teardown();
      },
    });
    this.writer = this.transport.writer;
    socket.on('drain', () => {
      const waiters = [...this.drainWaiters];
      this.drainWaiters.clear();
      for (const waiter of waiters) waiter();
    });
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Streams open now, either side's (one half-closed still counts). */
  get openStreams(): number {
    return this.streams.size;
  }

  /** Feeds bytes the HTTP upgrade already read past the request (the `head` of an upgrade). */
  feed(head: Buffer): void {
    this.transport.feed(head);
  }

  /** Opens a stream (either role; ids follow the role) and resolves once the peer replied. */
  openStream(headers: Record<string, string>): Promise<SpdyStream> {
    if (this.closed || this.goingAway) return Promise.reject(new Error('SPDY connection is closed'));
    if (this.nextStreamId > MAX_STREAM_ID) return Promise.reject(new Error('SPDY stream ids used up'));
    const id = this.nextStreamId;
    this.nextStreamId += 2;
    const map = new Map(Object.entries(headers));
    const stream = this.track(new SpdyStream(this, id, map));
    const replied = new Promise<SpdyStream>((resolve, reject) => {
      this.pendingReplies.set(id, (result) => (result instanceof Error ? reject(result) : resolve(result)));
    });
    const block = this.headerWriter.compress(encodeHeaderBlock(map));
    this.writer.write(controlFrame(FrameType.SYN_STREAM, 0, synStreamBody(id, block)));
    return replied.then(() => stream);
  }

  /** Graceful close: GOAWAY, then the socket ends once written. Streams see the end of data. */
  close(): void {
    if (this.closed) return;
    this.goAway(GoAwayStatus.OK);
    this.writer.end();
  }

  destroy(): void {
    this.socket.destroy();
    this.teardown();
  }

  // --- called by SpdyStream ------------------------------------------------------------------

  streamWantsData(stream: SpdyStream): void {
    if (this.blocked.delete(stream.id) && this.blocked.size === 0) this.transport.pump();
  }

  sendData(stream: SpdyStream, data: Buffer, fin: boolean, done: (err?: Error | null) => void): void {
    if (this.closed || stream.localClosed) {
      done(new Error(`SPDY stream ${stream.id} is closed`));
      return;
    }
    this.transport.activity();
    let flushed = true;
    for (let at = 0; at < data.length; at += MAX_DATA_CHUNK) {
      const last = at + MAX_DATA_CHUNK >= data.length;
      const flags = fin && last ? FLAG_FIN : 0;
      flushed = this.writer.write(dataFrame(stream.id, flags, data.subarray(at, at + MAX_DATA_CHUNK)));
    }
    if (fin) {
      if (data.length === 0) flushed = this.writer.write(dataFrame(stream.id, FLAG_FIN, data));
      stream.localClosed = true;
      this.maybeForget(stream);
    }
    if (flushed) done();
    else this.drainWaiters.add((err) => done(err ?? null));
  }

  streamDestroyed(stream: SpdyStream): void {
    if ((!stream.localClosed || !stream.remoteClosed) && this.streams.has(stream.id)) {
      this.rst(stream.id, RstStatus.CANCEL);
    }
    stream.localClosed = true;
    stream.remoteClosed = true;
    this.forget(stream);
  }

  // --- frames in ---------------------------------------------------------------------------

  private onFrame(frame: IncomingFrame): void | Promise<void> {
    if (frame.kind === 'too-large') return this.onOversizedData(frame.streamId, frame.length);
    if (frame.kind === 'data') return this.onDataFrame(frame.streamId, frame.flags, frame.data);
    const { type } = frame;
    if (type === FrameType.SYN_STREAM || type === FrameType.SYN_REPLY || type === FrameType.HEADERS) {
      return this.onHeaderFrame(frame);
    }
    return this.onControlFrame(frame);
  }

  private onOversizedData(id: number, length: number): void {
    if (id === 0) throw new SpdyProtocolError('DATA frame on stream 0');
    this.rst(id, RstStatus.FRAME_TOO_LARGE);
    const stream = this.streams.get(id);
    if (stream) this.resetLocally(stream, `SPDY stream ${id}: DATA frame of ${length} bytes is too large`);
  }

  private onDataFrame(id: number, flags: number, data: Buffer): void {
    if (id === 0) throw new SpdyProtocolError('DATA frame on stream 0');
    const stream = this.streams.get(id);
    if (!stream) {
      // Data racing our reset of a stream is dropped; data for a stream never opened is an error.
      if (!this.wasOpened(id)) this.rst(id, RstStatus.INVALID_STREAM);
      return;
    }
    if (stream.remoteClosed) {
      this.rst(id, RstStatus.STREAM_ALREADY_CLOSED);
      this.resetLocally(stream, `SPDY stream ${id}: data after the peer's FIN`);
      return;
    }
    if (data.length > 0 && !stream.push(data)) this.blocked.add(id);
    if ((flags & FLAG_FIN) !== 0) this.remoteFin(stream);
  }

  /** The frames that carry a header block: it is inflated whatever becomes of the frame. */
  private async onHeaderFrame(frame: ControlFrame): Promise<void> {
    const { body, flags } = frame;
    const prefix = frame.type === FrameType.SYN_STREAM ? 10 : 4;
    if (body.length < prefix)
      throw new SpdyProtocolError(`control frame ${frame.type} of ${body.length} bytes`);
    // The zlib stream is the session's: every block must go through it, used or not.
    const block = await this.inflater.inflate(body.subarray(prefix));
    const id = streamId(body);
    if (frame.type === FrameType.SYN_STREAM) {
      this.onSynStream(id, flags, decodeHeaderBlock(block));
      return;
    }
    const stream = this.knownStream(id);
    const resolve = frame.type === FrameType.SYN_REPLY ? this.pendingReplies.get(id) : undefined;
    this.pendingReplies.delete(id);
    if (stream && resolve) resolve(stream);
    if (stream && (flags & FLAG_FIN) !== 0) this.remoteFin(stream);
  }

  private onControlFrame(frame: ControlFrame): void {
    const { body } = frame;
    switch (frame.type) {
      case FrameType.RST_STREAM: {
        exactly(body, 8, 'RST_STREAM');
        const id = streamId(body);
        const reject = this.pendingReplies.get(id);
        this.pendingReplies.delete(id);
        reject?.(new Error(`SPDY stream ${id} was refused (status ${body.readUInt32BE(4)})`));
        // Never answered with a reset of ours, whatever the stream (section 2.4.2).
        const stream = this.streams.get(id);
        if (stream) this.resetLocally(stream, `SPDY stream ${id} was reset by the peer`);
        return;
      }
      case FrameType.SETTINGS:
        if (body.length < 4 || body.length !== 4 + 8 * body.readUInt32BE(0)) {
          throw new SpdyProtocolError(`SETTINGS frame of ${body.length} bytes does not match its count`);
        }
        return;
      case FrameType.PING: {
        exactly(body, 4, 'PING');
        const pingId = body.readUInt32BE(0);
        // Odd ids are the client's, even ones the server's: answer only the peer's own pings.
        if (pingId % 2 === this.peerParity) this.writer.reply(controlFrame(FrameType.PING, 0, u32(pingId)));
        return;
      }
      case FrameType.GOAWAY:
        exactly(body, 8, 'GOAWAY');
        this.goingAway = true;
        if (this.streams.size === 0) this.writer.end();
        return;
      case FrameType.WINDOW_UPDATE:
        // Flow control is TCP's (see above); a valid one is nothing to act on.
        exactly(body, 8, 'WINDOW_UPDATE');
        return;
      default:
        // Section 2.2.1: a control frame of an unknown type is ignored.
        return;
    }
  }

  private onSynStream(id: number, flags: number, headers: Map<string, string>): void {
    if (id === 0 || id % 2 !== this.peerParity) {
      this.rst(id, RstStatus.PROTOCOL_ERROR);
      return;
    }
    if (id < this.lastPeerStreamId) {
      throw new SpdyProtocolError(`SYN_STREAM ${id} after ${this.lastPeerStreamId}: ids must increase`);
    }
    if (id === this.lastPeerStreamId) {
      // A second SYN_STREAM for one stream resets it (section 2.3.2).
      this.rst(id, RstStatus.PROTOCOL_ERROR);
      const open = this.streams.get(id);
      if (open) this.resetLocally(open, `SPDY stream ${id} was opened twice`);
      return;
    }
    this.lastPeerStreamId = id;
    if (this.goingAway || this.peerOpen >= this.maxStreams || this.listenerCount('stream') === 0) {
      this.rst(id, RstStatus.REFUSED_STREAM);
      return;
    }
    const stream = this.track(new SpdyStream(this, id, headers));
    // Go's spdystream drops DATA on a stream it has no reply for: the reply goes out first.
    const block = this.headerWriter.compress(encodeHeaderBlock(new Map()));
    this.writer.reply(controlFrame(FrameType.SYN_REPLY, 0, streamIdBody(id, block)));
    if ((flags & FLAG_UNIDIRECTIONAL) !== 0) {
      stream.localClosed = true;
      stream.end();
    }
    if ((flags & FLAG_FIN) !== 0) this.remoteFin(stream);
    this.emit('stream', stream);
  }

  /** The stream `id` if open; a reset for an id that was never opened; undefined either way. */
  private knownStream(id: number): SpdyStream | undefined {
    const stream = this.streams.get(id);
    if (!stream && !this.wasOpened(id)) this.rst(id, RstStatus.INVALID_STREAM);
    return stream;
  }

  /** Whether `id` names a stream this session opened at some time (it may be closed since). */
  private wasOpened(id: number): boolean {
    return id % 2 === this.peerParity ? id <= this.lastPeerStreamId : id < this.nextStreamId;
  }

  private track(stream: SpdyStream): SpdyStream {
    // A stream's failure is its connection's to report; an unheard 'error' would end the daemon.
    stream.on('error', () => undefined);
    this.streams.set(stream.id, stream);
    if (stream.id % 2 === this.peerParity) this.peerOpen++;
    return stream;
  }

  private remoteFin(stream: SpdyStream): void {
    if (stream.remoteClosed) return;
    stream.remoteClosed = true;
    stream.push(null);
    this.maybeForget(stream);
  }

  /** The stream is over on both sides without a frame of ours (the reset was sent, or received). */
  private resetLocally(stream: SpdyStream, reason: string): void {
    stream.localClosed = true;
    stream.remoteClosed = true;
    this.forget(stream);
    stream.destroy(new Error(reason));
  }

  private maybeForget(stream: SpdyStream): void {
    if (stream.localClosed && stream.remoteClosed) this.forget(stream);
  }

  private forget(stream: SpdyStream): void {
    if (this.streams.get(stream.id) !== stream) return;
    this.streams.delete(stream.id);
    if (stream.id % 2 === this.peerParity) this.peerOpen--;
    if (this.blocked.delete(stream.id) && this.blocked.size === 0) this.transport.pump();
    if (this.goingAway && this.streams.size === 0) this.writer.end();
  }

  // --- writing and the end -------------------------------------------------------------------

  private rst(id: number, status: number): void {
    this.writer.reply(controlFrame(FrameType.RST_STREAM, 0, Buffer.concat([u32(id), u32(status)])));
  }

  private goAway(status: number): void {
    if (this.goingAway && status === GoAwayStatus.OK) return;
    this.goingAway = true;
    this.writer.reply(
      controlFrame(FrameType.GOAWAY, 0, Buffer.concat([u32(this.lastPeerStreamId), u32(status)])),
    );
  }

  /** A session error (section 2.4.1): GOAWAY with the reason's status, then the connection closes. */
  private sessionError(err: unknown): void {
    const error = err instanceof Error ? err : new Error(String(err));
    if (this.closed) return;
    this.report(error);
    this.goAway(err instanceof SpdyProtocolError ? GoAwayStatus.PROTOCOL_ERROR : GoAwayStatus.INTERNAL_ERROR);
    this.writer.end();
    this.teardown();
  }

  private report(err: Error): void {
    if (this.listenerCount('error') > 0) this.emit('error', err);
  }

  private teardown(): void {
    if (this.closed) return;
    this.closed = true;
    this.transport.close();
    this.inflater.destroy();
    for (const [id, reject] of this.pendingReplies) reject(new Error(`SPDY stream ${id}: connection closed`));
    this.pendingReplies.clear();
    // Data already received stays readable; only the end is added.
    for (const stream of this.streams.values()) {
      stream.localClosed = true;
      if (!stream.remoteClosed) {
        stream.remoteClosed = true;
        stream.push(null);
      }
    }
    this.streams.clear();
    const waiters = [...this.drainWaiters];
    this.drainWaiters.clear();
    for (const waiter of waiters) waiter(new Error('SPDY connection closed'));
    this.blocked.clear();
    this.emit('close');
  }
}

type ControlFrame = Extract<Frame, { kind: 'control' }>;

function streamId(body: Buffer): number {
  return body.readUInt32BE(0) & 0x7fffffff;
}

function exactly(body: Buffer, length: number, what: string): void {
  if (body.length !== length) {
    throw new SpdyProtocolError(`${what} of ${body.length} bytes, not ${length}`);
  }
}
