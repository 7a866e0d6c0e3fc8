/**
 * Finding a process's cgroup in each mounted hierarchy, from /proc/<pid>/cgroup and mountinfo;
 * and, as root, removing a cgroup from all of them.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  ensureCgroup,
  membershipsOf,
  mountOf,
  moveProcess,
  parseProcCgroup,
  removeCgroupEverywhere,
} from '../../src/cgroups/hierarchy.js';
import { probeCgroupHost } from '../../src/cgroups/probe.js';
import { parseMountInfo } from '../../src/mounts/mountinfo.js';
import { removeCgroupTree } from '../harness/cgroups.js';
import { rootSkip } from '../harness/skip.js';

const HYBRID_MOUNTS = parseMountInfo(
  [
    '25 20 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:4 - tmpfs tmpfs ro,mode=755',
    '26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid shared:5 - cgroup2 cgroup2 rw,nsdelegate',
    '27 25 0:25 / /sys/fs/cgroup/systemd rw,nosuid shared:6 - cgroup cgroup rw,xattr,name=systemd',
    '28 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:7 - cgroup cgroup rw,cpu,cpuacct',
    '29 25 0:27 / /sys/fs/cgroup/memory rw,nosuid shared:8 - cgroup cgroup rw,memory',
    '',
  ].join('\n'),
);

test('parses each line of /proc/<pid>/cgroup, paths with colons included', () => {
  assert.deepEqual(parseProcCgroup('12:name=systemd:/berth\n4:cpu,cpuacct:/a:b\n0::/\n'), [
    { controllers: 'name=systemd', path: '/berth' },
    { controllers: 'cpu,cpuacct', path: '/a:b' },
    { controllers: '', path: '/' },
  ]);
});

test('finds the mount of v1, named and v2 hierarchies on a hybrid host', () => {
  const mountPoints = parseProcCgroup('9:name=systemd:/\n4:memory:/x\n2:cpu,cpuacct:/\n0::/\n').map((line) =>
    mountOf(line, HYBRID_MOUNTS),
  );
  assert.deepEqual(mountPoints, [
    '/sys/fs/cgroup/systemd',
    '/sys/fs/cgroup/memory',
    '/sys/fs/cgroup/cpu,cpuacct',
    '/sys/fs/cgroup/unified',
  ]);
});

test('a hierarchy that is not mounted has no mount', () => {
  assert.equal(mountOf({ controllers: 'pids', path: '/' }, HYBRID_MOUNTS), null);
});

test('on a v2-only host the one hierarchy is the cgroup2 mount', () => {
  const mounts = parseMountInfo('25 20 0:23 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n');
  assert.equal(mountOf({ controllers: '', path: '/berth' }, mounts), '/sys/fs/cgroup');
});

test(
  'removeCgroupEverywhere kills what runs in a cgroup and removes it, children first',
  { skip: rootSkip },
  async () => {
    const name = `berth-test-remove-${randomBytes(4).toString('hex')}`;
    const sleeper = spawn('sleep', ['60'], { stdio: 'ignore' });
    try {
      assert.ok(sleeper.pid);
      const memberships = await membershipsOf('self');
      for (const { mountPoint } of memberships) {
        // One level at a time: a new cpuset cgroup takes its cpus and mems from its parent.
        await ensureCgroup(mountPoint, name);
        await moveProcess(sleeper.pid, await ensureCgroup(mountPoint, `${name}/child`));
      }
      const { mountPoints } = await probeCgroupHost();
      const exited = new Promise((resolve) => sleeper.once('exit', resolve));
      await removeCgroupEverywhere(`/${name}`, 5_000, mountPoints);
      assert.equal(await exited, null, 'the process in the cgroup was not killed');
      for (const { mountPoint } of memberships) assert.equal(existsSync(join(mountPoint, name)), false);
      // Gone already: nothing to do.
      await removeCgroupEverywhere(`/${name}`, 5_000, mountPoints);
      await assert.rejects(removeCgroupEverywhere('/', 5_000, mountPoints), /refusing/);
    } finally {
      sleeper.kill('SIGKILL');
      await removeCgroupTree(name);
    }
  },
);
