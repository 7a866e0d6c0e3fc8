/**
 * WebSocket by hand, for test/e2e/hostile-streaming-http.test.ts: an upgrade request, client frames
 * as RFC 6455 lays them out (masked or not, any opcode, any claimed length), a reader of the
 * server's close code, and frames that must make berthd close a session with the code for the
 * fault. Random cases come from the suite's seeded Rng.
 */
import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { request } from './hostile-http.js';
import type { Rng } from './hostile.js';

/** An HTTP upgrade to WebSocket for `path`, offering `protocols`; `extra` headers replace or add. */
export function wsHandshake(
  path: string,
  protocols: readonly string[],
  extra: readonly string[] = [],
): Buffer {
  const headers = [
    'Host: 127.0.0.1',
    'Connection: Upgrade',
    'Upgrade: websocket',
    'Sec-WebSocket-Version: 13',
    `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}`,
    ...(protocols.length > 0 ? [`Sec-WebSocket-Protocol: ${protocols.join(', ')}`] : []),
  ];
  const names = new Set(extra.map((h) => h.slice(0, h.indexOf(':')).toLowerCase()));
  const kept = headers.filter((h) => !names.has(h.slice(0, h.indexOf(':')).toLowerCase()));
  return request(`GET ${path} HTTP/1.1`, [...kept, ...extra.filter((h) => !h.endsWith(': '))]);
}

export interface FrameSpec {
  opcode: number;
  payload?: Buffer;
  fin?: boolean;
  /** RSV1-3 as the three bits after FIN. */
  rsv?: number;
  /** Clients must mask; false writes an unmasked frame. */
  masked?: boolean;
  /** The length the header claims, when it must differ from the payload's (bigint for 2^63). */
  claimedLength?: number | bigint;
}

export const OPCODE = { continuation: 0, text: 1, binary: 2, close: 8, ping: 9, pong: 10 } as const;

/** One client frame as RFC 6455 lays it out. */
export function wsFrame(spec: FrameSpec): Buffer {
  const payload = spec.payload ?? Buffer.alloc(0);
  const masked = spec.masked ?? true;
  const length = spec.claimedLength ?? payload.length;
  const first = ((spec.fin ?? true) ? 0x80 : 0) | ((spec.rsv ?? 0) << 4) | (spec.opcode & 0x0f);
  let header: Buffer;
  if (typeof length === 'number' && length < 126) {
    header = Buffer.from([first, (masked ? 0x80 : 0) | length]);
  } else if (typeof length === 'number' && length < 65536) {
    header = Buffer.alloc(4);
    header.writeUInt8(first, 0);
    header.writeUInt8((masked ? 0x80 : 0) | 126, 1);
    header.writeUInt16BE(length, 2);
  } else {
    header = Buffer.alloc(10);
    header.writeUInt8(first, 0);
    header.writeUInt8((masked ? 0x80 : 0) | 127, 1);
    header.writeBigUInt64BE(BigInt(length), 2);
  }
  if (!masked) return Buffer.concat([header, payload]);
  const mask = randomBytes(4);
  const body = Buffer.from(payload.map((b, i) => b ^ (mask[i % 4] ?? 0)));
  return Buffer.concat([header, mask, body]);
}

/** A close frame's payload: the code, then the reason. */
export function closePayload(code: number, reason = ''): Buffer {
  const out = Buffer.alloc(2 + Buffer.byteLength(reason));
  out.writeUInt16BE(code, 0);
  out.write(reason, 2);
  return out;
}

/**
 * Reads server frames from `socket` (starting with `already`, what came after the 101) until a
 * close frame or the socket's end; the close code, or undefined when the socket ended without one.
 */
