/**
 * Clients that ask berthd for much at once: many concurrent pod-stats lists on a node of many pods
 * and few file descriptors, stats streams whose clients never read, and oversized label selectors
 * sent twenty at a time. Each must be answered (or refused) without the others going unserved: a
 * fresh client's Version answers meanwhile. Needs root; traffic stays on loopback.
 */
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { status } from '@grpc/grpc-js';
import { BOUND_SCALE } from '../harness/bounds.js';
import { DeadlineClient } from '../harness/hostile.js';
import { ANSWER_DEADLINE_MS, useListenerTarget } from '../harness/listeners.js';
import { runPodSandbox } from '../harness/pods.js';
import { inPool } from '../harness/pool.js';
import { registrySkip } from '../harness/skip.js';
import { UnreadStream } from '../harness/unread-stream.js';

const SUITE_TIMEOUT_MS = 600_000 * BOUND_SCALE;
/**
 * berthd's descriptors. Pods without containers read about ten each (cgroup files, an nsenter's
 * pipes): 100 pods read all at once need about 1,000, so four lists at once ran out of them.
 */
const FD_LIMIT = 512;
const PODS = 100;
/**
 * How long a fresh client's Version may take while the others are served: a bound for being locked
 * out (the stalled streams held new clients out for about 80 s), not a speed check.
 */
const SERVED_BOUND_MS = 10_000 * BOUND_SCALE;

describe('clients that ask for much at once', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  const target = useListenerTarget({ fdLimit: FD_LIMIT });

  // The target's own pod and these: pods without containers, each with its netns and cgroup.
  before(async () => {
    const { daemon } = target();
    await inPool(
      Array.from({ length: PODS - 1 }, (_, i) => i),
      4,
      async (i) => void (await runPodSandbox(daemon.cri, daemon.pod(`many-${i}`))),
    );
  });

  /** Fails unless a client on a connection of its own gets Version answered within SERVED_BOUND_MS. */
  async function assertFreshClientServed(where: string): Promise<void> {
    const fresh = new DeadlineClient(target().daemon.socket);
    try {
      const out = await fresh.call('Version', {}, SERVED_BOUND_MS);
      assert.equal(
        out.code,
        status.OK,
        `Version ${where}: ${status[out.code]} ${out.details} after ${out.ms} ms`,
      );
    } finally {
      fresh.close();
    }
  }

  /** assertFreshClientServed over and over, each time on a new connection, until `work` settles. */
  async function assertServedThroughout<T>(work: Promise<T>, where: string): Promise<T> {
    let settled = false;
    const done = work.finally(() => (settled = true));
    while (!settled) {
      await assertFreshClientServed(where);
      await Promise.race([done.catch(() => {}), sleep(100)]);
    }
    return done;
  }

  it(`answers concurrent ListPodSandboxStats of ${PODS} pods with ${FD_LIMIT} descriptors`, async () => {
    const t = target();
    const outs = await Promise.all(
      Array.from({ length: 4 }, () => t.cri.call('ListPodSandboxStats', {}, ANSWER_DEADLINE_MS * 2)),
    );
    for (const out of outs) {
      assert.equal(
        out.code,
        status.OK,
        `ListPodSandboxStats: ${status[out.code]} ${out.details.slice(0, 300)}`,
      );
      assert.equal((out.response as { stats: unknown[] }).stats.length, PODS);
    }
    await t.assertServing('concurrent ListPodSandboxStats');
  });

  it('serves a fresh client while 50 StreamPodSandboxStats clients do not read', async () => {
    const t = target();
    const stalled = Array.from(
      { length: 50 },
      () => new UnreadStream(t.daemon.socket, '/runtime.v1.RuntimeService/StreamPodSandboxStats'),
    );
    try {
      // While berthd takes up each stream's work and its writes back up.
      await assertServedThroughout(sleep(3_000), 'with 50 unread stats streams');
    } finally {
      for (const s of stalled) s.close();
    }
    await t.assertServing('after the unread stats streams');
  });

  it('refuses 20 oversized label selectors at once and serves a fresh client meanwhile', async () => {
    const t = target();
    const method = t.cri.methods.get('ListPodSandbox');
    assert.ok(method);
    const label_selector = Object.fromEntries(Array.from({ length: 500_000 }, (_, i) => [`k${i}`, 'v']));
    const bytes = method.definition.requestSerialize({ filter: { label_selector } });
    const senders = Array.from({ length: 20 }, () => new DeadlineClient(t.daemon.socket));
    try {
      const refused = Promise.all(
        senders.map((c) => c.callRaw('ListPodSandbox', bytes, ANSWER_DEADLINE_MS * 2)),
      );
      const outs = await assertServedThroughout(refused, 'while 20 oversized selectors are refused');
      for (const out of outs) {
        assert.equal(out.code, status.INVALID_ARGUMENT, `${status[out.code]} ${out.details.slice(0, 300)}`);
        assert.match(out.details, /label_selector/);
      }
    } finally {
      for (const c of senders) c.close();
    }
    await t.assertServing('after the oversized selectors');
  });
});
