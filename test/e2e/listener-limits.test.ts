/**
 * What idle connections can take from berthd: with its listeners capped, hundreds of idle TCP
 * connections to the streaming and metrics ports hold no more file descriptors than the caps, and
 * real streams and scrapes still get in; and a berthd whose descriptors did run out answers its
 * calls with errors instead of dying on `spawn runc EMFILE`. Needs root; traffic stays on loopback.
 */
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { status } from '@grpc/grpc-js';
import { rawExchange } from '../harness/hostile-http.js';
import { ANSWER_DEADLINE_MS, closeAll, holdConnections, useListenerTarget } from '../harness/listeners.js';
import { registrySkip } from '../harness/skip.js';
import { channelText, spdyRemoteCommand, spdyUpgrade, wsConnect } from '../harness/streaming.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 240_000;
const STREAMING_CAP = 16;
const METRICS_CAP = 8;
/** Descriptors berthd may open besides the capped connections meanwhile (a pipe, a log file). */
const FD_SLACK = 24;

describe('connection caps', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  const target = useListenerTarget({
    extraArgs: [
      '--streaming-max-connections',
      String(STREAMING_CAP),
      '--metrics-max-connections',
      String(METRICS_CAP),
    ],
  });

  it('hold idle connections past the cap at no cost in descriptors, and let real clients in', async () => {
    const t = target();
    const before = await t.openFds();
    const idle = [
      ...(await holdConnections(t.streamingPort, 300)),
      ...(await holdConnections(t.metricsPort, 100)),
    ];
    try {
      // berthd accepts each and closes those past the cap: wait until it has seen them all.
      await sleep(1_000);
      const held = (await t.openFds()) - before;
      assert.ok(
        held <= STREAMING_CAP + METRICS_CAP + FD_SLACK,
        `berthd holds ${held} more descriptors with 400 idle connections open`,
      );
      await t.assertServing('400 idle connections');
      // An idle connection is closed to make room for one that brings a request.
      const ws = await wsConnect(await t.execUrl(['echo', 'websocket past the cap']), ['v5.channel.k8s.io']);
      await ws.closed;
      assert.match(channelText(ws, 1), /websocket past the cap/);
      const spdy = await spdyRemoteCommand(await t.execUrl(['echo', 'spdy past the cap']));
      assert.match(spdy.stdout.toString(), /spdy past the cap/);
      const scrape = await rawExchange(t.metricsPort, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', {
        untilResponse: true,
      });
      assert.equal(scrape.status, 200, scrape.head);
    } finally {
      closeAll(idle);
    }
    await t.assertServing('after the idle connections');
  });

  it('close upgraded SPDY connections that open no stream to let a real client in', async () => {
    const t = target();
    // Upgraded to SPDY and then silent: each counted as streaming and held its place until the
    // client's 30 s to open its streams ran out, so that many of them locked every exec out.
    const silent: Socket[] = [];
    try {
      for (let i = 0; i < STREAMING_CAP; i++) {
        silent.push((await spdyUpgrade(await t.execUrl(['true']), ['v4.channel.k8s.io'])).socket);
      }
      const spdy = await spdyRemoteCommand(await t.execUrl(['echo', 'past silent upgrades']));
      assert.match(spdy.stdout.toString(), /past silent upgrades/);
    } finally {
      closeAll(silent);
    }
    await t.assertServing('after the silent SPDY upgrades');
  });
});

describe('a berthd out of file descriptors', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  const LIMIT = 256;
  // No cap worth the name: the connections are what exhausts the descriptors here.
  const target = useListenerTarget({
    fdLimit: LIMIT,
    extraArgs: ['--streaming-max-connections', '100000'],
  });

  it('answers ExecSync instead of dying on spawn EMFILE, and execs again once descriptors free up', async () => {
    const t = target();
    const held: Socket[] = [];
    const codes: string[] = [];
    try {
      // A spawn needs several descriptors (its pipes) where writing a file needs one: with a few
      // left, the exec's files are written and runc's spawn fails.
      for (const left of [6, 4, 2]) {
        await fillDescriptors(t.openFds, t.streamingPort, LIMIT - left, held);
        const out = await t.cri.call(
          'ExecSync',
          { container_id: t.containerId, cmd: ['true'], timeout: 10 },
          ANSWER_DEADLINE_MS,
        );
        assert.ok(!out.noAnswer, `ExecSync with ${left} descriptors left got no answer: ${out.details}`);
        codes.push(`${left}: ${status[out.code]} ${out.details.slice(0, 200)}`);
        await t.assertServing(`ExecSync with ${left} descriptors left`);
      }
    } finally {
      closeAll(held);
    }
    assert.ok(
      codes.some((c) => / RESOURCE_EXHAUSTED .*file descriptor/.test(c)),
      `no exec failed for want of descriptors: ${codes.join('; ')}`,
    );
    await waitFor(async () => (await t.openFds()) < LIMIT / 2, 30_000, { what: 'descriptors freed' });
    const again = await t.cri.call(
      'ExecSync',
      { container_id: t.containerId, cmd: ['echo', 'again'], timeout: 10 },
      ANSWER_DEADLINE_MS,
    );
    assert.equal(again.code, status.OK, again.details);
    assert.match(Buffer.from((again.response as { stdout: Buffer }).stdout).toString(), /again/);
  });
});

/** Opens idle connections until berthd holds `target` descriptors (or refuses to take more). */
async function fillDescriptors(
  openFds: () => Promise<number>,
  port: number,
  target: number,
  held: Socket[],
): Promise<void> {
  for (let round = 0; round < 50; round++) {
    const missing = target - (await settledFds(openFds));
    if (missing <= 0) return;
    held.push(...(await holdConnections(port, missing)));
  }
}

/** berthd's descriptor count once it stopped changing: accepting is berthd's to do, in its own time. */
async function settledFds(openFds: () => Promise<number>): Promise<number> {
  let last = await openFds();
  for (let i = 0; i < 100; i++) {
    await sleep(100);
    const now = await openFds();
    if (now === last) return now;
    last = now;
  }
  return last;
}
