/**
 * The streaming protocols above the transports: single-use tokens, the status on the error
 * stream, Kubernetes' WebSocket channel framing, and remotecommand sessions over SPDY and
 * WebSocket, each between real peers on 127.0.0.1.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Readable } from 'node:stream';
import { afterEach, describe, it } from 'node:test';

import { WebSocket, WebSocketServer } from 'ws';

import { SpdyConnection, type SpdyStream } from '../../src/spdy/connection.js';
import { channelSocket } from '../../src/streaming/channels.js';
import { spdySession, webSocketSession, type SessionOptions } from '../../src/streaming/remotecommand.js';
import {
  encodeStatus,
  exitCodeStatus,
  internalErrorStatus,
  successStatus,
  type RemoteStatus,
} from '../../src/streaming/status.js';
import { TokenCache } from '../../src/streaming/tokens.js';
import { socketPair } from '../harness/sockets.js';
import type { TerminalSize } from '../../src/streaming/types.js';

/** How long a session waits for the client's streams where they all come: a bound for a hang. */
const SESSION_BOUND_MS = 10_000;

const cleanups: (() => void)[] = [];

afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

function collect(stream: Readable): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    stream.on('data', (chunk: Buffer) => parts.push(chunk));
    stream.once('end', () => resolve(Buffer.concat(parts)));
    stream.once('error', reject);
  });
}

/** Resolves on 'close'; unlike events.once it does not reject when an 'error' comes first. */
function closed(emitter: Readable | SpdyConnection): Promise<void> {
  return new Promise((resolve) => emitter.once('close', () => resolve()));
}

describe('TokenCache', () => {
  it('hands out URL-safe tokens that can be used once', () => {
    const cache = new TokenCache<string>(60_000);
    cleanups.push(() => cache.clear());
    const token = cache.insert('exec');
    assert.match(token, /^[A-Za-z0-9_-]{20,}$/);
    assert.notEqual(cache.insert('other'), token);
    assert.equal(cache.consume(token), 'exec');
    assert.equal(cache.consume(token), undefined);
    assert.equal(cache.consume('never-issued'), undefined);
  });

  it('forgets tokens once the TTL passed', () => {
    let now = 1_000;
    const cache = new TokenCache<string>(500, { now: () => now });
    const early = cache.insert('early');
    const late = cache.insert('late');
    now = 1_499;
    assert.equal(cache.consume(early), 'early');
    now = 1_500;
    assert.equal(cache.consume(late), undefined);

    cache.insert('swept');
    assert.equal(cache.size, 1);
    now = 2_000;
    cache.insert('sweeps the expired one');
    assert.equal(cache.size, 1);
    cache.clear();
  });

  it('drops expired entries by itself, with nobody looking them up', async () => {
    const cache = new TokenCache<string>(30, { weigh: (v) => v.length });
    cache.insert('a'.repeat(1000));
    cache.insert('b'.repeat(1000));
    assert.equal(cache.bytes, 2000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(cache.size, 0);
    assert.equal(cache.bytes, 0);
  });

  it('evicts the oldest entry when full', () => {
    const cache = new TokenCache<number>(60_000, { maxEntries: 2 });
    const first = cache.insert(1);
    const second = cache.insert(2);
    const third = cache.insert(3);
    assert.equal(cache.size, 2);
    assert.equal(cache.consume(first), undefined);
    assert.equal(cache.consume(second), 2);
    assert.equal(cache.consume(third), 3);
    cache.clear();
  });

  it('bounds the bytes it holds: the oldest go first, a value over the bound is refused', () => {
    const cache = new TokenCache<string>(60_000, { weigh: (v) => v.length, maxBytes: 2500 });
    const first = cache.insert('a'.repeat(1000));
    const second = cache.insert('b'.repeat(1000));
    const third = cache.insert('c'.repeat(1000));
    assert.equal(cache.bytes, 2000);
    assert.equal(cache.consume(first), undefined);
    assert.equal(cache.consume(second)?.length, 1000);
    assert.equal(cache.consume(third)?.length, 1000);
    assert.throws(() => cache.insert('d'.repeat(2501)), { name: 'ResourceExhaustedError' });
    assert.equal(cache.bytes, 0);
    cache.clear();
  });
});

describe('remotecommand status', () => {
  it('builds the success, exit code and internal error shapes', () => {
    assert.deepEqual(successStatus(), { metadata: {}, status: 'Success' });
    assert.deepEqual(exitCodeStatus(3), {
      metadata: {},
      status: 'Failure',
      message: 'command terminated with non-zero exit code: exit status 3',
      reason: 'NonZeroExitCode',
      details: { causes: [{ reason: 'ExitCode', message: '3' }] },
    });
    const internal = internalErrorStatus('boom');
    assert.equal(internal.status, 'Failure');
    assert.equal(internal.reason, 'InternalError');
    assert.equal(internal.code, 500);
    assert.equal(internal.message, 'Internal error occurred: boom');
    assert.deepEqual(internal.details, { causes: [{ message: 'boom' }] });
  });

  it('encodes JSON for v4 and later, text before', () => {
    const failure = exitCodeStatus(3);
    assert.deepEqual(JSON.parse(encodeStatus(failure, true).toString()), failure);
    assert.deepEqual(JSON.parse(encodeStatus(successStatus(), true).toString()), successStatus());
    assert.equal(encodeStatus(failure, false).toString(), failure.message);
    assert.equal(encodeStatus(successStatus(), false).length, 0);
  });
});

// --- WebSocket -----------------------------------------------------------------------------

interface WsPair {
  server: WebSocket;
  client: WebSocket;
}

async function wsPair(protocol?: string): Promise<WsPair> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  try {
    await once(wss, 'listening');
    const accepted = once(wss, 'connection');
    const port = (wss.address() as AddressInfo).port;
    const client = new WebSocket(`ws://127.0.0.1:${port}`, protocol ? [protocol] : []);
    cleanups.push(() => client.terminate());
    const [[server]] = (await Promise.all([accepted, once(client, 'open')])) as [[WebSocket], unknown[]];
    cleanups.push(() => server.terminate());
    return { server, client };
  } finally {
    // The one connection is all a test needs; the listener must not keep the runner alive.
    wss.close();
  }
}

