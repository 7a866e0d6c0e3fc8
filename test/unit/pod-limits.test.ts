/**
 * A pod cgroup's limits, pure logic: resources plus overhead as kubelet sizes a pod cgroup, the
 * files they become on each cgroup version (cgroupfs driver), the slice properties (systemd
 * driver), and where each driver puts a pod's own cgroup.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { cgroupManager } from '../../src/cgroups/index.js';
import { cpuWeightOf } from '../../src/cgroups/index.js';
import { limitFiles, setsNothing } from '../../src/cgroups/pod-cgroup.js';
import type { CgroupHost } from '../../src/cgroups/probe.js';
import { sliceProperties } from '../../src/cgroups/systemd.js';
import { emptyResources } from '../../src/cri/container-spec.js';
import type { ContainerResources } from '../../src/model/container.js';
import { weightConversionOf } from '../../src/runtime/weight-conversion.js';
import { podLimits as limitsOf } from '../../src/sandbox/pod-limits.js';

const MiB = 1024 * 1024;

/** A pod of a runtime that converts shares as runc 1.1 does. */
const podLimits = (asked: Parameters<typeof limitsOf>[0]) => limitsOf(asked, 'linear');

function limits(over: Partial<ContainerResources>): ContainerResources {
  return { ...emptyResources(), ...over };
}

const host = (version: CgroupHost['version']): CgroupHost => ({
  root: '/sys/fs/cgroup',
  version,
  controllers: [],
  mountPoints: [],
});

describe('podLimits', () => {
  test('a pod that asks for nothing sets nothing, and its new cgroup is written no file', () => {
    assert.equal(setsNothing(podLimits(null)), true);
    assert.equal(setsNothing(podLimits({ resources: emptyResources(), overhead: null })), true);
    assert.equal(
      setsNothing(podLimits({ resources: limits({ memoryLimitBytes: 64 * MiB }), overhead: null })),
      false,
    );
    assert.equal(setsNothing(podLimits({ resources: limits({ cpusetCpus: '0' }), overhead: null })), false);
  });

  test('adds the overhead to each limit the resources set, over the resources period', () => {
    const got = podLimits({
      resources: limits({
        memoryLimitBytes: 128 * MiB,
        cpuPeriod: 100_000,
        cpuQuota: 50_000,
        cpuShares: 512,
      }),
      // 10 ms per 50 ms is 20 ms per 100 ms.
      overhead: limits({ memoryLimitBytes: 16 * MiB, cpuPeriod: 50_000, cpuQuota: 10_000, cpuShares: 100 }),
    });
    assert.deepEqual(got, {
      memoryBytes: 144 * MiB,
      cpuPeriod: 100_000,
      cpuQuota: 70_000,
      cpuShares: 612,
      cpuWeight: 24,
      cpusetCpus: '',
      cpusetMems: '',
      unified: {},
    });
  });

  test('an unset limit of the resources leaves the pod unlimited in it, whatever the overhead', () => {
    const got = podLimits({
      resources: limits({ cpuQuota: -1, cpusetCpus: '0', unified: { 'pids.max': '10' } }),
      overhead: limits({ memoryLimitBytes: 16 * MiB, cpuPeriod: 100_000, cpuQuota: 10_000, cpuShares: 100 }),
    });
    assert.equal(got.memoryBytes, 0);
    assert.equal(got.cpuQuota, 0);
    assert.equal(got.cpuPeriod, 100_000);
    assert.equal(got.cpuShares, 100);
    assert.equal(got.cpusetCpus, '0');
    assert.deepEqual(got.unified, { 'pids.max': '10' });
  });

  test('nothing asked: no limit, the kernel default period', () => {
    for (const asked of [null, { resources: null, overhead: null }]) {
      const got = podLimits(asked);
      assert.deepEqual([got.memoryBytes, got.cpuQuota, got.cpuShares, got.cpuPeriod], [0, 0, 0, 100_000]);
    }
  });
});

