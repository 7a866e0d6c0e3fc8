/**
 * One SPDY stream as a Node Duplex: what is written goes out as DATA frames (the write completes
 * once the socket took them), DATA frames received are pushed to the readable side, and the
 * stream's end or destruction becomes a FIN or a RST_STREAM. The connection does the framing.
 */
import { Duplex } from 'node:stream';

/** What a stream asks of its connection. */
export interface StreamOwner {
  /** The stream's reader has room again. */
  streamWantsData(stream: SpdyStream): void;
  sendData(stream: SpdyStream, data: Buffer, fin: boolean, done: (err?: Error | null) => void): void;
  streamDestroyed(stream: SpdyStream): void;
}

export class SpdyStream extends Duplex {
  /** Set when the peer half-closed (FIN) or reset the stream. */
  remoteClosed = false;
  /** Set once our FIN or RST went out. */
  localClosed = false;

  constructor(
    private readonly conn: StreamOwner,
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
