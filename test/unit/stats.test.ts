/** cgroup path mapping and stats parsing, against fake v1 and v2 cgroup trees in a temp dir. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { CgroupDriver } from '../../src/cgroups/driver.js';
import { cgroupManager, type CgroupManager } from '../../src/cgroups/index.js';
import { probeCgroupHost, type CgroupVersion } from '../../src/cgroups/probe.js';
import { parsePressure } from '../../src/cgroups/pressure.js';
import { parseFlatKeyed } from '../../src/cgroups/stats.js';
import { expandSlice } from '../../src/cgroups/systemd.js';
import { fakeTreeMaker } from '../harness/files.js';

const fakeTree = fakeTreeMaker('berth-unit-cgroup-');

/** A manager over the fake tree at `root`, probed as berthd probes /sys/fs/cgroup. */
async function managerAt(root: string, driver: CgroupDriver = 'cgroupfs'): Promise<CgroupManager> {
  return cgroupManager(driver, await probeCgroupHost({ root, mounts: [] }));
}

async function cgroupVersion(root: string): Promise<CgroupVersion> {
  return (await probeCgroupHost({ root, mounts: [] })).version;
}

/** Path logic alone: the host does not matter to it. */
const pathsOf = (driver: CgroupDriver): CgroupManager =>
  cgroupManager(driver, { root: '/nonexistent', version: 'v1', controllers: [], mountPoints: [] });
const cgroupRelativePath = (path: string, driver: CgroupDriver): string => pathsOf(driver).relativePath(path);

describe('expandSlice', () => {
  test('nests each dash-separated prefix', () => {
    assert.equal(expandSlice('system.slice'), '/system.slice');
    assert.equal(expandSlice('a-b.slice'), '/a.slice/a-b.slice');
    assert.equal(
      expandSlice('kubepods-burstable-pod1234.slice'),
      '/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice',
    );
  });

  test('-.slice is the root', () => {
    assert.equal(expandSlice('-.slice'), '');
  });

  test('refuses what systemd refuses', () => {
    for (const bad of ['.slice', 'a', 'a.scope', 'a--b.slice', '-a.slice', 'a-.slice', 'a/b.slice']) {
      assert.throws(() => expandSlice(bad), { name: 'InvalidArgumentError' }, bad);
    }
  });
});

describe('cgroupRelativePath', () => {
  test('cgroupfs paths are used as they are', () => {
    assert.equal(cgroupRelativePath('/berth/abc', 'cgroupfs'), '/berth/abc');
    assert.equal(
      cgroupRelativePath('/kubepods/burstable/pod1/abc/', 'cgroupfs'),
      '/kubepods/burstable/pod1/abc',
    );
    assert.equal(cgroupRelativePath('//berth//abc', 'cgroupfs'), '/berth/abc');
  });

  test('relative or escaping cgroupfs paths are refused', () => {
    assert.throws(() => cgroupRelativePath('berth/abc', 'cgroupfs'), { name: 'InvalidArgumentError' });
    assert.throws(() => cgroupRelativePath('/berth/../etc', 'cgroupfs'), { name: 'InvalidArgumentError' });
  });

  test('systemd slice:prefix:name becomes the scope in the expanded slice', () => {
    assert.equal(cgroupRelativePath('system.slice:berth:abc', 'systemd'), '/system.slice/berth-abc.scope');
    assert.equal(
      cgroupRelativePath('kubepods-besteffort-pod9.slice:berth:abc', 'systemd'),
      '/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9.slice/berth-abc.scope',
    );
    assert.equal(cgroupRelativePath(':berth:abc', 'systemd'), '/system.slice/berth-abc.scope');
    assert.equal(cgroupRelativePath('-.slice:berth:abc', 'systemd'), '/berth-abc.scope');
  });

  test('a systemd name ending in .slice is a slice, not a scope', () => {
    assert.equal(cgroupRelativePath('a.slice:berth:a-b.slice', 'systemd'), '/a.slice/a-b.slice');
  });

  test('malformed systemd paths are refused', () => {
    for (const bad of ['/berth/abc', 'a.slice:berth', 'a.slice:berth:', 'a:berth:abc', 'a.slice:b:c:d']) {
      assert.throws(() => cgroupRelativePath(bad, 'systemd'), { name: 'InvalidArgumentError' }, bad);
    }
  });
});