describe('the files and properties of a pod cgroup', () => {
  const set = {
    ...podLimits(null),
    memoryBytes: 64 * MiB,
    cpuQuota: 25_000,
    cpuShares: 2,
    cpuWeight: 1,
    cpusetMems: '0',
  };

  test('v1 and hybrid: a file per limit in its controller, unlimited as -1, shares 1024 by default', () => {
    for (const version of ['v1', 'hybrid'] as const) {
      assert.deepEqual(
        limitFiles(host(version), set).map((f) => `${f.controller}/${f.file}=${f.value}`),
        [
          `memory/memory.limit_in_bytes=${64 * MiB}`,
          'cpu/cpu.cfs_period_us=100000',
          'cpu/cpu.cfs_quota_us=25000',
          'cpu/cpu.shares=2',
          'cpuset/cpuset.mems=0',
        ],
      );
      assert.deepEqual(
        limitFiles(host(version), podLimits(null)).map((f) => f.value),
        ['-1', '100000', '-1', '1024'],
      );
    }
  });

  test('v2: memory.max, cpu.max, cpu.weight as runc converts shares, the unified entries', () => {
    assert.deepEqual(
      limitFiles(host('v2'), { ...set, unified: { 'memory.high': '1000000' } }).map(
        (f) => `${f.file}=${f.value}`,
      ),
      [
        `memory.max=${64 * MiB}`,
        'cpu.max=25000 100000',
        'cpu.weight=1',
        'cpuset.mems=0',
        'memory.high=1000000',
      ],
    );
    assert.deepEqual(
      limitFiles(host('v2'), podLimits(null)).map((f) => f.value),
      ['max', 'max 100000', '100'],
    );
  });

  test("shares become the weight of the pod's runtime's formula: runc's before 1.3.2 and since", () => {
    // runc 1.1's formula, and runc 1.3.2's, which maps the defaults onto each other (1024 to 100) and
    // 22000 to 1204 as youki's port of it does.
    const cases: [number, number, number][] = [
      [2, 1, 1],
      [512, 20, 59],
      [1024, 39, 100],
      [2048, 79, 174],
      [22_000, 840, 1204],
      [262_144, 10_000, 10_000],
    ];
    for (const [shares, linear, logQuadratic] of cases) {
      assert.equal(cpuWeightOf(shares, 'linear'), linear, `linear ${shares}`);
      assert.equal(cpuWeightOf(shares, 'log-quadratic'), logQuadratic, `log-quadratic ${shares}`);
    }
    // None asked is the kernel's default either way.
    assert.equal(cpuWeightOf(0, 'linear'), 100);
    assert.equal(cpuWeightOf(0, 'log-quadratic'), 100);
    const pod = { resources: limits({ cpuShares: 1024 }), overhead: null };
    assert.equal(limitsOf(pod, 'log-quadratic').cpuWeight, 100);
    assert.deepEqual(
      limitFiles(host('v2'), limitsOf(pod, 'log-quadratic')).find((f) => f.file === 'cpu.weight')?.value,
      '100',
    );
    assert.ok(sliceProperties(limitsOf(pod, 'linear'), 'v2').includes('CPUWeight=39'));
    // On v1 systemd is given the shares themselves: from a weight it would make 399 of 1024.
    const v1 = sliceProperties(limitsOf(pod, 'linear'), 'v1');
    assert.ok(v1.includes('CPUShares=1024'), v1.join(' '));
    assert.ok(!v1.some((p) => p.startsWith('CPUWeight=')), v1.join(' '));
    assert.ok(sliceProperties(limitsOf(pod, 'linear'), 'hybrid').includes('CPUShares=1024'));
  });

  test("the formula follows the version the runtime's features name", () => {
    assert.equal(weightConversionOf('1.1.5+ds1').conversion, 'linear');
    assert.equal(weightConversionOf('1.3.1').conversion, 'linear');
    assert.equal(weightConversionOf('1.3.2').conversion, 'log-quadratic');
    assert.equal(weightConversionOf('1.3.6+ds1').conversion, 'log-quadratic');
    assert.equal(weightConversionOf('1.4.0-rc.3').conversion, 'log-quadratic');
    assert.equal(weightConversionOf('2.0.0').conversion, 'log-quadratic');
    const crun = weightConversionOf(undefined);
    assert.equal(crun.conversion, 'linear');
    assert.match(crun.why, /names no runc version/);
    assert.match(weightConversionOf('unknown').why, /names runc version "unknown"/);
  });

  test('systemd: every property given, so that an update lifts what is no longer asked; v2 files systemd owns as properties', () => {
    assert.deepEqual(
      sliceProperties({ ...set, unified: { 'pids.max': '321', 'memory.swap.max': 'max' } }, 'v2'),
      [
        `MemoryMax=${64 * MiB}`,
        'CPUQuota=25%',
        'CPUQuotaPeriodSec=100000us',
        'CPUWeight=1',
        'AllowedCPUs=',
        'AllowedMemoryNodes=0',
        'TasksMax=321',
        'MemoryHigh=',
        'MemoryLow=',
        'MemoryMin=',
        'MemorySwapMax=infinity',
      ],
    );
    assert.deepEqual(sliceProperties(podLimits(null), 'v2').slice(0, 2), ['MemoryMax=infinity', 'CPUQuota=']);
    assert.ok(sliceProperties(podLimits(null), 'v1').includes('CPUShares='));
  });

  test("a pod's own cgroup: a directory in /berth, or a slice in berth.slice, its containers inside", () => {
    const cgroupfs = cgroupManager('cgroupfs', host('v2'));
    assert.equal(cgroupfs.podCgroupFor('abc'), '/berth/pod_abc');
    assert.equal(cgroupfs.cgroupsPath(cgroupfs.podCgroupFor('abc'), 'c1'), '/berth/pod_abc/c1');
    const systemd = cgroupManager('systemd', host('v2'));
    assert.equal(systemd.podCgroupFor('abc'), 'berth-pod_abc.slice');
    assert.equal(systemd.podPath(systemd.podCgroupFor('abc')), '/berth.slice/berth-pod_abc.slice');
    assert.equal(
      systemd.relativePath(systemd.cgroupsPath(systemd.podCgroupFor('abc'), 'c1')),
      '/berth.slice/berth-pod_abc.slice/berth-c1.scope',
    );
  });
});
