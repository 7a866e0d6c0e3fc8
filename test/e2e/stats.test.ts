/**
 * runc update, cgroup stats of a live busybox container, and directory usage checked against du;
 * needs root.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { link, mkdir, readFile, rm, symlink, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { run } from '../../src/exec.js';
import { isMounted } from '../../src/netns/index.js';
import { EXEC_SYNC_OUTPUT_CAP, execSync } from '../../src/runtime/exec-sync.js';
import { Runc } from '../../src/runtime/runc.js';
import type { Spec } from '../../src/oci/spec.js';
import type { CgroupManager } from '../../src/cgroups/index.js';
import { directoryUsage } from '../../src/stats/disk.js';
import { runBusyboxContainer, waitForRuncStatus } from '../harness/bundles.js';
import { hostCgroups, removeCgroupTree } from '../harness/cgroups.js';

const isRoot = process.getuid?.() === 0;
const suffix = randomBytes(4).toString('hex');
const base = `/run/berth-test-exec-${suffix}`;
const CGROUP_PARENT = 'berth-test-exec';
const id = `stats-${suffix}`;
const cgroupsPath = `/${CGROUP_PARENT}/${id}`;
const T = 10_000;
const runc = new Runc({ binary: 'runc', root: join(base, 'runc'), systemdCgroup: false, timeoutMs: T });
const APPLETS = ['sh', 'sleep', 'yes', 'true', 'head', 'cat'];
const MiB = 1024 * 1024;

let spec: Spec;
let cgroups: CgroupManager;

function startContainer(cid: string): Promise<Spec> {
  return runBusyboxContainer(runc, cid, join(base, 'bundles', cid), {
    applets: APPLETS,
    args: ['/bin/sleep', '1000'],
    cgroupsPath,
    resources: { memory: { limit: 64 * MiB }, cpu: { shares: 1024 } },
  });
}

const v1File = (controller: string, file: string): string =>
  join('/sys/fs/cgroup', controller, CGROUP_PARENT, id, file);

async function readNumber(path: string): Promise<number> {
  return Number((await readFile(path, 'utf8')).trim());
}

describe('container cgroups', { skip: isRoot ? false : 'needs root' }, () => {
  before(async () => {
    cgroups = await hostCgroups();
    spec = await startContainer(id);
  });

  after(async () => {
    for (const c of await runc.list().catch(() => [])) {
      await runc.delete(c.id, { force: true }).catch(() => undefined);
    }
    await removeCgroupTree(CGROUP_PARENT);
    await rm(join(base, 'runc'), { recursive: true, force: true });
    await rm(join(base, 'bundles'), { recursive: true, force: true });
  });

  test('runc update changes the live memory limit and cpu shares', async (t) => {
    if (cgroups.host.version === 'v2') {
      t.skip('reads cgroup v1 files');
      return;
    }
    assert.equal(await readNumber(v1File('memory', 'memory.limit_in_bytes')), 64 * MiB);
    await runc.update(id, { memory: { limit: 128 * MiB }, cpu: { shares: 512 } });
    assert.equal(await readNumber(v1File('memory', 'memory.limit_in_bytes')), 128 * MiB);
    assert.equal(await readNumber(v1File('cpu', 'cpu.shares')), 512);
    await runc.update(id, { cpu: { shares: 256 } });
    assert.equal(
      await readNumber(v1File('memory', 'memory.limit_in_bytes')),
      128 * MiB,
      'absent fields stay',
    );
    assert.equal(await readNumber(v1File('cpu', 'cpu.shares')), 256);
  });

  test('runc update of an unknown container is NotFound', async () => {
    await assert.rejects(runc.update(`${id}-missing`, { cpu: { shares: 2 } }), { name: 'NotFoundError' });
  });

  test('cpu usage grows while the container burns cpu; memory is sane', async () => {
    const first = await cgroups.readStats(cgroupsPath);
    assert.ok(first, 'stats of a live container');
    assert.ok(spec.process);
    const burner = { ...spec.process, args: ['/bin/sh', '-c', 'yes > /dev/null'] };
    // Bursts of 300 ms until 50 ms of cpu are counted: where both cores are busy with something
    // else, one burst may get less than that.
    let second = first;
    for (let burst = 0; burst < 50 && second.cpuUsageNs - first.cpuUsageNs < 50_000_000n; burst++) {
      const burn = await execSync(runc, id, burner, { timeoutMs: 300, maxOutputBytes: EXEC_SYNC_OUTPUT_CAP });
      assert.equal(burn.timedOut, true);
      const now = await cgroups.readStats(cgroupsPath);
      assert.ok(now);
      second = now;
    }
    const burnt = second.cpuUsageNs - first.cpuUsageNs;
    assert.ok(burnt >= 50_000_000n, `only ${burnt} ns of cpu`);

    assert.ok(second.memoryUsageBytes > 0n);
    assert.ok(second.workingSetBytes > 0n);
    assert.ok(second.workingSetBytes <= second.memoryUsageBytes);
    assert.ok(second.rssBytes >= 0n);
    assert.ok(second.pageFaults > 0n);
    assert.ok(second.majorPageFaults >= 0n);
  });

  test('a stopped container cannot be updated; a deleted one has no stats', async () => {
    await runc.kill(id, 'SIGKILL');
    await waitForRuncStatus(runc, id, 'stopped');
    await assert.rejects(runc.update(id, { cpu: { shares: 2 } }), (err: Error) => {
      assert.equal(err.name, 'FailedPreconditionError');
      assert.match(err.message, /not running/);
      return true;
    });
    await runc.delete(id, { force: true });
    assert.equal(await cgroups.readStats(cgroupsPath), null);
  });
});

describe('directoryUsage', () => {
  const dir = join(base, 'du');
  const outside = join(base, 'du-outside');
  const mnt = join(dir, 'mnt');

  before(async () => {
    await mkdir(join(dir, 'a/b/c'), { recursive: true });
    await mkdir(outside, { recursive: true });
    await writeFile(join(dir, 'small'), 'hello\n');
    await writeFile(join(dir, 'a/b/c/big'), Buffer.alloc(MiB, 1));
    await link(join(dir, 'a/b/c/big'), join(dir, 'big-link'));
    // A symlink to a big file elsewhere and a sparse file: neither may count as its apparent size.
    await writeFile(join(outside, 'huge'), Buffer.alloc(4 * MiB, 2));
    await symlink(join(outside, 'huge'), join(dir, 'to-huge'));
    await symlink(outside, join(dir, 'to-outside-dir'));
    await writeFile(join(dir, 'sparse'), '');
    await truncate(join(dir, 'sparse'), 64 * MiB);
  });

  after(async () => {
    if (isRoot && (await isMounted(mnt))) await run('umount', [mnt], { timeoutMs: T }).catch(() => undefined);
    await rm(base, { recursive: true, force: true });
  });

  async function du(...flags: string[]): Promise<bigint> {
    const { stdout } = await run('du', ['-s', '-x', ...flags, dir], { timeoutMs: T });
    return BigInt(stdout.split('\t')[0] ?? '');
  }

  test('matches du -s -x: hard links once, symlinks not followed, sparse files by blocks', async () => {
    const u = await directoryUsage(dir);
    assert.equal(u.bytes, await du('--block-size=1'));
    assert.equal(u.inodes, await du('--inodes'));
    // root, a, a/b, a/b/c, small, big (one inode for two names), two symlinks, sparse.
    assert.equal(u.inodes, 9n);
    assert.ok(u.bytes >= BigInt(MiB) && u.bytes < BigInt(2 * MiB), `bytes ${u.bytes}`);
  });

  test('does not descend into a mount point', { skip: isRoot ? false : 'needs root' }, async () => {
    const before = await directoryUsage(dir);
    await mkdir(mnt);
    await run('mount', ['-t', 'tmpfs', '-o', 'size=8m', 'berth-test-du', mnt], { timeoutMs: T });
    await writeFile(join(mnt, 'inside'), Buffer.alloc(2 * MiB, 3));
    const after = await directoryUsage(dir);
    assert.equal(after.inodes, before.inodes, 'the mount point is skipped like du -x skips it');
    assert.equal(after.bytes, before.bytes);
    assert.equal(after.bytes, await du('--block-size=1'));
  });

  test('a file root counts itself; a missing root is NotFound', async () => {
    const u = await directoryUsage(join(dir, 'small'));
    assert.equal(u.inodes, 1n);
    await assert.rejects(directoryUsage(join(dir, 'missing')), { name: 'NotFoundError' });
  });
});
