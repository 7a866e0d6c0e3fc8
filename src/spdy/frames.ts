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

/** RST_STREAM status codes (draft 3.1, section 2.6.3) used here. */
export const RstStatus = {
  PROTOCOL_ERROR: 1,
  INVALID_STREAM: 2,
  REFUSED_STREAM: 3,
  CANCEL: 5,
  STREAM_ALREADY_CLOSED: 9,
  FRAME_TOO_LARGE: 11,
} as const;

/** GOAWAY status codes (section 2.6.6). */
export const GoAwayStatus = { OK: 0, PROTOCOL_ERROR: 1, INTERNAL_ERROR: 2 } as const;

/**
 * DATA frames longer than this are refused (their stream gets FRAME_TOO_LARGE and the body is
 * skipped, never buffered): Go clients copy in pieces of 32 KiB.
 */
export const MAX_FRAME_LENGTH = 1 << 20;
/**
 * Control frames longer than this end the session: the largest legitimate one is a SYN_STREAM
 * whose header block (at most MAX_HEADER_BLOCK once inflated) is stored uncompressed.
 */
export const MAX_CONTROL_FRAME_LENGTH = 128 * 1024;
/** A decompressed header block larger than this ends the session (a zlib bomb is cut off there). */
export const MAX_HEADER_BLOCK = 64 * 1024;
/** The largest DATA payload sent at once; Go's framer reads each frame whole into memory. */
export const MAX_DATA_CHUNK = 32 * 1024;

/** A frame's fixed 8 bytes. */
export const FRAME_HEADER_LENGTH = 8;

export type Frame =
  | { kind: 'data'; streamId: number; flags: number; data: Buffer }
  | { kind: 'control'; type: number; flags: number; body: Buffer };

export type FrameHead =
  | { kind: 'data'; streamId: number; flags: number; length: number }
  | { kind: 'control'; type: number; flags: number; length: number };

export class SpdyProtocolError extends Error {
  override name = 'SpdyProtocolError';
}

/** Decodes a frame's first 8 bytes; a control frame of another version is a protocol error. */
export function decodeFrameHead(head: Buffer): FrameHead {
  const first = head.readUInt32BE(0);
  const flags = head[4] ?? 0;
  const length = head.readUIntBE(5, 3);
  if ((first & 0x80000000) === 0) return { kind: 'data', streamId: first & 0x7fffffff, flags, length };
  const version = (first >>> 16) & 0x7fff;
  if (version !== SPDY_VERSION) throw new SpdyProtocolError(`unsupported SPDY version ${version}`);
  return { kind: 'control', type: first & 0xffff, flags, length };
}

function header(type: number, flags: number, length: number): Buffer {
  const out = Buffer.alloc(8);
  out.writeUInt32BE((0x8000 | SPDY_VERSION) * 0x10000 + type);
  out.writeUInt32BE(flagsAndLength(flags, length), 4);
  return out;
}

/** The second word of both frame kinds: 8 bits of flags, 24 bits of length. */
function flagsAndLength(flags: number, length: number): number {
  return (flags & 0xff) * 0x1000000 + (length & 0xffffff);
}

export function controlFrame(type: number, flags: number, body: Buffer): Buffer {
  return Buffer.concat([header(type, flags, body.length), body]);
}

export function dataFrame(streamId: number, flags: number, data: Buffer): Buffer {
  const out = Buffer.alloc(8 + data.length);
  out.writeUInt32BE(streamId & 0x7fffffff);
  out.writeUInt32BE(flagsAndLength(flags, data.length), 4);
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
