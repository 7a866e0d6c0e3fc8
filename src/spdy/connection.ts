/**
 * A SPDY/3.1 session over one socket, as Kubernetes streaming uses it: plain multiplexed byte
 * streams (no HTTP semantics), each opened with SYN_STREAM and a few headers, accepted with an
 * empty SYN_REPLY, half-closed with FIN, cancelled with RST_STREAM.
 *
 * Flow control is TCP's: Go's spdystream (kubelet, kubectl, crictl) never sends WINDOW_UPDATE and
 * hands each DATA frame to an unbuffered reader, so its socket stops being read when a consumer is
 * slow. Here the same holds both ways: a stream's write completes only when the socket accepted
 * the bytes, and when a stream's reader is full the socket is paused until it drains.
 *
 * Both roles are implemented (the server for berth's streaming server, the client for tests and
 * benchmarks that speak SPDY without crictl).
 */
import { EventEmitter } from 'node:events';
import { Duplex } from 'node:stream';
import { constants as zlibConstants, createInflate, type Inflate } from 'node:zlib';
import { SPDY3_DICTIONARY } from './dictionary.js';
import {
  FLAG_FIN,
  FLAG_UNIDIRECTIONAL,
  FrameType,
  MAX_DATA_CHUNK,
  RstStatus,
  SpdyProtocolError,
  StoredHeaderWriter,
  controlFrame,
  dataFrame,
  decodeFrames,
  decodeHeaderBlock,
  encodeHeaderBlock,
  streamIdBody,
  synStreamBody,
  u32,
  type Frame,
} from './frames.js';

export type SpdyRole = 'server' | 'client';

export interface SpdyConnectionOptions {
  role: SpdyRole;
  /** Close the connection after this long without a frame either way; 0 for never. */
  idleTimeoutMs?: number;
  /** Peer-opened streams allowed at once; more are refused with RST_STREAM. */
  maxStreams?: number;
}

/** A decompressed header block larger than this is a protocol error. */
const MAX_HEADER_BLOCK = 64 * 1024;
const DEFAULT_MAX_STREAMS = 1000;

export class SpdyStream extends Duplex {
  /** Set when the peer half-closed (FIN) or reset the stream. */
  remoteClosed = false;
  /** Set once our FIN or RST went out. */
  localClosed = false;

  constructor(
    private readonly conn: SpdyConnection,
    readonly id: number,
    readonly headers: ReadonlyMap<string, string>,
  ) {
    super({ allowHalfOpen: true });
  }

  header(name: string): string | undefined {
    return this.headers.get(name.toLowerCase());
  }

  override _read(): void {
    this.conn.streamWantsData(this);
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    this.conn.sendData(this, chunk, false, done);
  }

  override _final(done: (err?: Error | null) => void): void {
    this.conn.sendData(this, Buffer.alloc(0), true, done);
  }

  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    this.conn.streamDestroyed(this);
    done(err);
  }
}

export interface SpdyConnectionEvents {
  stream: [SpdyStream];
  close: [];
  error: [Error];
}

export class SpdyConnection extends EventEmitter<SpdyConnectionEvents> {
  private readonly streams = new Map<number, SpdyStream>();
  /** Streams whose reader is full: the socket stays paused while any is listed. */
  private readonly blocked = new Set<number>();
  private readonly headerWriter = new StoredHeaderWriter();
  private readonly inflater: Inflate;
  private readonly pendingReplies = new Map<number, (stream: SpdyStream | Error) => void>();
  /** Writers waiting for the socket to drain; told of an error instead when it closes. */
  private readonly drainWaiters = new Set<(err?: Error) => void>();
  private readonly maxStreams: number;
  private pending: Buffer = Buffer.alloc(0);
  private busy = false;
  private gone = false;
  private nextStreamId: number;
  private lastPeerStreamId = 0;
  private closed = false;
  private goingAway = false;

