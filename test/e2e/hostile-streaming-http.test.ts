/**
 * Hostile bytes against berthd's streaming server, below SPDY: request lines and headers no client
 * library would write, upgrades with valid tokens and bad headers, and WebSocket frames written by
 * hand after a valid upgrade to an exec in a real container (test/harness/hostile-http.ts). After
 * every case berthd must run and answer a CRI Version call; a refused request gets the status HTTP
 * defines for it and its connection closed; a broken WebSocket session is closed with RFC 6455's
 * code for the fault and its process ends. Needs root; traffic stays on loopback.
 *
 * BERTH_HOSTILE_SEED=<n> runs other random cases.
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { processesMentioning } from '../../src/process/index.js';
import { STREAM_CLOSE } from '../../src/streaming/channels.js';
import { Rng, hostileSeed } from '../harness/hostile.js';
import {
  CLOSE_WINDOW_MS,
  RESET_MAY_LOSE_ANSWER_BYTES,
  headerCases,
  isRefusal,
  rawExchange,
  requestLineCases,
  type HttpCase,
} from '../harness/hostile-http.js';
import { awaitClose, frameCases, wsHandshake, type FrameCase } from '../harness/hostile-websocket.js';
import { useListenerTarget } from '../harness/listeners.js';
import { inPool } from '../harness/pool.js';
import { registrySkip } from '../harness/skip.js';
import { channelText, wsConnect } from '../harness/streaming.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 400_000;
/** A token of the right shape that was never handed out. */
const UNKNOWN_TOKEN = 'AAAAAAAAAAAAAAAAAAAAAA';

