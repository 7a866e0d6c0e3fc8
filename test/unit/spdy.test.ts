/**
 * SPDY/3.1 framing and SpdyConnection over real loopback sockets: the dictionary, frame layouts,
 * stored-block header compression, and a session between a server and a client connection (or a
 * raw socket speaking hand-built frames, for what a well-behaved connection never sends).
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';
import { socketPair as sharedSocketPair } from '../harness/sockets.js';
import { framesUntilEnd, readFrames, synStreamFrame } from '../harness/streaming.js';
import { afterEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  constants as zlibConstants,
  createDeflate,
  createInflate,
  deflateSync,
  inflateSync,
} from 'node:zlib';

import { SpdyConnection, type SpdyStream } from '../../src/spdy/connection.js';
import { SPDY3_DICTIONARY } from '../../src/spdy/dictionary.js';
import {
  FLAG_FIN,
  FLAG_UNIDIRECTIONAL,
  FrameType,
  GoAwayStatus,
  MAX_CONTROL_FRAME_LENGTH,
  MAX_FRAME_LENGTH,
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
} from '../../src/spdy/frames.js';
import { FrameReader } from '../../src/spdy/reader.js';

const cleanups: (() => void)[] = [];

afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

/** As an HTTP server's upgraded socket is: the client's end does not end the server's side. */
function socketPair(): Promise<{ serverSocket: Socket; clientSocket: Socket }> {
  return sharedSocketPair((cleanup) => cleanups.push(cleanup), { allowHalfOpen: true });
}

interface Pair {
  server: SpdyConnection;
  client: SpdyConnection;
  serverSocket: Socket;
  clientSocket: Socket;
}

async function spdyPair(serverOpts: { maxStreams?: number; idleTimeoutMs?: number } = {}): Promise<Pair> {
  const { serverSocket, clientSocket } = await socketPair();
  const server = new SpdyConnection(serverSocket, { role: 'server', ...serverOpts });
  const client = new SpdyConnection(clientSocket, { role: 'client' });
  cleanups.push(() => {
    server.destroy();
    client.destroy();
  });
  return { server, client, serverSocket, clientSocket };
}

/** Opens a stream from the client and returns both ends of it. */
async function openPair(
  pair: Pair,
  headers: Record<string, string> = { streamType: 'data' },
): Promise<{ local: SpdyStream; remote: SpdyStream }> {
  const remote = once(pair.server, 'stream') as Promise<[SpdyStream]>;
  const local = await pair.client.openStream(headers);
  const [accepted] = await remote;
  return { local, remote: accepted };
}

/** Resolves on 'close'; unlike events.once it does not reject when an 'error' comes first. */
function closed(emitter: Readable | SpdyConnection): Promise<void> {
  return new Promise((resolve) => emitter.once('close', () => resolve()));
}

function collect(stream: Readable): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => parts.push(chunk));
    stream.once('end', () => resolve(Buffer.concat(parts)));
    stream.once('error', reject);
  });
}