interface Message {
  data: Buffer;
  isBinary: boolean;
}

/** Queues every message the client receives, so that none is missed between awaits. */
function inbox(ws: WebSocket): () => Promise<Message> {
  const queued: Message[] = [];
  const waiting: ((m: Message) => void)[] = [];
  ws.on('message', (data: Buffer, isBinary: boolean) => {
    const message = { data, isBinary };
    const waiter = waiting.shift();
    if (waiter) waiter(message);
    else queued.push(message);
  });
  return () => {
    const next = queued.shift();
    if (next) return Promise.resolve(next);
    return new Promise((resolve) => waiting.push(resolve));
  };
}

const bytes = (channel: number, text = ''): Buffer =>
  Buffer.concat([Buffer.from([channel]), Buffer.from(text)]);

describe('channelSocket', () => {
  it('frames binary messages with the channel byte', async () => {
    const { server, client } = await wsPair();
    const next = inbox(client);
    channelSocket(server, false, false, 5).writable(1).write('x');
    const message = await next();
    assert.equal(message.isBinary, true);
    assert.deepEqual([...message.data], [1, 0x78]);
  });

  it('frames base64 messages as text: the channel digit, then base64', async () => {
    const { server, client } = await wsPair();
    const next = inbox(client);
    channelSocket(server, true, false, 5).writable(1).write('x');
    const message = await next();
    assert.equal(message.isBinary, false);
    assert.equal(message.data.toString(), '1' + Buffer.from('x').toString('base64'));
  });

  it('routes the peer’s messages to the readable of their channel', async () => {
    const { server, client } = await wsPair();
    const channels = channelSocket(server, false, false, 5);
    const stdin = channels.readable(0);
    const resize = channels.readable(4);
    const got: string[] = [];
    stdin.on('data', (c: Buffer) => got.push(`0:${c.toString()}`));
    resize.on('data', (c: Buffer) => got.push(`4:${c.toString()}`));
    // Channel 3 is one of ours that nobody reads from, and an empty message carries nothing: both
    // are dropped.
    client.send(bytes(3, 'nobody'));
    client.send(bytes(0));
    client.send(bytes(0, 'hello'));
    client.send(bytes(4, '{}'));
    client.close();
    await Promise.all([once(stdin, 'end'), once(resize, 'end')]);
    assert.deepEqual(got, ['0:hello', '4:{}']);
  });

  it('decodes base64 text messages from the peer', async () => {
    const { server, client } = await wsPair();
    const stdin = channelSocket(server, true, false, 5).readable(0);
    const received = collect(stdin);
    client.send('0' + Buffer.from('hi there').toString('base64'));
    client.close();
    assert.equal((await received).toString(), 'hi there');
  });

  it('ends a readable on [255, channel] when closing is supported', async () => {
    const { server, client } = await wsPair();
    const channels = channelSocket(server, false, true, 5);
    const stdin = channels.readable(0);
    const received = collect(stdin);
    client.send(bytes(0, 'abc'));
    client.send(Buffer.from([255, 0]));
    assert.equal((await received).toString(), 'abc');
    assert.equal(server.readyState, WebSocket.OPEN);
  });

  it('closes with 1002 on a channel the session does not have', { timeout: 30_000 }, async () => {
    for (const [base64, supportsClose, message] of [
      [false, false, bytes(5, 'past the last channel')],
      // Without v5's closing, [255, 0] is a message on channel 255.
      [false, false, Buffer.from([255, 0])],
      [false, true, Buffer.from([255, 9])],
      [false, true, Buffer.from([255, 0, 0])],
      [true, false, '/' + Buffer.from('below the digits').toString('base64')],
      [true, false, 'z' + Buffer.from('no digit').toString('base64')],
    ] as const) {
      const { server, client } = await wsPair();
      const stdin = channelSocket(server, base64, supportsClose, 5).readable(0);
      const received = collect(stdin);
      const closing = once(client, 'close');
      client.send(message);
      client.send(bytes(0, 'after'));
      const [code] = (await closing) as [number];
      assert.equal(code, 1002, `${String(message)}`);
      assert.equal((await received).toString(), '', 'nothing after the violation is passed on');
    }
  });

  it('survives data for a channel the peer already closed', async () => {
    const { server, client } = await wsPair();
    const channels = channelSocket(server, false, true, 5);
    const stdin = channels.readable(0);
    const marker = channels.readable(4);
    const errors: Error[] = [];
    stdin.on('error', (err) => errors.push(err));
    // Nobody reads stdin yet, as when the process has not started: its end is not consumed.
    client.send(Buffer.from([255, 0]));
    client.send(bytes(0, 'x'));
    // Messages arrive in order: once this one is in, the two before it were handled.
    client.send(bytes(4, 'sync'));
    await once(marker, 'data');
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(errors, []);
  });

  it('ends every readable when the socket closes, and refuses to send after', async () => {
    const { server, client } = await wsPair();
    const channels = channelSocket(server, false, false, 5);
    const ends = [0, 4].map((c) => once(channels.readable(c).resume(), 'end'));
    client.close();
    await Promise.all(ends);
    await assert.rejects(channels.send(1, Buffer.from('late')), /websocket closed/);
  });
});

