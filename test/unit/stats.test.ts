/** cgroup path mapping and stats parsing, against fake v1 and v2 cgroup trees in a temp dir. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { CgroupDriver } from '../../src/cgroups/driver.js';
import { cgroupManager, type CgroupManager } from '../../src/cgroups/index.js';
import { probeCgroupHost, type CgroupVersion } from '../../src/cgroups/probe.js';
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

  test('cgroup v2 (unified), usage_usec in ns, systemd scope path', async () => {
    const dir = 'kubepods.slice/kubepods-pod1.slice/berth-c2.scope';
    const root = await fakeTree({
      'cgroup.controllers': 'cpu memory pids\n',
      [`${dir}/cpu.stat`]: 'usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n',
      [`${dir}/memory.current`]: '1048576\n',
      [`${dir}/memory.stat`]: 'anon 65536\nfile 900000\ninactive_file 48576\npgfault 12\npgmajfault 1\n',
    });
    assert.equal(await cgroupVersion(root), 'v2');
    assert.deepEqual(await (await managerAt(root, 'systemd')).readStats('kubepods-pod1.slice:berth:c2'), {
      cpuUsageNs: 2_500_000n,
      memoryUsageBytes: 1048576n,
      workingSetBytes: 1_000_000n,
      rssBytes: 65536n,
      pageFaults: 12n,
      majorPageFaults: 1n,
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