function control(frame: Frame | undefined): { type: number; flags: number; body: Buffer } {
  assert.ok(frame, 'expected a frame');
  assert.equal(frame.kind, 'control');
  return frame;
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

describe('SPDY3_DICTIONARY', () => {
  it('is the 1423 bytes of the SPDY/3 draft', () => {
    assert.equal(SPDY3_DICTIONARY.length, 1423);
    assert.deepEqual(
      SPDY3_DICTIONARY.subarray(0, 11),
      Buffer.concat([Buffer.from([0, 0, 0, 7]), Buffer.from('options')]),
    );
    assert.equal(SPDY3_DICTIONARY.subarray(-6).toString('latin1'), 'enq=0.');
  });

  it('inflates what a zlib writer primed with it compressed', () => {
    const block = encodeHeaderBlock(new Map([['streamtype', 'stdout']]));
    const packed = deflateSync(block, { dictionary: SPDY3_DICTIONARY });
    assert.deepEqual(inflateSync(packed, { dictionary: SPDY3_DICTIONARY }), block);
  });
});

describe('SPDY frames', () => {
  it('writes the control frame header: control bit, version 3, type, flags, 24-bit length', () => {
    const frame = controlFrame(FrameType.PING, 0, u32(1));
    assert.deepEqual([...frame], [0x80, 0x03, 0x00, 0x06, 0x00, 0x00, 0x00, 0x04, 0, 0, 0, 1]);

    const big = controlFrame(FrameType.SYN_STREAM, FLAG_FIN | FLAG_UNIDIRECTIONAL, Buffer.alloc(0x12345));
    assert.deepEqual([...big.subarray(0, 8)], [0x80, 0x03, 0x00, 0x01, 0x03, 0x01, 0x23, 0x45]);
    assert.equal(big.length, 8 + 0x12345);
  });

  it('writes the data frame header: stream id without the control bit, flags, length', () => {
    const frame = dataFrame(5, FLAG_FIN, Buffer.from('abc'));
    assert.deepEqual([...frame], [0, 0, 0, 5, 0x01, 0, 0, 3, 0x61, 0x62, 0x63]);
    // A stray high bit in the id must not turn the frame into a control frame.
    assert.deepEqual([...dataFrame(0x80000007, 0, Buffer.alloc(0))], [0, 0, 0, 7, 0, 0, 0, 0]);
  });

  it('builds SYN_STREAM and stream id bodies', () => {
    const syn = synStreamBody(0x80000003, Buffer.from('hb'));
    assert.deepEqual([...syn], [0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x68, 0x62]);
    assert.deepEqual([...streamIdBody(4, u32(5))], [0, 0, 0, 4, 0, 0, 0, 5]);
  });
});

describe('FrameReader', () => {
  const frames = [
    controlFrame(FrameType.PING, 0, u32(9)),
    dataFrame(3, FLAG_FIN, Buffer.from('hello')),
    dataFrame(5, 0, Buffer.alloc(0)),
    controlFrame(FrameType.SETTINGS, 0, u32(0)),
  ];
  const expected: Frame[] = [
    { kind: 'control', type: FrameType.PING, flags: 0, body: u32(9) },
    { kind: 'data', streamId: 3, flags: FLAG_FIN, data: Buffer.from('hello') },
    { kind: 'data', streamId: 5, flags: 0, data: Buffer.alloc(0) },
    { kind: 'control', type: FrameType.SETTINGS, flags: 0, body: u32(0) },
  ];

  function drain(reader: FrameReader): ReturnType<FrameReader['next']>[] {
    const out: ReturnType<FrameReader['next']>[] = [];
    for (let f = reader.next(); f; f = reader.next()) out.push(f);
    return out;
  }

  it('hands out each frame once it is complete, whatever the chunks', () => {
    const whole = Buffer.concat(frames);
    const oneChunk = new FrameReader();
    oneChunk.push(whole);
    assert.deepEqual(drain(oneChunk), expected);
    assert.equal(oneChunk.buffered, 0);

    // Byte by byte: nothing comes out early, everything comes out.
    const bytewise = new FrameReader();
    const got: ReturnType<FrameReader['next']>[] = [];
    for (let i = 0; i < whole.length; i++) {
      bytewise.push(whole.subarray(i, i + 1));
      got.push(...drain(bytewise));
    }
    assert.deepEqual(got, expected);

    const partial = new FrameReader();
    partial.push(whole.subarray(0, (frames[0]?.length ?? 0) + 7));
    assert.equal(drain(partial).length, 1);
    assert.equal(partial.buffered, 7);
  });

  it('keeps a frame intact across chunks of mixed sizes', () => {
    const body = randomBytes(300_000);
    const frame = dataFrame(7, 0, body);
    const reader = new FrameReader();
    const sizes = [1, 3, 5000, 2, 70_000, 1, 4095, 4096];
    let at = 0;
    for (let i = 0; at < frame.length; i++) {
      const n = sizes[i % sizes.length] ?? 1;
      reader.push(frame.subarray(at, at + n));
      at += n;
      if (at < frame.length) assert.equal(reader.next(), null);
    }
    const out = reader.next();
    assert.ok(out?.kind === 'data');
    assert.equal(sha(out.data), sha(body));
    assert.equal(reader.buffered, 0);
  });

  it('reads 32 MB sent in 1 KiB pieces with no more than a frame held', () => {
    const frame = dataFrame(1, 0, Buffer.alloc(MAX_FRAME_LENGTH, 7));
    const reader = new FrameReader();
    let count = 0;
    let most = 0;
    for (let n = 0; n < 32; n++) {
      for (let at = 0; at < frame.length; at += 1024) {
        reader.push(frame.subarray(at, at + 1024));
        most = Math.max(most, reader.buffered);
        for (let f = reader.next(); f; f = reader.next()) count++;
      }
    }
    assert.equal(count, 32);
    assert.ok(most <= frame.length, `held ${most} bytes`);
  });

  it('refuses a control frame of another version or past its bound on the header alone', () => {
    const v2 = controlFrame(FrameType.PING, 0, u32(1));
    v2[1] = 2;
    const reader = new FrameReader();
    reader.push(v2);
    assert.throws(() => reader.next(), SpdyProtocolError);

    const huge = controlFrame(FrameType.SYN_STREAM, 0, Buffer.alloc(0));
    huge.writeUIntBE(MAX_CONTROL_FRAME_LENGTH + 1, 5, 3);
    const bounded = new FrameReader();
    bounded.push(huge);
    assert.throws(() => bounded.next(), /too large/);
  });

  it('reports a DATA frame past its bound at once and skips its body as it arrives', () => {
    const reader = new FrameReader();
    const head = dataFrame(9, 0, Buffer.alloc(0));
    head.writeUIntBE(0xffffff, 5, 3);
    reader.push(Buffer.concat([head, Buffer.alloc(1000)]));
    assert.deepEqual(reader.next(), { kind: 'too-large', streamId: 9, length: 0xffffff });
    assert.equal(reader.buffered, 0);
    let left = 0xffffff - 1000;
    while (left > 0) {
      const n = Math.min(left, 1 << 20);
      reader.push(Buffer.alloc(n));
      left -= n;
      assert.equal(reader.buffered, 0);
    }
    reader.push(frames[0] ?? Buffer.alloc(0));
    assert.deepEqual(reader.next(), expected[0]);
  });
});

describe('SPDY header blocks', () => {
  it('round-trips with names lowercased', () => {
    const block = encodeHeaderBlock(
      new Map([
        ['StreamType', 'stdout'],
        ['Port', '8080'],
        ['empty', ''],
      ]),
    );
    assert.equal(block.readUInt32BE(0), 3);
    assert.deepEqual(
      decodeHeaderBlock(block),
      new Map([
        ['streamtype', 'stdout'],
        ['port', '8080'],
        ['empty', ''],
      ]),
    );
  });

  it('keeps the first of NUL-separated values and the first of repeated names', () => {
    const entry = (s: string): Buffer[] => [u32(Buffer.byteLength(s)), Buffer.from(s)];
    const block = Buffer.concat([
      u32(2),
      ...entry('Accept'),
      ...entry('a\0b\0c'),
      ...entry('accept'),
      ...entry('z'),
    ]);
    assert.deepEqual(decodeHeaderBlock(block), new Map([['accept', 'a']]));
  });

  it('rejects short and truncated blocks', () => {
    assert.throws(() => decodeHeaderBlock(Buffer.from([0, 0])), SpdyProtocolError);
    const block = encodeHeaderBlock(new Map([['streamtype', 'stdout']]));
    assert.throws(() => decodeHeaderBlock(block.subarray(0, block.length - 1)), SpdyProtocolError);
    assert.throws(() => decodeHeaderBlock(block.subarray(0, 6)), SpdyProtocolError);
  });
});

describe('StoredHeaderWriter', () => {
  const SYNC_MARKER = [0x00, 0x00, 0x00, 0xff, 0xff];
  const blocks = [
    encodeHeaderBlock(new Map([['streamtype', 'error']])),
    encodeHeaderBlock(new Map()),
    encodeHeaderBlock(new Map([['streamtype', 'stdout']])),
  ];

  it('writes one zlib stream that inflates to the concatenated blocks', () => {
    const writer = new StoredHeaderWriter();
    const outputs = blocks.map((b) => writer.compress(b));
    assert.deepEqual([...(outputs[0] ?? Buffer.alloc(0)).subarray(0, 2)], [0x78, 0x01]);
    for (const out of outputs.slice(1)) {
      assert.notEqual(out[0], 0x78, 'the zlib header is written once');
    }
    for (const out of outputs) assert.deepEqual([...out.subarray(-5)], SYNC_MARKER);
    const inflated = inflateSync(Buffer.concat(outputs), { finishFlush: zlibConstants.Z_SYNC_FLUSH });
    assert.deepEqual(inflated, Buffer.concat(blocks));
  });

  it('hands each block out on its own to a streaming inflater', async () => {
    // This is how a peer reads them: one frame at a time, flushing after each.
    const writer = new StoredHeaderWriter();
    const inflater = createInflate();
    try {
      for (const block of blocks) {
        inflater.write(writer.compress(block));
        await new Promise<void>((resolve) => inflater.flush(zlibConstants.Z_SYNC_FLUSH, () => resolve()));
        const parts: Buffer[] = [];
        for (let c = inflater.read() as Buffer | null; c !== null; c = inflater.read() as Buffer | null) {
          parts.push(c);
        }
        assert.deepEqual(Buffer.concat(parts), block);
      }
    } finally {
      inflater.destroy();
    }
  });

  it('splits a block over 65535 bytes into several stored blocks', () => {
    const writer = new StoredHeaderWriter();
    const small = writer.compress(blocks[0] ?? Buffer.alloc(0));
    const huge = randomBytes(200_000);
    const out = writer.compress(huge);
    // Four stored blocks of at most 65535 bytes, then the empty one.
    assert.equal(out.length, 4 * 5 + huge.length + 5);
    assert.deepEqual([...out.subarray(0, 5)], [0x00, 0xff, 0xff, 0x00, 0x00]);
    assert.deepEqual([...out.subarray(-5)], SYNC_MARKER);
    const inflated = inflateSync(Buffer.concat([small, out]), { finishFlush: zlibConstants.Z_SYNC_FLUSH });
    assert.deepEqual(inflated, Buffer.concat([blocks[0] ?? Buffer.alloc(0), huge]));
  });
});

describe('SpdyConnection', () => {
  it('opens a stream once the server replied and hands the headers over', async () => {
    const pair = await spdyPair();
    const { local, remote } = await openPair(pair, { streamType: 'x', foo: 'bar' });
    assert.equal(local.id, 1);
    assert.equal(remote.id, 1);
    assert.equal(remote.header('streamtype'), 'x');
    assert.equal(remote.header('StreamType'), 'x');
    assert.equal(remote.header('foo'), 'bar');
    // Client ids are odd and rising.
    const second = await openPair(pair);
    assert.equal(second.local.id, 3);
  });

  it('lets the server open streams too, with even ids', async () => {
    const pair = await spdyPair();
    const accepted = once(pair.client, 'stream') as Promise<[SpdyStream]>;
    const local = await pair.server.openStream({ streamType: 'from-server' });
    const [remote] = await accepted;
    assert.equal(local.id, 2);
    assert.equal(remote.header('streamtype'), 'from-server');
    remote.end('ok');
    assert.equal((await collect(local)).toString(), 'ok');
  });

  it('carries data both ways and half-closes each direction on its own', async () => {
    const pair = await spdyPair();
    const { local, remote } = await openPair(pair);
    const atServer = collect(remote);
    local.write('hello ');
    local.end('server');
    assert.equal((await atServer).toString(), 'hello server');
    // The server's half is still open after the client's FIN.
    const atClient = collect(local);
    remote.end('hello client');
    assert.equal((await atClient).toString(), 'hello client');
  });

  it('resets a destroyed stream on the other side and keeps the connection', async () => {
    const pair = await spdyPair();
    const { local, remote } = await openPair(pair);
    const remoteClosed = closed(remote);
    local.destroy();
    await remoteClosed;
    assert.ok(remote.destroyed);
    assert.ok(remote.errored instanceof Error);
    assert.match(remote.errored.message, /reset by the peer/);
    assert.equal(pair.server.isClosed, false);

    const next = await openPair(pair);
    next.local.end('still here');
    assert.equal((await collect(next.remote)).toString(), 'still here');
  });

  it('answers the peer’s PINGs (odd ids from a client) and not its own', async () => {
    const { serverSocket, clientSocket } = await socketPair();
    const server = new SpdyConnection(serverSocket, { role: 'server' });
    cleanups.push(() => server.destroy());
    const replies = readFrames(clientSocket, 1);
    // An even id is the server's own: were it echoed, that echo would arrive first.
    clientSocket.write(
      Buffer.concat([controlFrame(FrameType.PING, 0, u32(2)), controlFrame(FrameType.PING, 0, u32(7))]),
    );
    const reply = control((await replies)[0]);
    assert.equal(reply.type, FrameType.PING);
    assert.deepEqual(reply.body, u32(7));
  });

  it('refuses a SYN_STREAM with the wrong parity or a reused id with RST_STREAM', async () => {
    const { serverSocket, clientSocket } = await socketPair();
    const server = new SpdyConnection(serverSocket, { role: 'server' });
    cleanups.push(() => server.destroy());
    const streams: SpdyStream[] = [];
    server.on('stream', (s) => streams.push(s));
    const writer = new StoredHeaderWriter();
    const syn = (id: number): Buffer => synStreamFrame(writer, id, { streamtype: `s${id}` });

    let frames = readFrames(clientSocket, 1);
    clientSocket.write(syn(2));
    let rst = control((await frames)[0]);
    assert.equal(rst.type, FrameType.RST_STREAM);
    assert.deepEqual(rst.body, Buffer.concat([u32(2), u32(RstStatus.PROTOCOL_ERROR)]));

    // The refused block was still inflated: the next one decodes against the same zlib stream.
    frames = readFrames(clientSocket, 1);
    clientSocket.write(syn(1));
    const reply = control((await frames)[0]);
    assert.equal(reply.type, FrameType.SYN_REPLY);
    assert.equal(reply.body.readUInt32BE(0), 1);
    assert.equal(streams.length, 1);
    assert.equal(streams[0]?.header('streamtype'), 's1');

    frames = readFrames(clientSocket, 1);
    clientSocket.write(syn(1));
    rst = control((await frames)[0]);
    assert.equal(rst.type, FrameType.RST_STREAM);
    assert.deepEqual(rst.body, Buffer.concat([u32(1), u32(RstStatus.PROTOCOL_ERROR)]));
    assert.equal(streams.length, 1);
  });

  it('reads header blocks compressed with the SPDY dictionary, as Go peers send them', async () => {
    const { serverSocket, clientSocket } = await socketPair();
    const server = new SpdyConnection(serverSocket, { role: 'server' });
    cleanups.push(() => server.destroy());
    const deflater = createDeflate({ dictionary: SPDY3_DICTIONARY });
    cleanups.push(() => deflater.destroy());
    const compress = async (block: Buffer): Promise<Buffer> => {
      deflater.write(block);
      await new Promise<void>((resolve) => deflater.flush(zlibConstants.Z_SYNC_FLUSH, () => resolve()));
      const parts: Buffer[] = [];
      for (let c = deflater.read() as Buffer | null; c !== null; c = deflater.read() as Buffer | null) {
        parts.push(c);
      }
      return Buffer.concat(parts);
    };
    const names: string[] = [];
    server.on('stream', (s) => names.push(s.header('streamtype') ?? ''));
    const replies = readFrames(clientSocket, 2);
    for (const [id, type] of [
      [1, 'stdin'],
      [3, 'stdout'],
    ] as const) {
      const block = await compress(encodeHeaderBlock(new Map([['streamtype', type]])));
      clientSocket.write(controlFrame(FrameType.SYN_STREAM, 0, synStreamBody(id, block)));
    }
    const frames = await replies;
    assert.deepEqual(
      frames.map((f) => control(f).type),
      [FrameType.SYN_REPLY, FrameType.SYN_REPLY],
    );
    assert.deepEqual(names, ['stdin', 'stdout']);
  });

  it('refuses streams beyond maxStreams', async () => {
    const pair = await spdyPair({ maxStreams: 1 });
    await openPair(pair);
    await assert.rejects(pair.client.openStream({ streamType: 'two' }), /refused/);
  });

  it('closes with GOAWAY: both sockets end and open streams see the end of data', async () => {
    const pair = await spdyPair();
    const { local, remote } = await openPair(pair);
    const ends = Promise.all([collect(local), collect(remote)]);
    const closes = Promise.all([closed(pair.server), closed(pair.client)]);
    pair.client.close();
    await closes;
    await ends;
    assert.ok(pair.server.isClosed);
    assert.ok(pair.client.isClosed);
    await assert.rejects(pair.client.openStream({ streamType: 'late' }), /closed/);
  });

  it('delivers data written just before close()', async () => {
    const pair = await spdyPair();
    pair.server.on('stream', (stream) => {
      stream.end('last words');
      pair.server.close();
    });
    const stream = await pair.client.openStream({ streamType: 'x' });
    assert.equal((await collect(stream)).toString(), 'last words');
  });

  it('closes an idle connection after idleTimeoutMs', async () => {
    const pair = await spdyPair({ idleTimeoutMs: 100 });
    const errors: Error[] = [];
    pair.server.on('error', (err) => errors.push(err));
    await closed(pair.server);
    assert.match(errors[0]?.message ?? '', /no traffic for 100 ms/);
    assert.ok(pair.server.isClosed);
  });

  it('carries 5 MB intact in both directions at once', async () => {
    const pair = await spdyPair();
    const { local, remote } = await openPair(pair);
    const up = randomBytes(5 * 1024 * 1024);
    const down = randomBytes(5 * 1024 * 1024);
    const atServer = collect(remote);
    const atClient = collect(local);
    local.end(up);
    remote.end(down);
    const [gotUp, gotDown] = await Promise.all([atServer, atClient]);
    assert.equal(gotUp.length, up.length);
    assert.equal(sha(gotUp), sha(up));
    assert.equal(gotDown.length, down.length);
    assert.equal(sha(gotDown), sha(down));
  });

  it('stops the writer while the reader does not read, then delivers everything', async () => {
    const pair = await spdyPair();
    const { local, remote } = await openPair(pair);
    const chunk = 1024 * 1024;
    const total = 50 * chunk;
    let acked = 0;
    const hash = createHash('sha256');
    const writing = (async () => {
      for (let i = 0; i < total / chunk; i++) {
        const data = Buffer.alloc(chunk, i & 0xff);
        hash.update(data);
        await new Promise<void>((resolve, reject) =>
          local.write(data, (err) => (err ? reject(err) : resolve())),
        );
        acked += chunk;
      }
      local.end();
    })();

    // Wait until the writer stalls: no progress for a while.
    let last = -1;
    for (let waited = 0; waited < 5000 && acked !== last; waited += 250) {
      last = acked;
      await sleep(250);
    }
    assert.ok(acked < total, `all ${acked} bytes were accepted with nobody reading`);
    assert.ok(remote.readableLength < 16 * 1024 * 1024, `stream buffered ${remote.readableLength} bytes`);
    assert.ok(
      pair.serverSocket.readableLength < 16 * 1024 * 1024,
      `socket buffered ${pair.serverSocket.readableLength} bytes`,
    );

    const received = createHash('sha256');
    let size = 0;
    remote.on('data', (c: Buffer) => {
      received.update(c);
      size += c.length;
    });
    await Promise.all([once(remote, 'end'), writing]);
    assert.equal(size, total);
    assert.equal(received.digest('hex'), hash.digest('hex'));
  });
});

describe('SpdyConnection against a misbehaving peer', () => {
  interface Raw {
    server: SpdyConnection;
    serverSocket: Socket;
    clientSocket: Socket;
    streams: SpdyStream[];
    errors: Error[];
    /** SYN_STREAM frames on the client's one header stream. */
    syn(id: number, headers?: Record<string, string>, flags?: number): Buffer;
  }

  /** A server connection whose peer is a raw socket speaking hand-built frames. */
  async function raw(opts: Partial<ConstructorParameters<typeof SpdyConnection>[1]> = {}): Promise<Raw> {
    const { serverSocket, clientSocket } = await socketPair();
    const server = new SpdyConnection(serverSocket, { role: 'server', ...opts });
    cleanups.push(() => server.destroy());
    const streams: SpdyStream[] = [];
    const errors: Error[] = [];
    server.on('stream', (s) => streams.push(s));
    server.on('error', (err) => errors.push(err));
    const writer = new StoredHeaderWriter();
    const syn = (id: number, headers: Record<string, string> = { streamType: 'data' }, flags = 0): Buffer =>
      synStreamFrame(writer, id, headers, flags);
    return { server, serverSocket, clientSocket, streams, errors, syn };
  }

  const ping = (id: number): Buffer => controlFrame(FrameType.PING, 0, u32(id));
  const rstBody = (id: number, status: number): Buffer => Buffer.concat([u32(id), u32(status)]);

  /** The connection still works: a PING sent now is answered (after `before` frames). */
  async function answersPing(peer: Raw, before: Buffer[] = [], expectBefore = 0): Promise<Frame[]> {
    const frames = readFrames(peer.clientSocket, expectBefore + 1);
    peer.clientSocket.write(Buffer.concat([...before, ping(99)]));
    const got = await frames;
    const last = control(got[got.length - 1]);
    assert.equal(last.type, FrameType.PING);
    assert.deepEqual(last.body, u32(99));
    return got.slice(0, -1);
  }

  /** The peer is sent GOAWAY with PROTOCOL_ERROR and the socket closes. */
  async function goesAway(peer: Raw, bytes: Buffer): Promise<void> {
    const frames = framesUntilEnd(peer.clientSocket);
    const serverClosed = closed(peer.server);
    peer.clientSocket.write(bytes);
    const got = await frames;
    const goaway = got.map(control).find((f) => f.type === FrameType.GOAWAY);
    assert.ok(goaway, `no GOAWAY among ${got.length} frames`);
    assert.equal(goaway.body.readUInt32BE(4), GoAwayStatus.PROTOCOL_ERROR);
    await serverClosed;
    assert.ok(peer.errors.length > 0, 'the failure was reported');
  }

  it(
    'takes a header block larger than zlib’s 16 KiB buffer, and the data after it',
    { timeout: 30_000 },
    async () => {
      const peer = await raw();
      const big = 'v'.repeat(40 * 1024);
      const replies = readFrames(peer.clientSocket, 1);
      peer.clientSocket.write(peer.syn(1, { streamType: 'data', big }));
      assert.equal(control((await replies)[0]).type, FrameType.SYN_REPLY);
      const stream = peer.streams[0];
      assert.ok(stream);
      assert.equal(stream.header('big'), big);

      const payload = randomBytes(8 * 1024 * 1024);
      const received = collect(stream);
      for (let at = 0; at < payload.length; at += 32 * 1024) {
        const last = at + 32 * 1024 >= payload.length;
        peer.clientSocket.write(dataFrame(1, last ? FLAG_FIN : 0, payload.subarray(at, at + 32 * 1024)));
      }
      assert.equal(sha(await received), sha(payload));
    },
  );

  it(
    'ends the session when a header block inflates past its bound (a zlib bomb)',
    { timeout: 30_000 },
    async () => {
      const peer = await raw();
      // 64 MB of zeros compress to about 64 KB: one frame under the control-frame bound.
      const bomb = deflateSync(Buffer.alloc(64 * 1024 * 1024), { level: 9 });
      assert.ok(bomb.length < MAX_CONTROL_FRAME_LENGTH);
      await goesAway(peer, controlFrame(FrameType.SYN_STREAM, 0, synStreamBody(1, bomb)));
      assert.match(peer.errors[0]?.message ?? '', new RegExp(`larger than ${MAX_HEADER_BLOCK}`));
      assert.equal(peer.streams.length, 0);
    },
  );

  it('ends the session on a header block that is not zlib', async () => {
    const peer = await raw();
    await goesAway(
      peer,
      controlFrame(FrameType.SYN_STREAM, 0, synStreamBody(1, Buffer.from('not zlib at all'))),
    );
  });

  it(
    'closes its side when the peer ends the connection, and ends the streams',
    { timeout: 30_000 },
    async () => {
      const peer = await raw();
      const replies = readFrames(peer.clientSocket, 1);
      peer.clientSocket.write(peer.syn(1));
      await replies;
      const stream = peer.streams[0];
      assert.ok(stream);
      const ended = collect(stream);
      const serverSocketClosed = once(peer.serverSocket, 'close');
      const serverClosed = closed(peer.server);
      peer.clientSocket.end();
      await Promise.all([serverSocketClosed, serverClosed, ended]);
    },
  );

  it('notices a peer that went away while it was not being read', { timeout: 30_000 }, async () => {
    const peer = await raw({ probeIntervalMs: 100 });
    const replies = readFrames(peer.clientSocket, 1);
    peer.clientSocket.write(peer.syn(1));
    await replies;
    // Nobody reads the stream: its buffer fills and the socket is no longer read.
    for (let i = 0; i < 64; i++) peer.clientSocket.write(dataFrame(1, 0, Buffer.alloc(32 * 1024)));
    await sleep(300);
    const serverClosed = closed(peer.server);
    peer.clientSocket.destroy();
    await serverClosed;
    assert.ok(peer.serverSocket.destroyed);
  });

  it(
    'stops reading a peer that does not read its PING answers, and closes it',
    { timeout: 30_000 },
    async () => {
      const backlog = 64 * 1024;
      const peer = await raw({ maxWriteBacklog: backlog, writeStallMs: 1000 });
      peer.clientSocket.pause();
      let most = 0;
      const sampler = setInterval(() => (most = Math.max(most, peer.serverSocket.writableLength)), 5);
      cleanups.push(() => clearInterval(sampler));
      const serverClosed = closed(peer.server);
      const flood = Buffer.concat(Array.from({ length: 10_000 }, (_, i) => ping(2 * i + 1)));
      for (let i = 0; i < 200 && !peer.server.isClosed; i++) {
        peer.clientSocket.write(flood);
        await sleep(1);
      }
      await serverClosed;
      // One socket read of PINGs (64 KiB, 5461 of them) may be answered past the bound.
      assert.ok(most <= backlog + 64 * 1024, `${most} bytes were left unsent`);
      assert.match(peer.errors[0]?.message ?? '', /took none of/);
    },
  );

  it('resets DATA for a stream never opened, and goes on', async () => {
    const peer = await raw();
    const [rst] = await answersPing(peer, [dataFrame(7, 0, Buffer.from('early'))], 1);
    assert.equal(control(rst).type, FrameType.RST_STREAM);
    assert.deepEqual(control(rst).body, rstBody(7, RstStatus.INVALID_STREAM));
    // A SYN_STREAM for that id is still taken afterwards.
    const reply = readFrames(peer.clientSocket, 1);
    peer.clientSocket.write(peer.syn(7));
    assert.equal(control((await reply)[0]).type, FrameType.SYN_REPLY);
  });

  it('resets a stream that gets DATA after its FIN, or DATA past the frame bound', async () => {
    const peer = await raw();
    const replies = readFrames(peer.clientSocket, 2);
    peer.clientSocket.write(Buffer.concat([peer.syn(1, { streamType: 'a' }, FLAG_FIN), peer.syn(3)]));
    await replies;
    const [first, second] = peer.streams;
    assert.ok(first && second);
    const [rst] = await answersPing(peer, [dataFrame(1, 0, Buffer.from('late'))], 1);
    assert.deepEqual(control(rst).body, rstBody(1, RstStatus.STREAM_ALREADY_CLOSED));
    assert.ok(first.destroyed);

    // The oversized frame's body is skipped as it comes: the PING after it is answered.
    const head = dataFrame(3, 0, Buffer.alloc(0));
    head.writeUIntBE(MAX_FRAME_LENGTH + 1, 5, 3);
    const [tooLarge] = await answersPing(peer, [head, Buffer.alloc(MAX_FRAME_LENGTH + 1)], 1);
    assert.deepEqual(control(tooLarge).body, rstBody(3, RstStatus.FRAME_TOO_LARGE));
    assert.ok(second.destroyed);
    assert.equal(peer.server.isClosed, false);
  });

  it('ignores SETTINGS, WINDOW_UPDATE and control frames of unknown types', async () => {
    const peer = await raw();
    await answersPing(peer, [
      controlFrame(FrameType.SETTINGS, 0, Buffer.concat([u32(1), u32(4), u32(100)])),
      controlFrame(FrameType.WINDOW_UPDATE, 0, Buffer.concat([u32(1), u32(1000)])),
      controlFrame(0, 0, Buffer.alloc(0)),
      controlFrame(0x7f, 0xff, randomBytes(100)),
      // A RST_STREAM for no stream at all is not answered (section 2.4.2).
      controlFrame(FrameType.RST_STREAM, 0, rstBody(41, RstStatus.CANCEL)),
    ]);
  });

  const sessionErrors: [string, (peer: Raw) => Buffer][] = [
    ['a PING of 8 bytes', () => controlFrame(FrameType.PING, 0, Buffer.alloc(8))],
    ['a RST_STREAM of 4 bytes', () => controlFrame(FrameType.RST_STREAM, 0, u32(1))],
    ['a GOAWAY of 4 bytes', () => controlFrame(FrameType.GOAWAY, 0, u32(0))],
    ['a SETTINGS whose count is wrong', () => controlFrame(FrameType.SETTINGS, 0, u32(1000))],
    ['a SYN_STREAM of 3 bytes', () => controlFrame(FrameType.SYN_STREAM, 0, Buffer.alloc(3))],
    ['DATA on stream 0', () => dataFrame(0, 0, Buffer.from('x'))],
    [
      'a control frame of SPDY/2',
      () => {
        const f = ping(1);
        f[1] = 2;
        return f;
      },
    ],
    [
      'a control frame whose length field is 16 MiB',
      () => {
        const f = controlFrame(FrameType.HEADERS, 0, Buffer.alloc(0));
        f.writeUIntBE(0xffffff, 5, 3);
        return f;
      },
    ],
    ['a SYN_STREAM whose id goes back', (peer) => Buffer.concat([peer.syn(5), peer.syn(3)])],
  ];
  for (const [what, frame] of sessionErrors) {
    it(`answers ${what} with GOAWAY PROTOCOL_ERROR and closes`, async () => {
      const peer = await raw();
      await goesAway(peer, frame(peer));
    });
  }

  it('refuses streams nobody listens for', async () => {
    const { serverSocket, clientSocket } = await socketPair();
    const server = new SpdyConnection(serverSocket, { role: 'server' });
    cleanups.push(() => server.destroy());
    const writer = new StoredHeaderWriter();
    const frames = readFrames(clientSocket, 1);
    clientSocket.write(synStreamFrame(writer, 1, {}));
    assert.deepEqual(control((await frames)[0]).body, rstBody(1, RstStatus.REFUSED_STREAM));
  });
});