export function awaitClose(
  socket: Socket,
  already: Buffer,
  timeoutMs: number,
): Promise<{ code: number | undefined; closed: boolean }> {
  return new Promise((resolve) => {
    let buffered = already;
    let done = false;
    const finish = (code: number | undefined, closed: boolean): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.off('data', onData);
      resolve({ code, closed });
    };
    const timer = setTimeout(() => finish(undefined, false), timeoutMs);
    const scan = (): void => {
      for (;;) {
        const frame = nextServerFrame(buffered);
        if (!frame) return;
        buffered = buffered.subarray(frame.size);
        if (frame.opcode === OPCODE.close) {
          finish(frame.payload.length >= 2 ? frame.payload.readUInt16BE(0) : undefined, false);
          return;
        }
      }
    };
    const onData = (chunk: Buffer): void => {
      buffered = Buffer.concat([buffered, chunk]);
      scan();
    };
    socket.on('data', onData);
    socket.once('close', () => finish(undefined, true));
    socket.once('error', () => finish(undefined, true));
    // rawExchange left it paused; a 'data' listener alone does not undo an explicit pause.
    socket.resume();
    scan();
  });
}

function nextServerFrame(bytes: Buffer): { opcode: number; payload: Buffer; size: number } | undefined {
  if (bytes.length < 2) return undefined;
  const opcode = (bytes[0] ?? 0) & 0x0f;
  let length = (bytes[1] ?? 0) & 0x7f;
  let offset = 2;
  if (length === 126) {
    if (bytes.length < 4) return undefined;
    length = bytes.readUInt16BE(2);
    offset = 4;
  } else if (length === 127) {
    if (bytes.length < 10) return undefined;
    length = Number(bytes.readBigUInt64BE(2));
    offset = 10;
  }
  if (bytes.length < offset + length) return undefined;
  return { opcode, payload: bytes.subarray(offset, offset + length), size: offset + length };
}

export interface FrameCase {
  label: string;
  /** What goes on the wire after the handshake. */
  frames: Buffer;
  /** Close codes the server may answer with; undefined in the list allows a close without one. */
  expect: readonly (number | undefined)[];
  /** A base64 sub-protocol session. */
  base64?: boolean;
}

/** Binary channel message for the v5 protocol: the channel byte, then data. */
const channel = (n: number, data = 'x'): Buffer => Buffer.concat([Buffer.from([n]), Buffer.from(data)]);

/**
 * Frames after an accepted exec upgrade (v5.channel.k8s.io, or v4.base64 where `base64`) that must
 * close the connection with RFC 6455's code for the fault, and end the session's process.
 */
