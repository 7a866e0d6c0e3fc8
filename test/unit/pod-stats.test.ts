/**
 * The readers behind pod stats and metrics: cgroup details on fake v1 and v2 trees, /proc/net/dev,
 * the cpu rate between two samples, and the metric set's labels.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { parseNetDev, readInterfaceCounters } from '../../src/netns/counters.js';
import { metricDescriptors } from '../../src/podstats/metrics.js';
import type { CgroupDriver } from '../../src/cgroups/driver.js';
import { cgroupManager } from '../../src/cgroups/index.js';
import { probeCgroupHost } from '../../src/cgroups/probe.js';
import { readCgroupDetailAt } from '../../src/cgroups/stats.js';
import { CounterRate } from '../../src/stats/rate.js';
import { fakeTreeMaker } from '../harness/files.js';

const fakeTree = fakeTreeMaker('berth-unit-podstats-');

const NET_DEV = [
  'Inter-|   Receive                                                |  Transmit',
  ' face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed',
  '    lo:     140       2    0    0    0     0          0         0      140       2    0    0    0     0       0          0',
  '  eth0: 2101234    1500    3    4    0     0          0         0   987654     900    5    6    0     0       0          0',
  '',
].join('\n');

describe('parseNetDev', () => {
  test('reads bytes, packets, errors and drops both ways', () => {
    const [lo, eth0] = parseNetDev(NET_DEV);
    assert.equal(lo?.name, 'lo');
    assert.deepEqual(eth0, {
      name: 'eth0',
      rxBytes: 2101234n,
      rxPackets: 1500n,
      rxErrors: 3n,
      rxDropped: 4n,
      txBytes: 987654n,
      txPackets: 900n,
      txErrors: 5n,
      txDropped: 6n,
    });
  });

  test('skips the headers and lines that do not parse', () => {
    assert.deepEqual(parseNetDev('Inter-| x\n face |bytes\n  bad: 1 2 3\n'), []);
  });
});

describe('readInterfaceCounters', () => {
  test('reads through a process of the namespace without running a program', async () => {
    const counters = await readInterfaceCounters('/proc/self/ns/net', {
      pid: process.pid,
      timeoutMs: 1000,
      nsenter: '/nonexistent/nsenter',
    });
    assert.ok(counters.some((c) => c.name === 'lo'));
  });

  test('does not trust a process of another namespace', async () => {
    const root = await fakeTree({ 'not-a-netns': '' });
    await assert.rejects(
      readInterfaceCounters(join(root, 'not-a-netns'), {
        pid: process.pid,
        timeoutMs: 1000,
        nsenter: '/nonexistent/nsenter',
      }),
      /nonexistent/,
    );
  });
});

describe('CounterRate', () => {
  test('is the growth per second since the previous sample', () => {
    const rate = new CounterRate();
    assert.equal(rate.sample('p', 1_000n, 1_000_000_000n), null, 'one sample is no rate');
    assert.equal(rate.sample('p', 501_000n, 1_500_000_000n), 1_000_000n);
  });

  test('has no rate when time stands still or the counter goes back', () => {
    const rate = new CounterRate();
    rate.sample('p', 1_000n, 10n);
    assert.equal(rate.sample('p', 2_000n, 10n), null);
    assert.equal(rate.sample('p', 500n, 20n), null);
    assert.equal(rate.sample('p', 1_500n, 30n), 100_000_000_000n);
  });

  test('forgets keys no longer live', () => {
    const rate = new CounterRate();
    rate.sample('gone', 1n, 1n);
    rate.retain(new Set());
    assert.equal(rate.sample('gone', 2n, 2n), null);
  });
});

describe('readCgroupDetailAt', () => {
  test('cgroup v1: user and system ticks, the limit, pids.current', async () => {
    const root = await fakeTree({
      'cpuacct/kubepods/pod1/cpuacct.stat': 'user 250\nsystem 30\n',
      'memory/kubepods/pod1/memory.limit_in_bytes': '268435456\n',
      'pids/kubepods/pod1/pids.current': '7\n',
    });
    assert.deepEqual(
      await readCgroupDetailAt(await probeCgroupHost({ root, mounts: [] }), '/kubepods/pod1'),
      {
        cpuUserNs: 2_500_000_000n,
        cpuSystemNs: 300_000_000n,
        memoryLimitBytes: 268435456n,
        processCount: 7n,
      },
    );
  });

  test('cgroup v1: no limit reads as null', async () => {
    const root = await fakeTree({
      'cpuacct/p/cpuacct.stat': 'user 0\nsystem 0\n',
      'memory/p/memory.limit_in_bytes': '9223372036854771712\n',
      'pids/p/pids.current': '1\n',
    });
    assert.equal(
      (await readCgroupDetailAt(await probeCgroupHost({ root, mounts: [] }), '/p'))?.memoryLimitBytes,
      null,
    );
  });

  test('cgroup v2: usec counters, memory.max', async () => {
    const root = await fakeTree({
      'cgroup.controllers': 'cpu memory pids\n',
      'p/cpu.stat': 'usage_usec 10\nuser_usec 7\nsystem_usec 3\n',
      'p/memory.max': 'max\n',
      'p/pids.current': '4\n',
    });
    assert.deepEqual(await readCgroupDetailAt(await probeCgroupHost({ root, mounts: [] }), '/p'), {
      cpuUserNs: 7000n,
      cpuSystemNs: 3000n,
      memoryLimitBytes: null,
      processCount: 4n,
    });
  });

  test('a cgroup that is gone reads as null', async () => {
    const root = await fakeTree({ 'cpuacct/.keep': '' });
    assert.equal(await readCgroupDetailAt(await probeCgroupHost({ root, mounts: [] }), '/gone'), null);
  });
});

const parentRelativePath = (parent: string, driver: CgroupDriver): string =>
  cgroupManager(driver, { root: '/nonexistent', version: 'v1', controllers: [], mountPoints: [] }).podPath(
    parent,
  );

describe('parentRelativePath', () => {
  test('a cgroupfs parent is its path; a systemd slice is expanded', () => {
    assert.equal(parentRelativePath('/kubepods/burstable/pod1/', 'cgroupfs'), '/kubepods/burstable/pod1');
    assert.equal(parentRelativePath('kubepods/pod1', 'cgroupfs'), '/kubepods/pod1');
    assert.equal(
      parentRelativePath('kubepods-burstable-pod1.slice', 'systemd'),
      '/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice',
    );
  });
});

describe('metricDescriptors', () => {
  test('every metric carries the base labels cAdvisor has, network ones the interface too', () => {
    const base = ['id', 'image', 'namespace', 'pod', 'container'];
    for (const d of metricDescriptors()) {
      assert.deepEqual(d.labelKeys.slice(0, base.length), base, d.name);
      assert.ok(d.help.length > 0, d.name);
      if (d.name.startsWith('container_network_'))
        assert.deepEqual(d.labelKeys.slice(base.length), ['interface']);
    }
    const names = metricDescriptors().map((d) => d.name);
    assert.equal(new Set(names).size, names.length, 'names are unique');
  });
});
