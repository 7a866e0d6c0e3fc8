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
  MAX_FRAME_LENGTH,
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
} from '../../src/spdy/frames.js';

const cleanups: (() => void)[] = [];

afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

function socketPair(): Promise<{ serverSocket: Socket; clientSocket: Socket }> {
  return sharedSocketPair((cleanup) => cleanups.push(cleanup));
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

/** Reads frames off a raw socket until `count` have arrived. */
function readFrames(socket: Socket, count: number): Promise<Frame[]> {
  return new Promise((resolve, reject) => {
    let buffered = Buffer.alloc(0);
    const frames: Frame[] = [];
    const onData = (chunk: Buffer): void => {
      buffered = Buffer.concat([buffered, chunk]);
      const decoded = decodeFrames(buffered);
      // The bodies are views into `buffered`, which is replaced, not mutated: they stay valid.
      frames.push(...decoded.frames);
      buffered = buffered.subarray(decoded.consumed);
      if (frames.length >= count) {
        socket.off('data', onData);
        socket.off('close', onClose);
        resolve(frames);
      }
    };
    const onClose = (): void => reject(new Error(`socket closed after ${frames.length} frames`));
    socket.on('data', onData);
    socket.on('close', onClose);
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

  it('decodes every complete frame and reports the bytes consumed', () => {
    const ping = controlFrame(FrameType.PING, 0, u32(9));
    const data = dataFrame(3, FLAG_FIN, Buffer.from('hello'));
    const { frames, consumed } = decodeFrames(Buffer.concat([ping, data]));
    assert.equal(consumed, ping.length + data.length);
    assert.deepEqual(frames, [
      { kind: 'control', type: FrameType.PING, flags: 0, body: u32(9) },
      { kind: 'data', streamId: 3, flags: FLAG_FIN, data: Buffer.from('hello') },
    ]);
  });

  it('leaves a partial frame for later', () => {
    const ping = controlFrame(FrameType.PING, 0, u32(9));
    const data = dataFrame(3, 0, Buffer.from('hello'));
    const whole = Buffer.concat([ping, data]);
    const cut = decodeFrames(whole.subarray(0, whole.length - 1));
    assert.equal(cut.frames.length, 1);
    assert.equal(cut.consumed, ping.length);
    // Less than a header is nothing at all.
    assert.deepEqual(decodeFrames(data.subarray(0, 7)), { frames: [], consumed: 0 });
    assert.deepEqual(decodeFrames(Buffer.alloc(0)), { frames: [], consumed: 0 });
  });

  it('rejects control frames of another SPDY version', () => {
    const frame = controlFrame(FrameType.PING, 0, u32(1));
    frame[1] = 2;
    assert.throws(() => decodeFrames(frame), SpdyProtocolError);
  });

  it('rejects an oversized length before the body arrived', () => {
    const head = dataFrame(1, 0, Buffer.alloc(0));
    head.writeUIntBE(MAX_FRAME_LENGTH + 1, 5, 3);
    assert.throws(() => decodeFrames(head), SpdyProtocolError);
    // The limit itself is allowed: only the wait for the body remains.
    head.writeUIntBE(MAX_FRAME_LENGTH, 5, 3);
    assert.deepEqual(decodeFrames(head), { frames: [], consumed: 0 });
  });

  it('builds SYN_STREAM and stream id bodies', () => {
    const syn = synStreamBody(0x80000003, Buffer.from('hb'));
    assert.deepEqual([...syn], [0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x68, 0x62]);
    assert.deepEqual([...streamIdBody(4, u32(5))], [0, 0, 0, 4, 0, 0, 0, 5]);
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
    const syn = (id: number): Buffer =>
      controlFrame(
        FrameType.SYN_STREAM,
        0,
        synStreamBody(id, writer.compress(encodeHeaderBlock(new Map([['streamtype', `s${id}`]])))),
      );

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
