/**
 * The cgroup managers' pure logic for both drivers over each version: the cgroupsPath runc is
 * given, where it and a pod's parent are below the hierarchies' roots, which file a reader opens,
 * the monitors' cgroup, what resources a host can apply; and the version probe on fake trees.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { CgroupDriver } from '../../src/cgroups/driver.js';
import { cgroupManager, type CgroupManager } from '../../src/cgroups/index.js';
import { MonitorCgroup } from '../../src/cgroups/monitor.js';
import { probeCgroupHost, type CgroupHost, type CgroupVersion } from '../../src/cgroups/probe.js';
import { controllerDir } from '../../src/cgroups/stats.js';
import { emptyResources } from '../../src/cri/container-spec.js';
import { parseMountInfo } from '../../src/mounts/mountinfo.js';
import type { ContainerResources } from '../../src/model/container.js';
import { fakeTreeMaker } from '../harness/files.js';

const VERSIONS: CgroupVersion[] = ['v1', 'hybrid', 'v2'];

function host(version: CgroupVersion, controllers: string[] = []): CgroupHost {
  return { root: '/sys/fs/cgroup', version, controllers, mountPoints: [] };
}

function manager(driver: CgroupDriver, version: CgroupVersion, controllers: string[] = []): CgroupManager {
  return cgroupManager(driver, host(version, controllers));
}

const fakeTree = fakeTreeMaker('berth-unit-cgmgr-');

describe('paths, whatever the version', () => {
  for (const version of VERSIONS) {
    test(`cgroupfs on ${version}: a path in the parent, or in /berth`, () => {
      const cgroups = manager('cgroupfs', version);
      assert.equal(cgroups.driver, 'cgroupfs');
      assert.equal(cgroups.cgroupsPath('', 'abc'), '/berth/abc');
      assert.equal(cgroups.cgroupsPath('/kubepods/burstable/pod1/', 'abc'), '/kubepods/burstable/pod1/abc');
      assert.equal(cgroups.cgroupsPath('kubepods/pod1', 'abc'), '/kubepods/pod1/abc');
      assert.equal(cgroups.relativePath(cgroups.cgroupsPath('kubepods/pod1', 'abc')), '/kubepods/pod1/abc');
      assert.equal(cgroups.podPath('kubepods/pod1'), '/kubepods/pod1');
    });

    test(`systemd on ${version}: a scope in the parent slice, or in system.slice`, () => {
      const cgroups = manager('systemd', version);
      assert.equal(cgroups.driver, 'systemd');
      assert.equal(cgroups.cgroupsPath('', 'abc'), 'system.slice:berth:abc');
      const path = cgroups.cgroupsPath('kubepods-besteffort-pod9.slice', 'abc');
      assert.equal(path, 'kubepods-besteffort-pod9.slice:berth:abc');
      assert.equal(
        cgroups.relativePath(path),
        '/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9.slice/berth-abc.scope',
      );
      assert.equal(cgroups.relativePath(cgroups.cgroupsPath('', 'abc')), '/system.slice/berth-abc.scope');
      assert.equal(
        cgroups.podPath('kubepods-besteffort-pod9.slice'),
        '/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9.slice',
      );
    });
  }

  test('a path of one driver is refused by the other', () => {
    assert.throws(() => manager('cgroupfs', 'v1').relativePath('system.slice:berth:abc'), {
      name: 'InvalidArgumentError',
    });
    assert.throws(() => manager('systemd', 'v2').relativePath('/berth/abc'), {
      name: 'InvalidArgumentError',
    });
  });

  test("the monitors' cgroup is a directory, or a slice's name with systemd", () => {
    assert.equal(new MonitorCgroup('berth-monitors', 'cgroupfs').name, 'berth-monitors');
    assert.equal(new MonitorCgroup('berth-monitors', 'systemd').name, 'berth-monitors.slice');
    assert.equal(manager('systemd', 'v2').monitors('berth-monitors').name, 'berth-monitors.slice');
    assert.equal(manager('cgroupfs', 'v1').monitors('inherit').name, null);
  });
});

describe('OOM kills the systemd driver keeps a record of', () => {
  const GROUP = { 'memory.oom.group': '1' };
  const systemd = (scopeOomPolicy: boolean): CgroupManager =>
    cgroupManager('systemd', host('v2'), { scopeOomPolicy });

  test('a scope of a group-killed container stops on an OOM kill, where systemd can', () => {
    const policy = { 'org.systemd.property.OOMPolicy': "'stop'" };
    assert.deepEqual(systemd(true).unitAnnotations(GROUP), policy);
    assert.deepEqual(systemd(true).unitAnnotations({ ...GROUP, 'pids.max': '10' }), policy);
    // Without the group kill the kernel leaves the rest running, and so must systemd.
    assert.deepEqual(systemd(true).unitAnnotations({}), {});
    assert.deepEqual(systemd(true).unitAnnotations({ 'memory.oom.group': '0' }), {});
    // An older systemd refuses the property, and runc would fail the container.
    assert.deepEqual(systemd(false).unitAnnotations(GROUP), {});
    assert.deepEqual(manager('cgroupfs', 'v2').unitAnnotations(GROUP), {});
  });

  test("a request's own unit properties never reach the spec; the driver's do, and other annotations stay", () => {
    const requested = {
      'org.systemd.property.Delegate': 'true',
      'org.systemd.property.OOMPolicy': "'continue'",
      'io.kubernetes.container.hash': 'abc',
    };
    assert.deepEqual(systemd(true).specAnnotations(requested, GROUP), {
      'io.kubernetes.container.hash': 'abc',
      'org.systemd.property.OOMPolicy': "'stop'",
    });
    assert.deepEqual(systemd(true).specAnnotations(requested, {}), { 'io.kubernetes.container.hash': 'abc' });
    assert.deepEqual(manager('cgroupfs', 'v1').specAnnotations(requested, {}), {
      'io.kubernetes.container.hash': 'abc',
    });
  });

  test("the unit that records it is the container's scope, and only with the policy", () => {
    const pod = 'kubepods-burstable-pod1.slice';
    assert.equal(systemd(true).oomRecordingUnit(`${pod}:berth:abc`, GROUP), 'berth-abc.scope');
    assert.equal(systemd(true).oomRecordingUnit('system.slice:berth:abc', GROUP), 'berth-abc.scope');
    assert.equal(systemd(true).oomRecordingUnit('system.slice:berth:abc', {}), null);
    assert.equal(systemd(false).oomRecordingUnit('system.slice:berth:abc', GROUP), null);
    assert.equal(manager('cgroupfs', 'v2').oomRecordingUnit('/berth/abc', GROUP), null);
  });
});

describe('controllerDir', () => {
  test("v1 and hybrid: under the controller's hierarchy; v2: one hierarchy for all", () => {
    const rel = '/kubepods/pod1/abc';
    for (const version of ['v1', 'hybrid'] as const) {
      assert.equal(controllerDir(host(version), 'memory', rel), '/sys/fs/cgroup/memory/kubepods/pod1/abc');
    }
    assert.equal(controllerDir(host('v2'), 'memory', rel), '/sys/fs/cgroup/kubepods/pod1/abc');
  });
});

describe('supportedResources', () => {
  const resources = (extra: Partial<ContainerResources>): ContainerResources => ({
    ...emptyResources(),
    ...extra,
  });
  const hugepages = resources({ hugepageLimits: [{ pageSize: '2MB', limit: 0 }] });

  test('hugepage limits are dropped where there is no hugetlb controller, kept where there is', () => {
    for (const version of VERSIONS) {
      assert.deepEqual(
        manager('cgroupfs', version, ['memory']).supportedResources(hugepages, 'f').hugepageLimits,
        [],
      );
      assert.deepEqual(
        manager('cgroupfs', version, ['memory', 'hugetlb']).supportedResources(hugepages, 'f').hugepageLimits,
        hugepages.hugepageLimits,
      );
    }
  });

  test('unified needs cgroup v2: refused on v1 and hybrid, naming the field', () => {
    const unified = resources({ unified: { 'memory.high': '1000000' } });
    for (const version of ['v1', 'hybrid'] as const) {
      assert.throws(() => manager('systemd', version).supportedResources(unified, 'linux'), {
        name: 'InvalidArgumentError',
        message: /linux\.unified/,
      });
    }
    assert.deepEqual(manager('systemd', 'v2').supportedResources(unified, 'linux'), unified);
  });
});

describe('probeCgroupHost', () => {
  const mounts = (root: string) =>
    parseMountInfo(
      [
        `31 23 0:28 / ${root} rw - tmpfs tmpfs rw`,
        `32 31 0:29 / ${root}/memory rw - cgroup cgroup rw,memory`,
        `33 31 0:30 / ${root}/unified rw - cgroup2 cgroup2 rw`,
        '40 23 0:37 / /elsewhere rw - cgroup cgroup rw,cpu',
        '',
      ].join('\n'),
    );

  test('v1: the mounted hierarchies name the controllers; mounts below the root only', async () => {
    const root = await fakeTree({ 'cpu,cpuacct/tasks': '', 'memory/tasks': '', 'systemd/tasks': '' });
    const found = await probeCgroupHost({ root, mounts: mounts(root) });
    assert.equal(found.version, 'v1');
    assert.deepEqual(found.controllers, ['cpu', 'cpuacct', 'memory']);
    assert.deepEqual(found.mountPoints, [`${root}/memory`, `${root}/unified`]);
  });

  test('hybrid: an unified hierarchy beside the v1 ones', async () => {
    const root = await fakeTree({ 'memory/tasks': '', 'unified/cgroup.controllers': '' });
    const found = await probeCgroupHost({ root, mounts: [] });
    assert.equal(found.version, 'hybrid');
    assert.deepEqual(found.controllers, ['memory']);
  });

  test('v2: the root cgroup.controllers', async () => {
    const root = await fakeTree({ 'cgroup.controllers': 'cpuset cpu io memory hugetlb pids\n' });
    const found = await probeCgroupHost({ root, mounts: [] });
    assert.equal(found.version, 'v2');
    assert.deepEqual(found.controllers, ['cpuset', 'cpu', 'io', 'memory', 'hugetlb', 'pids']);
  });

  test('this host', async () => {
    const found = await probeCgroupHost();
    assert.ok(found.controllers.includes('memory'));
    assert.ok(found.mountPoints.length > 0);
  });
});