describe('hostile HTTP on the streaming server', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  const seed = hostileSeed();
  const target = useListenerTarget();
  const failures: string[] = [];

  function fail(where: string, problem: string): void {
    failures.push(`${where}: ${problem}`);
  }

  function report(what: string): void {
    assert.deepEqual(failures.splice(0), [], `${what}; seed ${seed} (set BERTH_HOSTILE_SEED to change it)`);
  }

  /** Sends one case and checks its answer; berthd's health is checked after it. */
  async function sendCase(c: HttpCase, where: string): Promise<void> {
    const res = await rawExchange(target().streamingPort, c.bytes, {
      // An unfinished request is only sent: the slow-client test checks that it is cut off.
      windowMs: c.incomplete ? 1_000 : CLOSE_WINDOW_MS,
    });
    if (c.incomplete) return;
    const mayLose = c.bytes.length > RESET_MAY_LOSE_ANSWER_BYTES && res.status === undefined && res.closed;
    if (!mayLose) {
      if (c.expect && !c.expect.includes(res.status ?? 0)) {
        fail(
          where,
          `status ${res.status ?? 'none'}, want ${c.expect.join(' or ')}: ${res.head.split('\r\n')[0] ?? ''}`,
        );
      } else if (!c.expect && !isRefusal(res.status)) {
        fail(where, `status ${res.status ?? 'none'}, want a refusal (4xx or 5xx)`);
      }
    }
    if (!res.closed) fail(where, `connection still open after ${CLOSE_WINDOW_MS} ms`);
  }

  async function fuzz(cases: HttpCase[], kind: string): Promise<void> {
    await inPool(cases, 8, async (c) => {
      const where = `${kind} ${c.label}`;
      await sendCase(c, where);
      await target().assertServing(where);
    });
    report(`${kind}: ${cases.length} cases`);
  }

  it('answers GET // with a 404 and keeps serving (it used to end berthd)', async () => {
    const res = await rawExchange(target().streamingPort, 'GET // HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.equal(res.status, 404, res.head);
    assert.ok(res.closed, 'the connection is closed after the answer');
    await target().assertServing('GET //');
    // An absolute-form target routes like its path: a real token still works through one.
    const url = new URL(await target().execUrl(['echo', 'absolute']));
    const absolute = await rawExchange(
      target().streamingPort,
      `GET http://127.0.0.1${url.pathname} HTTP/1.1\r\nHost: x\r\n\r\n`,
    );
    assert.equal(absolute.status, 400, 'a known token without an upgrade');
    assert.match(absolute.rest.toString(), /not an upgrade/);
  });

  it('refuses hostile request lines with the status HTTP defines', async () => {
    await fuzz(requestLineCases(new Rng(seed), `/exec/${UNKNOWN_TOKEN}`), 'request line');
  });

  it('refuses hostile headers with the status HTTP defines', async () => {
    await fuzz(headerCases(new Rng(seed + 1), `/exec/${UNKNOWN_TOKEN}`), 'headers');
  });

  it('refuses an upgrade with a valid token and bad headers, and starts nothing', async () => {
    const marker = String(randomInt(100_000_000, 999_999_999));
    const execPath = async (): Promise<string> =>
      new URL(await target().execUrl(['sleep', marker], { stdin: true })).pathname;
    const spdy = (path: string, extra: string[]): string =>
      [`POST ${path} HTTP/1.1`, 'Host: x', 'Connection: Upgrade', 'Upgrade: SPDY/3.1', ...extra, '', ''].join(
        '\r\n',
      );
    const cases: { label: string; request: (path: string) => string | Buffer; expect: number }[] = [
      { label: 'no upgrade', request: (p) => `GET ${p} HTTP/1.1\r\nHost: x\r\n\r\n`, expect: 400 },
      { label: 'DELETE', request: (p) => `DELETE ${p} HTTP/1.1\r\nHost: x\r\n\r\n`, expect: 405 },
      {
        label: 'upgrade h2c',
        request: (p) => `GET ${p} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n`,
        expect: 400,
      },
      { label: 'spdy without protocol', request: (p) => spdy(p, []), expect: 400 },
      {
        label: 'spdy protocol v9',
        request: (p) => spdy(p, ['X-Stream-Protocol-Version: v9.channel.k8s.io']),
        expect: 403,
      },
      {
        label: 'spdy protocol 10k',
        request: (p) => spdy(p, [`X-Stream-Protocol-Version: ${'a,'.repeat(5_000)}`]),
        expect: 403,
      },
      {
        label: 'ws no key',
        request: (p) => wsHandshake(p, ['v5.channel.k8s.io'], ['Sec-WebSocket-Key: ']),
        expect: 400,
      },
      {
        label: 'ws bad key',
        request: (p) => wsHandshake(p, ['v5.channel.k8s.io'], ['Sec-WebSocket-Key: x']),
        expect: 400,
      },
      {
        label: 'ws version 99',
        request: (p) => wsHandshake(p, ['v5.channel.k8s.io'], ['Sec-WebSocket-Version: 99']),
        expect: 400,
      },
      { label: 'ws protocol v9', request: (p) => wsHandshake(p, ['v9.channel.k8s.io']), expect: 400 },
      { label: 'ws protocol garbage', request: (p) => wsHandshake(p, [',,, ;;; \u00ff']), expect: 400 },
      {
        label: 'ws protocol 10k',
        request: (p) =>
          wsHandshake(
            p,
            Array.from({ length: 2_000 }, () => 'p'),
          ),
        expect: 400,
      },
      {
        label: 'ws POST',
        request: (p) =>
          Buffer.from(
            wsHandshake(p, ['v5.channel.k8s.io']).toString('latin1').replace(/^GET/, 'POST'),
            'latin1',
          ),
        expect: 405,
      },
    ];
    for (const c of cases) {
      const res = await rawExchange(target().streamingPort, c.request(await execPath()), {
        windowMs: CLOSE_WINDOW_MS,
      });
      if (res.status !== c.expect)
        fail(c.label, `status ${res.status ?? 'none'}, want ${c.expect}: ${res.head}`);
      if (!res.closed) fail(c.label, 'connection left open');
      await target().assertServing(c.label);
    }
    const pfPath = async (): Promise<string> => new URL(await target().portForwardUrl([80])).pathname;
    for (const query of ['port=abc', 'port=99999', 'port=81', 'port=0', `port=${'9'.repeat(5_000)}`]) {
      const res = await rawExchange(
        target().streamingPort,
        wsHandshake(`${await pfPath()}?${query}`, ['v4.channel.k8s.io']),
        {
          windowMs: CLOSE_WINDOW_MS,
        },
      );
      const want = query.length > 4_000 ? 414 : 400;
      if (res.status !== want)
        fail(`portforward ${query.slice(0, 20)}`, `status ${res.status ?? 'none'}, want ${want}`);
      await target().assertServing(`portforward ${query.slice(0, 20)}`);
    }
    report('valid tokens with bad headers');
    assert.deepEqual(await processesMentioning(marker), [], 'a refused upgrade started its command');
  });

  it('closes WebSocket sessions that send hostile frames with the right code, and ends their process', async () => {
    const cases = frameCases(new Rng(seed + 2));
    await inPool(cases, 4, (c) => frameCase(c));
    report(`WebSocket frames: ${cases.length} cases`);
  });

  async function frameCase(c: FrameCase): Promise<void> {
    const where = `frames ${c.label}`;
    const marker = String(randomInt(100_000_000, 999_999_999));
    const url = new URL(await target().execUrl(['sleep', marker], { stdin: true }));
    const protocol = c.base64 ? 'v4.base64.channel.k8s.io' : 'v5.channel.k8s.io';
    const upgraded = await rawExchange(target().streamingPort, wsHandshake(url.pathname, [protocol]), {
      keepOpen: true,
      windowMs: CLOSE_WINDOW_MS,
    });
    if (upgraded.status !== 101) {
      fail(where, `upgrade answered ${upgraded.status ?? 'nothing'}: ${upgraded.head}`);
      upgraded.socket.destroy();
      return;
    }
    const { socket } = upgraded;
    // The session runs once its process does: wait for it, so the case checks that it ends.
    await waitFor(async () => (await processesMentioning(marker)).length > 0, 30_000, {
      what: `${where}: sleep ${marker}`,
    });
    socket.on('error', () => undefined);
    const closing = awaitClose(socket, upgraded.rest, CLOSE_WINDOW_MS);
    socket.write(c.frames);
    // Random bytes may leave a frame unfinished: the client's end makes the server give up on it.
    if (c.label.startsWith('random')) socket.end();
    const { code, closed } = await closing;
    socket.destroy();
    if (code === undefined && !closed) fail(where, `no close within ${CLOSE_WINDOW_MS} ms`);
    else if (!c.expect.includes(code))
      fail(where, `closed with ${code ?? 'no close frame'}, want ${c.expect.join(' or ')}`);
    try {
      await waitFor(async () => (await processesMentioning(marker)).length === 0, 30_000);
    } catch {
      fail(where, `the exec'd process (sleep ${marker}) outlived its session`);
    }
    await target().assertServing(where);
  }

  it('ends the exec of a WebSocket client that goes away while its command leaves stdin unread', async () => {
    const marker = String(randomInt(100_000_000, 999_999_999));
    const session = await wsConnect(await target().execUrl(['sleep', marker], { stdin: true }), [
      'v5.channel.k8s.io',
    ]);
    session.ws.on('error', () => undefined);
    await waitFor(async () => (await processesMentioning(marker)).length > 0, 30_000, {
      what: `sleep ${marker}`,
    });
    // More stdin than the command's pipe and every buffer on the way hold: berthd stops reading
    // the connection, so the client's going away can only be learnt by writing to it.
    for (let n = 0; n < 256; n++) session.send(0, Buffer.alloc(64 * 1024, 'i'));
    await sleep(1_000);
    session.ws.terminate();
    await waitFor(async () => (await processesMentioning(marker)).length === 0, 30_000, {
      what: `sleep ${marker} killed once its client went away`,
    });
    await target().assertServing('after the WebSocket client went away');
  });

  it('keeps a live WebSocket client whose stdin waits unread: it gets all the output after', async () => {
    const script = 'sleep 6; seq 1 300000; cat >/dev/null; echo done';
    const session = await wsConnect(
      await target().execUrl(['sh', '-c', script], { stdin: true, stdout: true }),
      ['v5.channel.k8s.io'],
    );
    for (let n = 0; n < 64; n++) session.send(0, Buffer.alloc(64 * 1024, 'i'));
    // v5's close of stdin: the command's cat then ends.
    session.send(STREAM_CLOSE, Buffer.from([0]));
    await session.closed;
    assert.match(channelText(session, 1), /\n300000\ndone\n$/);
    await target().assertServing('after the slow-stdin WebSocket session');
  });

  it('cuts off a client that never finishes its headers, with a 408', async () => {
    const res = await rawExchange(
      target().streamingPort,
      `GET /exec/${UNKNOWN_TOKEN} HTTP/1.1\r\nHost: x\r\nX-Slow: `,
      {
        windowMs: 40_000,
      },
    );
    assert.equal(res.status, 408, res.head);
    assert.ok(res.closed, 'the connection is closed');
    // Node's header timeout is 10 s, checked every second; far less than its 60 s default.
    assert.ok(res.ms < 30_000, `cut off after ${res.ms} ms`);
    await target().assertServing('slow headers');
  });
});