describe('parsePressure', () => {
  test('reads some and full lines; other lines and unknown keys are skipped', () => {
    const p = parsePressure(
      'some avg10=0.12 avg60=1.50 avg300=99.99 total=18446744073709551615 later=7\nnew-kind x=1\n\n',
      'cpu.pressure',
    );
    assert.deepEqual(p, {
      some: { totalUs: 18446744073709551615n, avg10: 0.12, avg60: 1.5, avg300: 99.99 },
      full: null,
    });
  });

  test('an empty file has neither line', () => {
    assert.deepEqual(parsePressure('', 'io.pressure'), { some: null, full: null });
  });

  test('a some/full line missing a key or with garbage is an error naming the file', () => {
    assert.throws(
      () => parsePressure('some avg10=0.00 avg60=0.00 total=5\n', 'memory.pressure'),
      /memory.pressure: some avg300/,
    );
    assert.throws(
      () => parsePressure('full avg10=x avg60=0 avg300=0 total=5\n', 'io.pressure'),
      /io.pressure: full avg10/,
    );
    assert.throws(
      () => parsePressure('some avg10=0 avg60=0 avg300=0 total=-1\n', 'cpu.pressure'),
      /cpu.pressure: some total/,
    );
  });
});

test('parseFlatKeyed reads key/value lines and skips the rest', () => {
  const m = parseFlatKeyed('cache 12\nrss 34\n\nnonsense\nbig 18446744073709551615\n');
  assert.deepEqual(
    [...m],
    [
      ['cache', 12n],
      ['rss', 34n],
      ['big', 18446744073709551615n],
    ],
  );
});

/** A v2 tree whose cgroup `dir` has only the files every reading needs, and `extra`. */
function bareV2Tree(dir: string, extra: Record<string, string> = {}): Promise<string> {
  const files: Record<string, string> = {
    'cpu.stat': 'usage_usec 1\n',
    'memory.current': '1\n',
    'memory.stat': '',
    ...extra,
  };
  return fakeTree({
    'cgroup.controllers': 'cpu memory pids\n',
    ...Object.fromEntries(Object.entries(files).map(([file, text]) => [`${dir}/${file}`, text])),
  });
}