export function frameCases(rng: Rng, randomCount = 6): FrameCase[] {
  const binary = (payload: Buffer, more: Partial<FrameSpec> = {}): Buffer =>
    wsFrame({ opcode: OPCODE.binary, payload, ...more });
  const cases: FrameCase[] = [
    {
      label: 'client-close-1000',
      frames: wsFrame({ opcode: OPCODE.close, payload: closePayload(1000) }),
      expect: [1000],
    },
    {
      label: 'oversized-5MiB-claimed',
      frames: binary(Buffer.alloc(16), { claimedLength: 5 * 1024 * 1024 }),
      expect: [1009],
    },
    {
      label: 'length-2^63',
      frames: binary(Buffer.alloc(0), { claimedLength: 2n ** 63n }),
      expect: [1009, 1002],
    },
    { label: 'length-2^53', frames: binary(Buffer.alloc(0), { claimedLength: 2n ** 53n }), expect: [1009] },
    {
      label: 'fragments-2000',
      frames: Buffer.concat([
        binary(Buffer.from([0]), { fin: false }),
        ...Array.from({ length: 2_000 }, () =>
          wsFrame({ opcode: OPCODE.continuation, payload: Buffer.from('a'), fin: false }),
        ),
      ]),
      expect: [1008, 1009],
    },
    {
      label: 'fragments-over-max-payload',
      frames: Buffer.concat([
        binary(Buffer.from([0]), { fin: false }),
        ...Array.from({ length: 6 }, () =>
          wsFrame({ opcode: OPCODE.continuation, payload: Buffer.alloc(1024 * 1024, 0x61), fin: false }),
        ),
      ]),
      expect: [1009],
    },
    {
      label: 'empty-fragments-then-data-frame',
      frames: Buffer.concat([
        binary(Buffer.alloc(0), { fin: false }),
        ...Array.from({ length: 50 }, () => wsFrame({ opcode: OPCODE.continuation, fin: false })),
        binary(Buffer.from([0, 0x61])),
      ]),
      expect: [1002],
    },
    {
      label: 'continuation-first',
      frames: wsFrame({ opcode: OPCODE.continuation, payload: Buffer.from('x') }),
      expect: [1002],
    },
    ...[3, 4, 5, 6, 7, 11, 12, 13, 14, 15].map((opcode) => ({
      label: `opcode-${opcode}`,
      frames: wsFrame({ opcode, payload: Buffer.from('x') }),
      expect: [1002],
    })),
    { label: 'rsv1-without-extension', frames: binary(channel(0), { rsv: 4 }), expect: [1002] },
    { label: 'rsv3', frames: binary(channel(0), { rsv: 1 }), expect: [1002] },
    { label: 'unmasked', frames: binary(channel(0), { masked: false }), expect: [1002] },
    {
      label: 'ping-126-bytes',
      frames: wsFrame({ opcode: OPCODE.ping, payload: Buffer.alloc(126) }),
      expect: [1002],
    },
    {
      label: 'fragmented-ping',
      frames: wsFrame({ opcode: OPCODE.ping, payload: Buffer.from('p'), fin: false }),
      expect: [1002],
    },
    {
      label: 'close-code-999',
      frames: wsFrame({ opcode: OPCODE.close, payload: closePayload(999) }),
      expect: [1002],
    },
    {
      label: 'close-code-1005',
      frames: wsFrame({ opcode: OPCODE.close, payload: closePayload(1005) }),
      expect: [1002],
    },
    {
      label: 'close-one-byte',
      frames: wsFrame({ opcode: OPCODE.close, payload: Buffer.from([3]) }),
      expect: [1002],
    },
    {
      label: 'close-bad-utf8-reason',
      frames: wsFrame({
        opcode: OPCODE.close,
        payload: Buffer.concat([closePayload(1000), Buffer.from([0xff])]),
      }),
      expect: [1007],
    },
    {
      label: 'text-bad-utf8',
      frames: wsFrame({ opcode: OPCODE.text, payload: Buffer.from([0, 0xc3, 0x28]) }),
      expect: [1007],
    },
    { label: 'channel-5', frames: binary(channel(5)), expect: [1002] },
    { label: 'channel-200', frames: binary(channel(200)), expect: [1002] },
    { label: 'stream-close-of-channel-9', frames: binary(Buffer.from([255, 9])), expect: [1002] },
    { label: 'stream-close-two-channels', frames: binary(Buffer.from([255, 0, 1])), expect: [1002] },
    { label: 'stream-close-no-channel', frames: binary(Buffer.from([255])), expect: [1002] },
    {
      label: 'base64-channel-9',
      frames: wsFrame({ opcode: OPCODE.text, payload: Buffer.from('9eA==') }),
      expect: [1002],
      base64: true,
    },
    {
      label: 'base64-channel-below-0',
      frames: wsFrame({ opcode: OPCODE.text, payload: Buffer.from('/eA==') }),
      expect: [1002],
      base64: true,
    },
  ];
  for (let i = 0; i < randomCount; i++) {
    // Whole random frames: any close code ws or berth sends, or a cut connection, will do.
    const garbage = Buffer.from(Array.from({ length: 2 + rng.int(64) }, () => rng.int(256)));
    cases.push({ label: `random-bytes-${i}`, frames: garbage, expect: [1002, 1007, 1008, 1009, undefined] });
  }
  return cases;
}
