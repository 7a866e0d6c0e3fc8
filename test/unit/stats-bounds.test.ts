/**
 * The bounds on stats reads: pods and containers read at once by all calls together, and pod
 * readings shared by the calls that want them at the same time.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { CgroupManager } from '../../src/cgroups/index.js';
import type { CgroupStats } from '../../src/cgroups/stats.js';
import type { ContainerServiceDeps } from '../../src/container/context.js';
import { CONTAINERS_READ_AT_ONCE, ContainerStatsReader } from '../../src/container/stats.js';
import { PODS_READ_AT_ONCE, PodStatsService } from '../../src/podstats/service.js';
import { Store } from '../../src/store/index.js';
import { container, sandbox } from '../harness/records.js';

const PODS = 40;

/** Pod cgroups that take a while to read, counting the reads and how many run at once. */
function slowCgroups() {
  const seen = { reads: 0, running: 0, most: 0 };
  const stats = (cpuUsageNs: bigint): CgroupStats => ({
    cpuUsageNs,
    memoryUsageBytes: 0n,
    workingSetBytes: 0n,
    rssBytes: 0n,
    pageFaults: 0n,
    majorPageFaults: 0n,
    pressure: null,
    swap: null,
  });
  const cgroups = {
    podPath: (parent: string) => parent,
    readStatsAt: async () => {
      seen.reads++;
      seen.running++;
      seen.most = Math.max(seen.most, seen.running);
      await sleep(5);
      seen.running--;
      return stats(BigInt(seen.reads) * 1_000_000n);
    },
    readDetailAt: async () => null,
  } as unknown as CgroupManager;
  return { cgroups, seen };
}

describe('PodStatsService', () => {
  let dir: string;
  let store: Store;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-podstats-'));
    store = Store.open(join(dir, 'berth.db'));
    for (let i = 0; i < PODS; i++) {
      const id = `pod${String(i).padStart(8, '0')}`;
      store.sandboxes.insert(
        sandbox({ id, name: id, state: 'READY', hostNetwork: true, cgroupParent: `/kubepods/${id}` }),
      );
    }
  });

  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('concurrent lists share each pod reading, and all calls together read a bounded number at once', async () => {
    const { cgroups, seen } = slowCgroups();
    const pods = new PodStatsService({
      store,
      cgroups,
      containerStats: { listStats: async () => [] },
      timeoutMs: 1_000,
    });
    const lists = await Promise.all(Array.from({ length: 5 }, () => pods.listStats({})));
    for (const list of lists) assert.equal(list.length, PODS);
    assert.equal(seen.reads, PODS, 'each pod read once for the five lists');
    assert.ok(seen.most <= PODS_READ_AT_ONCE, `${seen.most} pods read at once`);
    // The shared reading's cpu rate is the same for every list (a second sample of one reading
    // would have had no time pass, and no rate).
    await sleep(5);
    const [a, b] = await Promise.all([pods.listStats({}), pods.listStats({})]);
    assert.ok(a?.[0]?.cpu?.usageNanoCores);
    assert.deepEqual(
      a.map((s) => s.cpu?.usageNanoCores),
      b?.map((s) => s.cpu?.usageNanoCores),
    );
  });

  test('a list whose caller went away reads no further pod', async () => {
    const { cgroups, seen } = slowCgroups();
    const pods = new PodStatsService({
      store,
      cgroups,
      containerStats: { listStats: async () => [] },
      timeoutMs: 1_000,
    });
    const gone = new AbortController();
    const list = pods.listStats({}, gone.signal);
    gone.abort(new Error('the client cancelled the call'));
    await assert.rejects(list, /cancelled/);
    await sleep(100);
    assert.ok(seen.reads <= PODS_READ_AT_ONCE, `${seen.reads} pods read for a cancelled list`);
  });
});

describe('ContainerStatsReader', () => {
  let dir: string;
  let store: Store;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-ctrstats-'));
    store = Store.open(join(dir, 'berth.db'));
    store.sandboxes.insert(sandbox({ state: 'READY' }));
    for (let i = 0; i < 3 * CONTAINERS_READ_AT_ONCE; i++) {
      const id = `c${String(i).padStart(8, '0')}`;
      store.containers.insert(container({ id, name: id, state: 'RUNNING', pid: 100 + i }));
    }
  });

  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('lists at once read a bounded number of containers together', async () => {
    const { cgroups, seen } = slowCgroups();
    const reader = new ContainerStatsReader({
      store,
      config: { rootDir: dir },
      cgroups: { ...cgroups, readStats: cgroups.readStatsAt },
    } as unknown as ContainerServiceDeps);
    const lists = await Promise.all(Array.from({ length: 3 }, () => reader.listStats({})));
    for (const list of lists) assert.equal(list.length, 3 * CONTAINERS_READ_AT_ONCE);
    assert.ok(seen.most <= CONTAINERS_READ_AT_ONCE, `${seen.most} containers read at once`);
  });
});
