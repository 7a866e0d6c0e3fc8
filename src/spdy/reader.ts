/**
 * Frames out of a byte stream that arrives in chunks of any size. The chunks are kept as they came
 * and a frame is copied out once, when all of it is there, so the cost is linear in the bytes read
 * however the peer splits them. The bounds are checked on a frame's first 8 bytes, before its body
 * is waited for: a DATA frame longer than MAX_FRAME_LENGTH is reported and its body skipped as it
 * arrives (never buffered), a control frame longer than MAX_CONTROL_FRAME_LENGTH is a protocol error.
 */
import {
  FRAME_HEADER_LENGTH,
  MAX_CONTROL_FRAME_LENGTH,
  MAX_FRAME_LENGTH,
  SpdyProtocolError,
  decodeFrameHead,
  type Frame,
} from './frames.js';

/** A DATA frame too long to accept: its body is being skipped. */
export interface OversizedData {
  kind: 'too-large';
  streamId: number;
  length: number;
}

/** Chunks smaller than this are copied into a shared slab, so that tiny TCP reads cost no more than big ones. */
const SMALL_CHUNK = 4096;
const SLAB_SIZE = 64 * 1024;

/** Bytes `from` to `to` of `buf`, not yet handed out. */
interface Piece {
  buf: Buffer;
  from: number;
  to: number;
}

export class FrameReader {
  private pieces: Piece[] = [];
  /** Index of the first piece still holding bytes: the list is trimmed now and then, not per frame. */
  private first = 0;
  /** Bytes held. */
  private size = 0;
  /** Where small chunks are appended; its bytes before `slabUsed` belong to pieces. */
  private slab: Buffer | null = null;
  private slabUsed = 0;
  /** Body bytes of an oversized DATA frame still to be thrown away as they arrive. */
  private skipping = 0;

  /** Bytes received and not yet handed out as frames. */
  get buffered(): number {
    return this.size;
  }

  push(chunk: Buffer): void {
    let rest = chunk;
    if (this.skipping > 0) {
      const skipped = Math.min(this.skipping, rest.length);
      this.skipping -= skipped;
      rest = rest.subarray(skipped);
    }
    if (rest.length === 0) return;
    this.size += rest.length;
    if (rest.length >= SMALL_CHUNK) {
      this.pieces.push({ buf: rest, from: 0, to: rest.length });
      return;
    }
    if (!this.slab || this.slab.length - this.slabUsed < rest.length) {
      this.slab = Buffer.allocUnsafe(SLAB_SIZE);
      this.slabUsed = 0;
    }
    rest.copy(this.slab, this.slabUsed);
    // Bytes that follow the last piece in the slab extend it rather than adding one more piece.
    const last = this.pieces.length > this.first ? this.pieces[this.pieces.length - 1] : undefined;
    if (last && last.buf === this.slab && last.to === this.slabUsed) last.to += rest.length;
    else this.pieces.push({ buf: this.slab, from: this.slabUsed, to: this.slabUsed + rest.length });
    this.slabUsed += rest.length;
  }

  /** The next complete frame, or null until more bytes arrive. Throws SpdyProtocolError. */
  next(): Frame | OversizedData | null {
    if (this.size < FRAME_HEADER_LENGTH) return null;
    const head = decodeFrameHead(this.peekHead());
    if (head.kind === 'control' && head.length > MAX_CONTROL_FRAME_LENGTH) {
      throw new SpdyProtocolError(`control frame of ${head.length} bytes is too large`);
    }
    if (head.kind === 'data' && head.length > MAX_FRAME_LENGTH) {
      this.take(FRAME_HEADER_LENGTH);
      const present = Math.min(head.length, this.size);
      this.take(present);
      this.skipping = head.length - present;
      return { kind: 'too-large', streamId: head.streamId, length: head.length };
    }
    if (this.size < FRAME_HEADER_LENGTH + head.length) return null;
    this.take(FRAME_HEADER_LENGTH);
    const body = this.take(head.length);
    return head.kind === 'data'
      ? { kind: 'data', streamId: head.streamId, flags: head.flags, data: body }
      : { kind: 'control', type: head.type, flags: head.flags, body };
  }

  /** A frame header's bytes, left in place. */
  private peekHead(): Buffer {
    const out = Buffer.alloc(FRAME_HEADER_LENGTH);
    let filled = 0;
    for (let i = this.first; i < this.pieces.length && filled < out.length; i++) {
      const p = this.pieces[i] as Piece;
      filled += p.buf.copy(out, filled, p.from, Math.min(p.to, p.from + out.length - filled));
    }
    return out;
  }

  /** Removes and returns the first `n` bytes: a view when one piece holds them, else one copy. */
  private take(n: number): Buffer {
    this.size -= n;
    const head = this.pieces[this.first];
    let out: Buffer;
    if (head && head.to - head.from >= n) {
      out = head.buf.subarray(head.from, head.from + n);
      head.from += n;
      if (head.from === head.to) this.first++;
    } else {
      out = Buffer.alloc(n);
      let filled = 0;
      while (filled < n) {
        const p = this.pieces[this.first];
        if (!p) throw new Error('FrameReader: taking more bytes than it holds');
        const used = p.buf.copy(out, filled, p.from, Math.min(p.to, p.from + n - filled));
        filled += used;
        p.from += used;
        if (p.from === p.to) this.first++;
      }
    }
    if (this.first > 64 && this.first * 2 > this.pieces.length) {
      this.pieces = this.pieces.slice(this.first);
      this.first = 0;
    }
    return out;
  }
}