describe('webSocketSession', () => {
  const opts: SessionOptions = { stdin: true, stdout: true, stderr: true, tty: false };

  it('announces itself, carries output, and ends with a JSON status on v4', async () => {
    const { server, client } = await wsPair();
    const next = inbox(client);
    const closing = once(client, 'close');
    const session = webSocketSession(server, 'v4.channel.k8s.io', opts);
    // kubelet's first message: empty, on stdout.
    assert.deepEqual([...(await next()).data], [1]);
    session.io.stdout?.write('out');
    session.io.stderr?.write('err');
    assert.deepEqual((await next()).data, bytes(1, 'out'));
    assert.deepEqual((await next()).data, bytes(2, 'err'));
    await session.finish(exitCodeStatus(2));
    const status = await next();
    assert.equal(status.data[0], 3);
    assert.deepEqual(JSON.parse(status.data.subarray(1).toString()) as RemoteStatus, exitCodeStatus(2));
    const [code] = (await closing) as [number];
    assert.equal(code, 1000);
  });

  it('sends the status as base64 text on base64.channel.k8s.io', async () => {
    const { server, client } = await wsPair();
    const next = inbox(client);
    const session = webSocketSession(server, 'base64.channel.k8s.io', opts);
    assert.equal((await next()).data.toString(), '1');
    await session.finish(exitCodeStatus(2));
    const status = await next();
    assert.equal(status.isBinary, false);
    assert.equal(
      status.data.toString(),
      '3' + Buffer.from(exitCodeStatus(2).message ?? '').toString('base64'),
    );
  });

  it('feeds stdin, closes it on v5, and reads resizes from channel 4', async () => {
    const { server, client } = await wsPair();
    const session = webSocketSession(server, 'v5.channel.k8s.io', { ...opts, tty: true });
    assert.equal(session.io.stderr, null);
    const sizes: TerminalSize[] = [];
    session.io.resize.on('resize', (s) => sizes.push(s));
    assert.ok(session.io.stdin);
    const stdin = collect(session.io.stdin);
    client.send(bytes(4, '{"Width":80,"Height":24}'));
    client.send(bytes(4, '{"Width":0,"Height":24}'));
    client.send(bytes(0, 'ls\n'));
    client.send(Buffer.from([255, 0]));
    assert.equal((await stdin).toString(), 'ls\n');
    assert.deepEqual(sizes, [{ width: 80, height: 24 }]);
    assert.deepEqual(session.io.resize.current, { width: 80, height: 24 });
  });

  it('aborts the signal when the client goes away', async () => {
    const { server, client } = await wsPair();
    const session = webSocketSession(server, 'v4.channel.k8s.io', opts);
    const aborted = once(session.io.signal, 'abort');
    client.close();
    await aborted;
    assert.ok(session.io.signal.aborted);
  });
});