  constructor(
    private readonly socket: Duplex & { setTimeout?(ms: number): unknown },
    private readonly opts: SpdyConnectionOptions,
  ) {
    super();
    this.nextStreamId = opts.role === 'server' ? 2 : 1;
    this.maxStreams = opts.maxStreams ?? DEFAULT_MAX_STREAMS;
    this.inflater = createInflate({ dictionary: SPDY3_DICTIONARY });
    this.inflater.on('error', (err) => this.fail(err));
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('drain', () => {
      const waiters = [...this.drainWaiters];
      this.drainWaiters.clear();
      for (const waiter of waiters) waiter();
    });
    socket.on('error', (err: Error) => this.fail(err));
    // Frames received before the end may still wait behind a header block being inflated.
    socket.on('close', () => this.peerGone());
    socket.on('end', () => this.peerGone());
    if (opts.idleTimeoutMs && opts.idleTimeoutMs > 0 && socket.setTimeout) {
      socket.setTimeout(opts.idleTimeoutMs);
      socket.on('timeout', () => this.fail(new Error(`no traffic for ${opts.idleTimeoutMs} ms`)));
    }
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Feeds bytes the HTTP upgrade already read past the request (the `head` of an upgrade). */
  feed(head: Buffer): void {
    if (head.length > 0) this.onData(head);
  }

  /** Opens a stream (either role; ids follow the role) and resolves once the peer replied. */
  openStream(headers: Record<string, string>): Promise<SpdyStream> {
    if (this.closed || this.goingAway) return Promise.reject(new Error('SPDY connection is closed'));
    const id = this.nextStreamId;
    this.nextStreamId += 2;
    const map = new Map(Object.entries(headers));
    const stream = this.track(new SpdyStream(this, id, map));
    const replied = new Promise<SpdyStream>((resolve, reject) => {
      this.pendingReplies.set(id, (result) => (result instanceof Error ? reject(result) : resolve(result)));
    });
    const block = this.headerWriter.compress(encodeHeaderBlock(map));
    this.write(controlFrame(FrameType.SYN_STREAM, 0, synStreamBody(id, block)));
    return replied.then(() => stream);
  }

  /** Graceful close: GOAWAY, then the socket ends once written. Streams see the end of data. */
  close(): void {
    if (this.closed) return;
    if (!this.goingAway) {
      this.goingAway = true;
      this.write(controlFrame(FrameType.GOAWAY, 0, Buffer.concat([u32(this.lastPeerStreamId), u32(0)])));
    }
    this.socket.end();
  }

  destroy(): void {
    this.socket.destroy();
    this.teardown();
  }

  // --- called by SpdyStream ------------------------------------------------------------------

  streamWantsData(stream: SpdyStream): void {
    if (this.blocked.delete(stream.id) && this.blocked.size === 0 && !this.closed) this.socket.resume();
  }

  sendData(stream: SpdyStream, data: Buffer, fin: boolean, done: (err?: Error | null) => void): void {
    if (this.closed || stream.localClosed) {
      done(new Error(`SPDY stream ${stream.id} is closed`));
      return;
    }
    let flushed = true;
    for (let at = 0; at < data.length; at += MAX_DATA_CHUNK) {
      const last = at + MAX_DATA_CHUNK >= data.length;
      const flags = fin && last ? FLAG_FIN : 0;
      flushed = this.write(dataFrame(stream.id, flags, data.subarray(at, at + MAX_DATA_CHUNK)));
    }
    if (fin) {
      if (data.length === 0) flushed = this.write(dataFrame(stream.id, FLAG_FIN, data));
      stream.localClosed = true;
      this.maybeForget(stream);
    }
    if (flushed) done();
    else this.drainWaiters.add((err) => done(err ?? null));
  }

  streamDestroyed(stream: SpdyStream): void {
    if (!stream.localClosed || !stream.remoteClosed) {
      if (!this.closed && this.streams.has(stream.id)) {
        this.write(
          controlFrame(FrameType.RST_STREAM, 0, Buffer.concat([u32(stream.id), u32(RstStatus.CANCEL)])),
        );
      }
    }
    stream.localClosed = true;
    stream.remoteClosed = true;
    this.streams.delete(stream.id);
    this.streamWantsData(stream);
  }

  // --- frames in --------------------------------------------------------------------------------

  private onData(chunk: Buffer): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    if (!this.busy) void this.drain();
  }

  private async drain(): Promise<void> {
    this.busy = true;
    try {
      for (;;) {
        const { frames, consumed } = decodeFrames(this.pending);
        if (frames.length === 0) break;
        this.pending = this.pending.subarray(consumed);
        for (const frame of frames) {
          if (this.closed) return;
          if (frame.kind === 'data') this.onDataFrame(frame.streamId, frame.flags, frame.data);
          else await this.onControlFrame(frame);
        }
      }
    } catch (err) {
      this.fail(err instanceof Error ? err : new Error(String(err)));
    } finally {
      this.busy = false;
      if (this.gone) this.teardown();
    }
  }

  private peerGone(): void {
    this.gone = true;
    if (!this.busy) this.teardown();
  }

  private onDataFrame(id: number, flags: number, data: Buffer): void {
    const stream = this.streams.get(id);
    if (!stream || stream.remoteClosed) return;
    if (data.length > 0 && !stream.push(data)) {
      this.blocked.add(id);
      this.socket.pause();
    }
    if ((flags & FLAG_FIN) !== 0) this.remoteFin(stream);
  }

