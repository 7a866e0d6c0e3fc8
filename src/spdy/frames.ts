/**
 * SPDY/3.1 frame layouts (draft 3.1, section 2): encoding and decoding only, no state. The streams
 * Kubernetes multiplexes over SPDY (remotecommand, portforward) use SYN_STREAM, SYN_REPLY,
 * RST_STREAM, DATA, PING and GOAWAY; SETTINGS, HEADERS and WINDOW_UPDATE are decoded so that a
 * peer sending them is understood, and otherwise ignored.
 */

export const SPDY_VERSION = 3;

export const FrameType = {
  SYN_STREAM: 1,
  SYN_REPLY: 2,
  RST_STREAM: 3,
  SETTINGS: 4,
  PING: 6,
  GOAWAY: 7,
  HEADERS: 8,
  WINDOW_UPDATE: 9,
} as const;

export const FLAG_FIN = 0x01;
export const FLAG_UNIDIRECTIONAL = 0x02;

/** RST_STREAM status codes used here. */
export const RstStatus = { PROTOCOL_ERROR: 1, INVALID_STREAM: 2, REFUSED_STREAM: 3, CANCEL: 5 } as const;

/** Frames longer than this are a protocol error: nobody sends 16 MiB control frames on purpose. */
export const MAX_FRAME_LENGTH = 1 << 20;
/** The largest DATA payload sent at once; Go's framer reads each frame whole into memory. */
export const MAX_DATA_CHUNK = 32 * 1024;

export type Frame =
  | { kind: 'data'; streamId: number; flags: number; data: Buffer }
  | { kind: 'control'; type: number; flags: number; body: Buffer };

export class SpdyProtocolError extends Error {
  override name = 'SpdyProtocolError';
}

/** Decodes every complete frame at the front of `buf`; returns them and the bytes consumed. */
export function decodeFrames(buf: Buffer): { frames: Frame[]; consumed: number } {
  const frames: Frame[] = [];
  let offset = 0;
  while (buf.length - offset >= 8) {
    const length = buf.readUIntBE(offset + 5, 3);
    if (length > MAX_FRAME_LENGTH) throw new SpdyProtocolError(`frame of ${length} bytes is too large`);
    if (buf.length - offset < 8 + length) break;
    const flags = buf[offset + 4] ?? 0;
    const body = buf.subarray(offset + 8, offset + 8 + length);
    const first = buf.readUInt32BE(offset);
    if ((first & 0x80000000) !== 0) {
      const version = (first >>> 16) & 0x7fff;
      if (version !== SPDY_VERSION) throw new SpdyProtocolError(`unsupported SPDY version ${version}`);
      frames.push({ kind: 'control', type: first & 0xffff, flags, body });
    } else {
      frames.push({ kind: 'data', streamId: first & 0x7fffffff, flags, data: body });
    }
    offset += 8 + length;
  }
  return { frames, consumed: offset };
}

function header(type: number, flags: number, length: number): Buffer {
  const out = Buffer.alloc(8);
  out.writeUInt32BE((0x8000 | SPDY_VERSION) * 0x10000 + type);
  out.writeUInt32BE((((flags & 0xff) << 24) >>> 0) | length, 4);
  return out;
}

export function controlFrame(type: number, flags: number, body: Buffer): Buffer {
  return Buffer.concat([header(type, flags, body.length), body]);
}

export function dataFrame(streamId: number, flags: number, data: Buffer): Buffer {
  const out = Buffer.alloc(8 + data.length);
  out.writeUInt32BE(streamId & 0x7fffffff);
  out.writeUInt32BE((((flags & 0xff) << 24) >>> 0) | data.length, 4);
  data.copy(out, 8);
  return out;
}

export function synStreamBody(streamId: number, headerBlock: Buffer): Buffer {
  const out = Buffer.alloc(10);
  out.writeUInt32BE(streamId & 0x7fffffff);
  // Associated stream 0, priority 0, slot 0.
  return Buffer.concat([out, headerBlock]);
}

export function streamIdBody(streamId: number, rest: Buffer = Buffer.alloc(0)): Buffer {
  const out = Buffer.alloc(4);
  out.writeUInt32BE(streamId & 0x7fffffff);
  return Buffer.concat([out, rest]);
}

export function u32(value: number): Buffer {
  const out = Buffer.alloc(4);
  out.writeUInt32BE(value >>> 0);
  return out;
}

/** A header block before compression: a count, then length-prefixed names and values. */
export function encodeHeaderBlock(headers: ReadonlyMap<string, string>): Buffer {
  const parts: Buffer[] = [u32(headers.size)];
  for (const [name, value] of headers) {
    const n = Buffer.from(name.toLowerCase(), 'utf8');
    const v = Buffer.from(value, 'utf8');
    parts.push(u32(n.length), n, u32(v.length), v);
  }
  return Buffer.concat(parts);
}

/** Names are lowercased by every SPDY sender; a value with NULs carries several values, the first is kept. */
export function decodeHeaderBlock(block: Buffer): Map<string, string> {
  const headers = new Map<string, string>();
  if (block.length < 4) throw new SpdyProtocolError('header block too short');
  let count = block.readUInt32BE(0);
  let offset = 4;
  const take = (): string => {
    if (block.length - offset < 4) throw new SpdyProtocolError('header block truncated');
    const len = block.readUInt32BE(offset);
    offset += 4;
    if (block.length - offset < len) throw new SpdyProtocolError('header block truncated');
    const s = block.toString('utf8', offset, offset + len);
    offset += len;
    return s;
  };
  while (count-- > 0) {
    const name = take().toLowerCase();
    const value = take();
    if (!headers.has(name)) headers.set(name, value.split('\0')[0] ?? '');
  }
  return headers;
}

/**
 * Outgoing header blocks as one never-ending zlib stream of stored (uncompressed) deflate blocks.
 * Each block is followed by an empty stored block, exactly what a sync flush writes: Go's inflater
 * reads the block after a stored one before it hands the data out, and finds the marker within
 * the same frame. No dictionary is declared, and stored blocks never refer to one. This keeps the
 * write path synchronous, so frames leave in the order they were made.
 */
export class StoredHeaderWriter {
  private started = false;

  compress(block: Buffer): Buffer {
    const parts: Buffer[] = [];
    if (!this.started) {
      // CMF 0x78 (deflate, 32 KiB window), FLG 0x01: check bits only, no preset dictionary.
      parts.push(Buffer.from([0x78, 0x01]));
      this.started = true;
    }
    for (let at = 0; at < block.length; at += 0xffff) {
      parts.push(storedBlockHeader(Math.min(0xffff, block.length - at)), block.subarray(at, at + 0xffff));
    }
    parts.push(storedBlockHeader(0));
    return Buffer.concat(parts);
  }
}

/** BFINAL 0, BTYPE 00 (stored), then LEN and its complement, little-endian. */
function storedBlockHeader(length: number): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt16LE(length, 1);
  head.writeUInt16LE(~length & 0xffff, 3);
  return head;
}
