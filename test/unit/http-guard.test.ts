/**
 * The guard both of berthd's HTTP listeners run behind (src/http/guard.ts) and the request-target
 * parser they route with (src/http/target.ts), on a real node HTTP server on 127.0.0.1 with
 * handlers made to fail: a throw ends one connection and the server goes on, the connection cap
 * closes the oldest idle connection first, pipelining is bounded, parse errors get their status.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, it } from 'node:test';
import { pino } from 'pino';
import { ConnectionGuard, HTTP_SERVER_OPTIONS, MAX_PENDING_REQUESTS, refuse } from '../../src/http/guard.js';
import { MAX_TARGET_CHARS, parseTarget } from '../../src/http/target.js';
import { rawExchange } from '../harness/hostile-http.js';
import { holdConnections, closeAll } from '../harness/listeners.js';
import { waitFor } from '../harness/wait.js';

const logger = pino({ level: 'silent' });
const servers: Server[] = [];

afterEach(() => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    server.close();
  }
});

async function guarded(maxConnections: number): Promise<{ guard: ConnectionGuard; port: number }> {
  const server = createServer(HTTP_SERVER_OPTIONS);
  servers.push(server);
  const guard = new ConnectionGuard(server, { name: 'test', maxConnections, logger });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { guard, port: (server.address() as AddressInfo).port };
}

const GET = (path: string): string => `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`;

describe('parseTarget', () => {
  it('takes the origin and absolute forms, and refuses what is neither', () => {
    assert.deepEqual(parseTarget('/exec/abc?port=1'), { path: '/exec/abc', query: 'port=1' });
    assert.deepEqual(parseTarget('//'), { path: '//', query: '' });
    assert.deepEqual(parseTarget('/a#frag?x'), { path: '/a', query: '' });
    assert.deepEqual(parseTarget('http://host:1/exec/abc?q'), { path: '/exec/abc', query: 'q' });
    assert.deepEqual(parseTarget('HTTPS://host'), { path: '/', query: '' });
    assert.equal((parseTarget('*') as { status: number }).status, 400);
    assert.equal((parseTarget('exec/abc') as { status: number }).status, 400);
    assert.equal((parseTarget(undefined) as { status: number }).status, 400);
    assert.equal((parseTarget(`/${'a'.repeat(MAX_TARGET_CHARS)}`) as { status: number }).status, 414);
  });
});

describe('ConnectionGuard', () => {
  it('turns a handler that throws into a 500 on that connection, and goes on serving', async () => {
    const { guard, port } = await guarded(10);
    guard.onRequest((req, res) => {
      if (req.url === '/throw') throw new Error('bug');
      if (req.url === '/reject') return Promise.reject(new Error('async bug'));
      if (req.url === '/half') {
        res.writeHead(200, { 'Content-Length': 10 });
        res.write('abc');
        return Promise.reject(new Error('bug after the head'));
      }
      refuse(res, 404, 'nothing here');
      return undefined;
    });
    assert.equal((await rawExchange(port, GET('/throw'))).status, 500);
    assert.equal((await rawExchange(port, GET('/reject'))).status, 500);
    const half = await rawExchange(port, GET('/half'));
    assert.equal(half.status, 200);
    assert.ok(half.closed, 'a failure after the head was sent cuts the connection');
    assert.equal((await rawExchange(port, GET('/fine'))).status, 404);
  });

  it('destroys the socket of an upgrade whose handler throws, and goes on serving', async () => {
    const { guard, port } = await guarded(10);
    guard.onUpgrade(() => {
      throw new Error('bug');
    });
    guard.onRequest((_req, res) => refuse(res, 404, 'nothing here'));
    const upgrade = await rawExchange(
      port,
      'GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n',
    );
    assert.equal(upgrade.status, undefined);
    assert.ok(upgrade.closed);
    assert.equal((await rawExchange(port, GET('/'))).status, 404);
  });

  it('closes the oldest idle connection for a new one past the cap, and the new one if all are busy', async () => {
    const { guard, port } = await guarded(3);
    let release = (): void => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    let holding = 0;
    guard.onRequest(async (req, res) => {
      if (req.url === '/hold') {
        holding++;
        await held;
      }
      refuse(res, 404, 'nothing here');
    });
    const idle = await holdConnections(port, 3);
    try {
      // Room is made for a request by closing an idle connection.
      assert.equal((await rawExchange(port, GET('/'))).status, 404);
      idle.forEach((s) => s.resume());
      await waitFor(async () => idle.some((s) => s.destroyed), 10_000, { what: 'an idle connection closed' });
      // Three requests being answered leave no idle one: a fourth connection is refused.
      const busy = [0, 1, 2].map(() => rawExchange(port, GET('/hold'), { windowMs: 10_000 }));
      await waitFor(async () => holding === 3, 10_000, { what: 'three requests being answered' });
      const refused = await rawExchange(port, GET('/'), { windowMs: 5_000 });
      assert.equal(refused.status, undefined);
      assert.ok(refused.closed);
      release();
      assert.deepEqual(
        (await Promise.all(busy)).map((r) => r.status),
        [404, 404, 404],
      );
    } finally {
      release();
      closeAll(idle);
    }
  });

  it('past the cap closes an upgraded connection only once its protocol says it serves nothing', async () => {
    const { guard, port } = await guarded(2);
    let upgraded = 0;
    guard.onUpgrade((req, socket) => {
      upgraded++;
      socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n');
      if (req.url === '/silent') guard.closableWhen(socket, () => true);
      if (req.url === '/working') guard.closableWhen(socket, () => false);
    });
    guard.onRequest((_req, res) => refuse(res, 404, 'nothing here'));
    const upgrade = async (path: string): Promise<Socket> => {
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => undefined);
      socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n`);
      await once(socket, 'data');
      return socket;
    };
    const working = await upgrade('/working');
    const silent = await upgrade('/silent');
    try {
      assert.equal(upgraded, 2);
      assert.equal((await rawExchange(port, GET('/'))).status, 404);
      await waitFor(async () => silent.destroyed || silent.readableEnded, 10_000, {
        what: 'the silent upgraded connection closed',
      });
      assert.ok(!working.destroyed && !working.readableEnded, 'the working upgraded connection was closed');
      // With only working upgraded connections left, the newcomer is the one refused.
      const other = await upgrade('/working');
      const refused = await rawExchange(port, GET('/'), { windowMs: 5_000 });
      assert.equal(refused.status, undefined);
      other.destroy();
    } finally {
      working.destroy();
      silent.destroy();
    }
  });

  it(`closes a connection with more than ${MAX_PENDING_REQUESTS} unanswered pipelined requests`, async () => {
    const { guard, port } = await guarded(10);
    let handled = 0;
    guard.onRequest(async (_req, res) => {
      handled++;
      await new Promise((resolve) => setTimeout(resolve, 50));
      res.end('ok');
    });
    const flood = await rawExchange(port, GET('/').repeat(5_000), { windowMs: 10_000 });
    assert.ok(flood.closed);
    assert.ok(handled <= MAX_PENDING_REQUESTS, `${handled} requests reached the handler`);
    // Up to the bound, pipelining is served in order.
    const last = 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
    const served = await rawExchange(port, GET('/').repeat(MAX_PENDING_REQUESTS - 1) + last, {
      windowMs: 10_000,
    });
    assert.equal(served.status, 200);
    assert.equal(served.rest.toString('latin1').split('HTTP/1.1 200').length, MAX_PENDING_REQUESTS);
  });

  it('answers parse errors with the status HTTP defines, and closes', async () => {
    const { guard, port } = await guarded(10);
    guard.onRequest((_req, res) => refuse(res, 404, 'nothing here'));
    const cases: [string, number][] = [
      [`GET /${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 414],
      [`GET / HTTP/1.1\r\nHost: x\r\nX: ${'a'.repeat(20_000)}\r\n\r\n`, 431],
      ['GET / HTTP/3.0\r\nHost: x\r\n\r\n', 505],
      ['BREW / HTTP/1.1\r\nHost: x\r\n\r\n', 501],
      ['G@T / HTTP/1.1\r\nHost: x\r\n\r\n', 400],
      ['GET / HTTP/1.1\r\nHost x\r\n\r\n', 400],
      ['CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: x\r\n\r\n', 405],
    ];
    for (const [request, status] of cases) {
      const res = await rawExchange(port, request);
      assert.equal(res.status, status, request.slice(0, 40));
      assert.ok(res.closed, request.slice(0, 40));
    }
  });
});