// --- SPDY ----------------------------------------------------------------------------------

interface SpdyPair {
  server: SpdyConnection;
  client: SpdyConnection;
}

async function spdyPair(): Promise<SpdyPair> {
  const { serverSocket, clientSocket } = await socketPair((cleanup) => cleanups.push(cleanup));
  const server = new SpdyConnection(serverSocket, { role: 'server' });
  const client = new SpdyConnection(clientSocket, { role: 'client' });
  cleanups.push(() => {
    server.destroy();
    client.destroy();
  });
  return { server, client };
}

/** Opens the client's streams in order, error first, as kubectl does. */
async function openStreams(client: SpdyConnection, types: string[]): Promise<Map<string, SpdyStream>> {
  const streams = new Map<string, SpdyStream>();
  for (const type of types) streams.set(type, await client.openStream({ streamType: type }));
  return streams;
}

function stream(streams: Map<string, SpdyStream>, type: string): SpdyStream {
  const s = streams.get(type);
  assert.ok(s, `no ${type} stream`);
  return s;
}

describe('spdySession', () => {
  const opts: SessionOptions = { stdin: true, stdout: true, stderr: true, tty: false };

  it('waits for the error, stdin, stdout and stderr streams', async () => {
    const { server, client } = await spdyPair();
    const pending = spdySession(server, 'v4.channel.k8s.io', opts, SESSION_BOUND_MS);
    const streams = await openStreams(client, ['error', 'stdin', 'stdout', 'stderr']);
    const session = await pending;
    assert.equal(session.io.tty, false);
    assert.ok(session.io.stdin && session.io.stdout && session.io.stderr);

    const stdin = collect(session.io.stdin);
    stream(streams, 'stdin').end('input');
    assert.equal((await stdin).toString(), 'input');

    const stdout = stream(streams, 'stdout');
    session.io.stdout.write('output');
    const [chunk] = (await once(stdout, 'data')) as [Buffer];
    assert.equal(chunk.toString(), 'output');
  });

  it('ends with the outputs closed, a JSON status on the error stream, then the connection', async () => {
    const { server, client } = await spdyPair();
    const pending = spdySession(server, 'v4.channel.k8s.io', opts, SESSION_BOUND_MS);
    const streams = await openStreams(client, ['error', 'stdin', 'stdout', 'stderr']);
    const session = await pending;
    const [stdout, stderr, error] = ['stdout', 'stderr', 'error'].map((t) => collect(stream(streams, t)));
    const bothClosed = Promise.all([closed(client), closed(server)]);
    session.io.stdout?.write('partial');
    await session.finish(exitCodeStatus(2));
    assert.equal((await stdout)?.toString(), 'partial');
    assert.equal((await stderr)?.length, 0);
    assert.deepEqual(JSON.parse((await error)?.toString() ?? '') as RemoteStatus, exitCodeStatus(2));
    await bothClosed;
  });

  it('writes the text message, not JSON, on channel.k8s.io', async () => {
    const { server, client } = await spdyPair();
    const pending = spdySession(server, 'channel.k8s.io', opts, SESSION_BOUND_MS);
    const streams = await openStreams(client, ['error', 'stdin', 'stdout', 'stderr']);
    const session = await pending;
    const error = collect(stream(streams, 'error'));
    await session.finish(exitCodeStatus(2));
    assert.equal((await error).toString(), exitCodeStatus(2).message);
  });

  it('writes nothing on the error stream for success on channel.k8s.io', async () => {
    const { server, client } = await spdyPair();
    const pending = spdySession(server, 'channel.k8s.io', { ...opts, stdin: false }, SESSION_BOUND_MS);
    const streams = await openStreams(client, ['error', 'stdout', 'stderr']);
    const session = await pending;
    assert.equal(session.io.stdin, null);
    const error = collect(stream(streams, 'error'));
    await session.finish(successStatus());
    assert.equal((await error).length, 0);
  });

  it('reads back-to-back JSON sizes from the resize stream with a terminal on v4', async () => {
    const { server, client } = await spdyPair();
    const pending = spdySession(server, 'v4.channel.k8s.io', { ...opts, tty: true }, SESSION_BOUND_MS);
    // With a terminal there is no stderr stream: its output is on stdout.
    const streams = await openStreams(client, ['error', 'stdin', 'stdout', 'resize']);
    const session = await pending;
    assert.equal(session.io.stderr, null);
    const sizes: TerminalSize[] = [];
    const two = new Promise<void>((resolve) =>
      session.io.resize.on('resize', (s) => {
        sizes.push(s);
        if (sizes.length === 2) resolve();
      }),
    );
    const resize = stream(streams, 'resize');
    // Split mid-object: a size may arrive in pieces.
    resize.write('{"Width":80,"Height":24}{"Width":1');
    resize.write('00,"Height":30}');
    await two;
    assert.deepEqual(sizes, [
      { width: 80, height: 24 },
      { width: 100, height: 30 },
    ]);
    assert.deepEqual(session.io.resize.current, { width: 100, height: 30 });
  });

  it(
    'drops what a client sends on its output streams: stdin behind it still arrives',
    { timeout: 20_000 },
    async () => {
      const { server, client } = await spdyPair();
      const pending = spdySession(server, 'v4.channel.k8s.io', opts, 2000);
      const streams = await openStreams(client, ['error', 'stdin', 'stdout', 'stderr']);
      const session = await pending;
      assert.ok(session.io.stdin);
      const stdin = collect(session.io.stdin);
      // Far more than a stream buffers: were it kept, the connection would stop reading there.
      for (const type of ['error', 'stdout', 'stderr'])
        stream(streams, type).write(Buffer.alloc(1024 * 1024));
      stream(streams, 'stdin').end('after all that');
      assert.equal((await stdin).toString(), 'after all that');
    },
  );

  it('resets streams of a type it did not ask for', async () => {
    const { server, client } = await spdyPair();
    const pending = spdySession(
      server,
      'v4.channel.k8s.io',
      { ...opts, stdin: false, stderr: false },
      SESSION_BOUND_MS,
    );
    const bogus = await client.openStream({ streamType: 'resize' });
    const bogusClosed = closed(bogus);
    await openStreams(client, ['error', 'stdout']);
    const session = await pending;
    await bogusClosed;
    assert.ok(bogus.destroyed);
    assert.equal(session.io.stdin, null);
    assert.equal(session.io.stderr, null);
  });

  it('gives up after the timeout when a stream never comes', async () => {
    const { server, client } = await spdyPair();
    // Short, as the wait is the point; long enough for the two streams on a busy machine.
    const pending = spdySession(server, 'v4.channel.k8s.io', opts, 1_000);
    await openStreams(client, ['error', 'stdout']);
    await assert.rejects(pending, /timed out waiting for client streams \(have error, stdout\)/);
    assert.ok(server.isClosed);
  });

  it('fails when the client leaves before opening its streams', async () => {
    const { server, client } = await spdyPair();
    const pending = spdySession(server, 'v4.channel.k8s.io', opts, SESSION_BOUND_MS);
    await openStreams(client, ['error']);
    client.close();
    await assert.rejects(pending, /closed the connection/);
  });

  it('aborts the signal when the client goes away mid-session', async () => {
    const { server, client } = await spdyPair();
    const pending = spdySession(server, 'v4.channel.k8s.io', opts, SESSION_BOUND_MS);
    await openStreams(client, ['error', 'stdin', 'stdout', 'stderr']);
    const session = await pending;
    const aborted = once(session.io.signal, 'abort');
    client.destroy();
    await aborted;
    assert.ok(session.io.signal.aborted);
  });
});