describe('readCgroupStats', () => {
  const v1Stat = [
    'cache 100',
    'rss 5',
    'inactive_file 7',
    'pgfault 1',
    'total_cache 4096',
    'total_rss 8192',
    'total_inactive_file 3000',
    'total_pgfault 77',
    'total_pgmajfault 3',
    '',
  ].join('\n');

  test('cgroup v1 (per-controller hierarchies), total_ keys', async () => {
    const root = await fakeTree({
      'cpuacct/berth/c1/cpuacct.usage': '123456789\n',
      'memory/berth/c1/memory.usage_in_bytes': '20000\n',
      'memory/berth/c1/memory.stat': v1Stat,
    });
    assert.equal(await cgroupVersion(root), 'v1');
    assert.deepEqual(await (await managerAt(root)).readStats('/berth/c1'), {
      cpuUsageNs: 123456789n,
      memoryUsageBytes: 20000n,
      workingSetBytes: 17000n,
      rssBytes: 8192n,
      pageFaults: 77n,
      majorPageFaults: 3n,
      pressure: null,
      swap: null,
    });
  });

  test('working set is floored at 0', async () => {
    const root = await fakeTree({
      'cpuacct/berth/c1/cpuacct.usage': '1',
      'memory/berth/c1/memory.usage_in_bytes': '2000',
      'memory/berth/c1/memory.stat': v1Stat,
    });
    assert.equal((await (await managerAt(root)).readStats('/berth/c1'))?.workingSetBytes, 0n);
  });

  test('cgroup v2 (unified), usage_usec in ns, systemd scope path, PSI and swap', async () => {
    const dir = 'kubepods.slice/kubepods-pod1.slice/berth-c2.scope';
    const root = await fakeTree({
      'cgroup.controllers': 'cpu memory pids\n',
      [`${dir}/cpu.stat`]: 'usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n',
      [`${dir}/memory.current`]: '1048576\n',
      [`${dir}/memory.stat`]: 'anon 65536\nfile 900000\ninactive_file 48576\npgfault 12\npgmajfault 1\n',
      [`${dir}/cpu.pressure`]:
        'some avg10=12.50 avg60=3.01 avg300=0.70 total=3647\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=1200\n',
      [`${dir}/memory.pressure`]:
        'some avg10=0.00 avg60=0.00 avg300=0.00 total=11166\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=9000\n',
      // A kernel before 5.13 has no "full" line for cpu; io keeps both.
      [`${dir}/io.pressure`]: 'some avg10=0.00 avg60=0.00 avg300=0.00 total=390\n',
      [`${dir}/memory.swap.current`]: '4096\n',
      [`${dir}/memory.swap.max`]: '1048576\n',
    });
    assert.equal(await cgroupVersion(root), 'v2');
    assert.deepEqual(await (await managerAt(root, 'systemd')).readStats('kubepods-pod1.slice:berth:c2'), {
      cpuUsageNs: 2_500_000n,
      memoryUsageBytes: 1048576n,
      workingSetBytes: 1_000_000n,
      rssBytes: 65536n,
      pageFaults: 12n,
      majorPageFaults: 1n,
      pressure: {
        cpu: {
          some: { totalUs: 3647n, avg10: 12.5, avg60: 3.01, avg300: 0.7 },
          full: { totalUs: 1200n, avg10: 1, avg60: 0, avg300: 0 },
        },
        memory: {
          some: { totalUs: 11166n, avg10: 0, avg60: 0, avg300: 0 },
          full: { totalUs: 9000n, avg10: 0, avg60: 0, avg300: 0 },
        },
        io: { some: { totalUs: 390n, avg10: 0, avg60: 0, avg300: 0 }, full: null },
      },
      swap: { usageBytes: 4096n, limitBytes: 1048576n },
    });
  });

  test('cgroup v2 without PSI (psi=0, cgroup.pressure 0) or swap accounting: unset, not zero', async () => {
    const root = await bareV2Tree('berth/c3');
    const stats = await (await managerAt(root)).readStats('/berth/c3');
    assert.deepEqual(stats?.pressure, { cpu: null, memory: null, io: null });
    assert.equal(stats?.swap, null);
  });

  test('swap without a limit ("max") has none', async () => {
    const root = await bareV2Tree('berth/c4', { 'memory.swap.current': '0\n', 'memory.swap.max': 'max\n' });
    assert.deepEqual((await (await managerAt(root)).readStats('/berth/c4'))?.swap, {
      usageBytes: 0n,
      limitBytes: null,
    });
  });

  test('a missing cgroup, or one half gone, is null', async () => {
    const root = await fakeTree({ 'cpuacct/berth/c1/cpuacct.usage': '1' });
    assert.equal(await (await managerAt(root)).readStats('/berth/nope'), null);
    assert.equal(await (await managerAt(root)).readStats('/berth/c1'), null);
  });

  test('garbage in a counter file is an error, not a zero', async () => {
    const root = await fakeTree({
      'cpuacct/berth/c1/cpuacct.usage': 'max',
      'memory/berth/c1/memory.usage_in_bytes': '1',
      'memory/berth/c1/memory.stat': '',
    });
    await assert.rejects((await managerAt(root)).readStats('/berth/c1'), /cpuacct.usage/);
  });
});
