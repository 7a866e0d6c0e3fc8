/**
 * Hostile clients of berthd's metrics server: request lines and headers no client library would
 * write (test/harness/hostile-http.ts), thousands of pipelined scrapes on a connection that never
 * reads its answers, and a storm of concurrent scrapes. After each, berthd must run and answer a
 * CRI Version call in time. Needs root; traffic stays on loopback.
 *
 * BERTH_HOSTILE_SEED=<n> runs other random cases.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
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
import { useListenerTarget } from '../harness/listeners.js';
import { inPool } from '../harness/pool.js';
import { registrySkip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 300_000;
const SCRAPE = 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n';
/** Pipelined scrapes a connection that never reads sends: bounded, and far past any sane client. */
const PIPELINED = 5_000;
/** How long the unread scrapes sit in berthd before the test reads: long enough to hurt if queued. */
const UNREAD_MS = 5_000;
/** Growth of berthd's RSS the pipelined scrapes may cause: each queued one held a full reading. */
const MAX_GROWTH_KIB = 150 * 1024;

describe('hostile HTTP on the metrics server', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  const seed = hostileSeed();
  const target = useListenerTarget();
  const failures: string[] = [];

  function report(what: string): void {
    assert.deepEqual(failures.splice(0), [], `${what}; seed ${seed} (set BERTH_HOSTILE_SEED to change it)`);
  }

  async function fuzz(cases: HttpCase[], kind: string): Promise<void> {
    await inPool(cases, 8, async (c) => {
      const where = `${kind} ${c.label}`;
      const res = await rawExchange(target().metricsPort, c.bytes, {
        // An unfinished request is only sent: the streaming suite checks that such a client is cut off.
        windowMs: c.incomplete ? 1_000 : CLOSE_WINDOW_MS,
        keepOpen: true,
      });
      if (!c.incomplete) {
        const answered = res.status === 200 || isRefusal(res.status);
        const mayLose =
          c.bytes.length > RESET_MAY_LOSE_ANSWER_BYTES && res.status === undefined && res.closed;
        if (!mayLose && c.expect && !c.expect.includes(res.status ?? 0)) {
          failures.push(`${where}: status ${res.status ?? 'none'}, want ${c.expect.join(' or ')}`);
        } else if (!mayLose && !answered) {
          failures.push(`${where}: status ${res.status ?? 'none'}, want 200 or a refusal`);
        }
        // A refusal ends its connection; a 200 may keep it alive, as for any scraper.
        if (isRefusal(res.status) && !res.closed) {
          const closed = await new Promise<boolean>((resolve) => {
            res.socket.once('close', () => resolve(true));
            setTimeout(() => resolve(false), CLOSE_WINDOW_MS).unref();
            res.socket.resume();
          });
          if (!closed) failures.push(`${where}: connection left open after ${res.status}`);
        }
      }
      res.socket.destroy();
      await target().assertServing(where);
    });
    report(`${kind}: ${cases.length} cases`);
  }

  it('answers GET // with a 404', async () => {
    const res = await rawExchange(target().metricsPort, 'GET // HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.equal(res.status, 404, res.head);
    await target().assertServing('GET //');
  });

  it('refuses hostile request lines with the status HTTP defines', async () => {
    await fuzz(requestLineCases(new Rng(seed + 3), '/metrics'), 'request line');
  });

  it('refuses hostile headers, or answers the scrape they came with', async () => {
    await fuzz(headerCases(new Rng(seed + 4), '/metrics'), 'headers');
  });

  it('cuts off a connection that pipelines scrapes and never reads them, and keeps answering', async () => {
    const socket = connect(target().metricsPort, '127.0.0.1');
    socket.on('error', () => undefined);
    await new Promise((resolve) => socket.once('connect', resolve));
    // Listened for from the start (which reads nothing): a reset may come before the test reads.
    const closedEarly = new Promise<true>((resolve) => socket.once('close', () => resolve(true)));
    const { growthKiB } = await target().daemon.rssGrowthDuring(async () => {
      socket.write(SCRAPE.repeat(PIPELINED));
      // Nothing is read meanwhile: whatever berthd answers piles up in the socket's buffers.
      await sleep(UNREAD_MS);
      await target().assertServing('unread pipelined scrapes');
    });
    let answers = 0;
    let tail = '';
    const closed = new Promise<boolean>((resolve) => {
      socket.on('data', (chunk: Buffer) => {
        const text = tail + chunk.toString('latin1');
        answers += text.split('HTTP/1.1 200 OK').length - 1;
        tail = text.slice(-20);
      });
      void closedEarly.then(resolve);
      setTimeout(() => resolve(false), CLOSE_WINDOW_MS).unref();
    });
    const wasClosed = await closed;
    socket.destroy();
    assert.ok(wasClosed, `the connection was still open, ${answers} answers read`);
    assert.ok(answers <= 8, `${answers} of ${PIPELINED} pipelined scrapes were answered`);
    assert.ok(growthKiB < MAX_GROWTH_KIB, `berthd grew by ${growthKiB} KiB`);
    await target().assertServing('after the pipelined scrapes');
  });

  it('gives scrapes that arrive together one collection', async () => {
    const socket = connect(target().metricsPort, '127.0.0.1');
    socket.on('error', () => undefined);
    let received = Buffer.alloc(0);
    const bodies = new Promise<string[]>((resolve, reject) => {
      socket.on('data', (chunk: Buffer) => {
        received = Buffer.concat([received, chunk]);
        const parsed = splitResponses(received);
        if (parsed.length === 8) resolve(parsed);
      });
      socket.once('close', () =>
        reject(new Error(`closed after ${splitResponses(received).length} answers`)),
      );
    });
    socket.write(SCRAPE.repeat(8));
    const answers = await bodies;
    socket.destroy();
    // Every collection reads the heap and cpu anew, so two collections never print the same text.
    assert.equal(new Set(answers).size, 1, 'pipelined scrapes were collected one by one');
  });

  it('answers or refuses each of a storm of concurrent scrapes, and keeps answering the CRI', async () => {
    const storm = Array.from({ length: 300 }, () =>
      rawExchange(target().metricsPort, 'GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', {
        windowMs: CLOSE_WINDOW_MS,
      }),
    );
    await target().assertServing('a storm of scrapes');
    const results = await Promise.all(storm);
    const statuses = new Map<string, number>();
    for (const r of results)
      statuses.set(String(r.status ?? 'cut'), (statuses.get(String(r.status ?? 'cut')) ?? 0) + 1);
    assert.ok((statuses.get('200') ?? 0) > 0, `no scrape answered: ${JSON.stringify([...statuses])}`);
    assert.deepEqual(
      [...statuses.keys()].filter((s) => s !== '200' && s !== 'cut'),
      [],
      `statuses: ${JSON.stringify([...statuses])}`,
    );
    assert.ok(
      results.every((r) => r.closed),
      'a scrape connection was left open',
    );
    await target().assertServing('after a storm of scrapes');
  });
});

/** The bodies of the complete responses in `bytes`, each by its Content-Length. */
function splitResponses(bytes: Buffer): string[] {
  const bodies: string[] = [];
  let rest = bytes;
  for (;;) {
    const end = rest.indexOf('\r\n\r\n');
    if (end === -1) return bodies;
    const length = Number(
      /^content-length:\s*(\d+)/im.exec(rest.subarray(0, end).toString('latin1'))?.[1] ?? NaN,
    );
    if (Number.isNaN(length) || rest.length < end + 4 + length) return bodies;
    bodies.push(rest.subarray(end + 4, end + 4 + length).toString('utf8'));
    rest = rest.subarray(end + 4 + length);
  }
}