  private async onControlFrame(frame: Extract<Frame, { kind: 'control' }>): Promise<void> {
    const { body } = frame;
    switch (frame.type) {
      case FrameType.SYN_STREAM: {
        if (body.length < 10) throw new SpdyProtocolError('SYN_STREAM too short');
        const id = body.readUInt32BE(0) & 0x7fffffff;
        const headers = decodeHeaderBlock(await this.inflate(body.subarray(10)));
        this.onSynStream(id, frame.flags, headers);
        return;
      }
      case FrameType.SYN_REPLY: {
        if (body.length < 4) throw new SpdyProtocolError('SYN_REPLY too short');
        const id = body.readUInt32BE(0) & 0x7fffffff;
        // The block must be inflated even though it is unused: the zlib stream is shared.
        await this.inflate(body.subarray(4));
        const stream = this.streams.get(id);
        const resolve = this.pendingReplies.get(id);
        this.pendingReplies.delete(id);
        if (stream && resolve) resolve(stream);
        if (stream && (frame.flags & FLAG_FIN) !== 0) this.remoteFin(stream);
        return;
      }
      case FrameType.HEADERS: {
        if (body.length < 4) throw new SpdyProtocolError('HEADERS too short');
        await this.inflate(body.subarray(4));
        const stream = this.streams.get(body.readUInt32BE(0) & 0x7fffffff);
        if (stream && (frame.flags & FLAG_FIN) !== 0) this.remoteFin(stream);
        return;
      }
      case FrameType.RST_STREAM: {
        if (body.length < 8) throw new SpdyProtocolError('RST_STREAM too short');
        const id = body.readUInt32BE(0) & 0x7fffffff;
        const stream = this.streams.get(id);
        const reject = this.pendingReplies.get(id);
        this.pendingReplies.delete(id);
        reject?.(new Error(`SPDY stream ${id} was refused (status ${body.readUInt32BE(4)})`));
        if (stream) {
          this.streams.delete(id);
          stream.localClosed = true;
          stream.remoteClosed = true;
          stream.destroy(new Error(`SPDY stream ${id} was reset by the peer`));
        }
        return;
      }
      case FrameType.PING: {
        if (body.length < 4) throw new SpdyProtocolError('PING too short');
        const pingId = body.readUInt32BE(0);
        // Odd ids are the client's, even ones the server's: answer only the peer's own pings.
        const peerParity = this.opts.role === 'server' ? 1 : 0;
        if (pingId % 2 === peerParity) this.write(controlFrame(FrameType.PING, 0, u32(pingId)));
        return;
      }
      case FrameType.GOAWAY:
        this.goingAway = true;
        if (this.streams.size === 0) this.socket.end();
        return;
      default:
        // SETTINGS, WINDOW_UPDATE and unknown types: nothing to do (see the flow-control note above).
        return;
    }
  }

  private onSynStream(id: number, flags: number, headers: Map<string, string>): void {
    const peerParity = this.opts.role === 'server' ? 1 : 0;
    if (id === 0 || id % 2 !== peerParity || id <= this.lastPeerStreamId) {
      this.write(
        controlFrame(FrameType.RST_STREAM, 0, Buffer.concat([u32(id), u32(RstStatus.PROTOCOL_ERROR)])),
      );
      return;
    }
    this.lastPeerStreamId = id;
    if (this.goingAway || this.streams.size >= this.maxStreams) {
      this.write(
        controlFrame(FrameType.RST_STREAM, 0, Buffer.concat([u32(id), u32(RstStatus.REFUSED_STREAM)])),
      );
      return;
    }
    const stream = this.track(new SpdyStream(this, id, headers));
    // Go's spdystream drops DATA on a stream it has no reply for: the reply goes out first.
    const block = this.headerWriter.compress(encodeHeaderBlock(new Map()));
    this.write(controlFrame(FrameType.SYN_REPLY, 0, streamIdBody(id, block)));
    if ((flags & FLAG_UNIDIRECTIONAL) !== 0) {
      stream.localClosed = true;
      stream.end();
    }
    if ((flags & FLAG_FIN) !== 0) this.remoteFin(stream);
    this.emit('stream', stream);
  }

  private track(stream: SpdyStream): SpdyStream {
    // A stream's failure is its connection's to report; an unheard 'error' would end the daemon.
    stream.on('error', () => undefined);
    this.streams.set(stream.id, stream);
    return stream;
  }

  private remoteFin(stream: SpdyStream): void {
    if (stream.remoteClosed) return;
    stream.remoteClosed = true;
    stream.push(null);
    this.maybeForget(stream);
  }

  private maybeForget(stream: SpdyStream): void {
    if (stream.localClosed && stream.remoteClosed) {
      this.streams.delete(stream.id);
      this.blocked.delete(stream.id);
      if (this.goingAway && this.streams.size === 0) this.socket.end();
    }
  }

  private inflate(block: Buffer): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.inflater.once('error', onError);
      this.inflater.write(block);
      this.inflater.flush(zlibConstants.Z_SYNC_FLUSH, () => {
        this.inflater.off('error', onError);
        const parts: Buffer[] = [];
        let size = 0;
        for (
          let chunk = this.inflater.read() as Buffer | null;
          chunk !== null;
          chunk = this.inflater.read() as Buffer | null
        ) {
          parts.push(chunk);
          size += chunk.length;
          if (size > MAX_HEADER_BLOCK) {
            reject(new SpdyProtocolError(`header block larger than ${MAX_HEADER_BLOCK} bytes`));
            return;
          }
        }
        resolve(Buffer.concat(parts));
      });
    });
  }

  // --- frames out and the end ----------------------------------------------------------------

  private write(frame: Buffer): boolean {
    if (this.closed || this.socket.destroyed || this.socket.writableEnded) return true;
    return this.socket.write(frame);
  }

  private fail(err: Error): void {
    if (this.closed) return;
    if (this.listenerCount('error') > 0) this.emit('error', err);
    this.destroy();
  }

  private teardown(): void {
    if (this.closed) return;
    this.closed = true;
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
