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
import { parseFlatKeyed, type CgroupStats } from '../../src/cgroups/stats.js';
import { directoryUsage } from '../../src/stats/disk.js';
import { runBusyboxContainer, waitForRuncStatus } from '../harness/bundles.js';
import { BOUND_SCALE } from '../harness/bounds.js';
import { hostProves } from '../harness/skip.js';
import {
  CGROUP_V2,
  expectedCpu,
  hostCgroups,
  liveLimits,
  removeCgroupTree,
  type LiveLimits,
} from '../harness/cgroups.js';

const isRoot = process.getuid?.() === 0;
const suffix = randomBytes(4).toString('hex');
const base = `/run/berth-test-exec-${suffix}`;
const CGROUP_PARENT = 'berth-test-exec';
const id = `stats-${suffix}`;
const cgroupsPath = `/${CGROUP_PARENT}/${id}`;
// A bound for a hang, scaled like every other (runc create took over 10 s in a loaded emulated guest).
const T = 10_000 * BOUND_SCALE;
const runc = new Runc({ binary: 'runc', root: join(base, 'runc'), systemdCgroup: false, timeoutMs: T });
const APPLETS = ['sh', 'sleep', 'yes', 'true', 'head', 'cat', 'sort'];
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

interface Gauges {
  current: string;
  anon: string;
  inactiveFile: string;
  swapCurrent: string | null;
  swapMax: string | null;
}

/** What a v2 cgroup's files say, for checking the reader against them. */
async function v2Files(dir: string) {
  const text = (file: string): Promise<string> => readFile(join(dir, file), 'utf8');
  const optional = (file: string): Promise<string | null> =>
    text(file).then(
      (t) => t.trim(),
      () => null,
    );
  const [cpuStat, memStat, current, swapCurrent, swapMax, cpuP, memP, ioP] = await Promise.all([
    text('cpu.stat'),
    text('memory.stat'),
    text('memory.current'),
    optional('memory.swap.current'),
    optional('memory.swap.max'),
    text('cpu.pressure'),
    text('memory.pressure'),
    text('io.pressure'),
  ]);
  const cpu = parseFlatKeyed(cpuStat);
  const mem = parseFlatKeyed(memStat);
  const totals = (pressure: string): { some: bigint; full: bigint } => {
    const total = (kind: string): bigint =>
      BigInt(new RegExp(`^${kind} .*total=(\\d+)`, 'm').exec(pressure)?.[1] ?? '-1');
    return { some: total('some'), full: total('full') };
  };
  return {
    usageUsec: cpu.get('usage_usec') ?? -1n,
    pgfault: mem.get('pgfault') ?? -1n,
    pgmajfault: mem.get('pgmajfault') ?? -1n,
    pressure: { cpu: totals(cpuP), memory: totals(memP), io: totals(ioP) },
    /** The figures that go up and down, as one string to compare two readings by. */
    gauges: JSON.stringify({
      current: current.trim(),
      anon: String(mem.get('anon')),
      inactiveFile: String(mem.get('inactive_file')),
      swapCurrent,
      swapMax,
    } satisfies Gauges),
  };
}

function assertBracketed(what: string, value: bigint, lo: bigint, hi: bigint): void {
  assert.ok(lo >= 0n && lo <= value && value <= hi, `${what}: ${value} not within the files' ${lo}..${hi}`);
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

  test('runc update changes the live memory limit and cpu shares', async () => {
    // memory.max and cpu.weight (which runc derives from the shares) on v2; v1's own files there.
    const limits = (memoryLimitBytes: number, shares: number): LiveLimits => ({
      memoryLimitBytes,
      cpu: expectedCpu(shares),
    });
    assert.deepEqual(await liveLimits(cgroupsPath), limits(64 * MiB, 1024));
    await runc.update(id, { memory: { limit: 128 * MiB }, cpu: { shares: 512 } });
    assert.deepEqual(await liveLimits(cgroupsPath), limits(128 * MiB, 512));
    await runc.update(id, { cpu: { shares: 256 } });
    assert.deepEqual(await liveLimits(cgroupsPath), limits(128 * MiB, 256), 'absent fields stay');
  });

  test('runc update of an unknown container is NotFound', { skip: hostProves }, async () => {
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

  test('reads every figure from its cgroup file; PSI and swap only where the kernel keeps them', async () => {
    if (cgroups.host.version !== 'v2') {
      // v1 and hybrid keep no pressure files per cgroup, and berth reads no swap there: unset.
      const stats = await cgroups.readStats(cgroupsPath);
      assert.ok(stats);
      assert.equal(stats.pressure, null);
      assert.equal(stats.swap, null);
      return;
    }
    const dir = join('/sys/fs/cgroup', CGROUP_PARENT, id);
    // Counters are bracketed by the files read just before and after; gauges must equal the file
    // when it did not change across the read (the container sleeps, so that comes soon).
    for (let attempt = 1; ; attempt++) {
      const before = await v2Files(dir);
      const stats = await cgroups.readStats(cgroupsPath);
      const after = await v2Files(dir);
      assert.ok(stats);
      assertBracketed('cpu usage', stats.cpuUsageNs, before.usageUsec * 1000n, after.usageUsec * 1000n);
      assertBracketed('page faults', stats.pageFaults, before.pgfault, after.pgfault);
      assertBracketed('major page faults', stats.majorPageFaults, before.pgmajfault, after.pgmajfault);
      assert.ok(stats.pressure, 'v2 has pressure files');
      for (const resource of ['cpu', 'memory', 'io'] as const) {
        for (const kind of ['some', 'full'] as const) {
          const line = stats.pressure[resource]?.[kind];
          assert.ok(line, `${resource} ${kind} pressure`);
          const [lo, hi] = [before.pressure[resource][kind], after.pressure[resource][kind]];
          assertBracketed(`${resource} ${kind} total`, line.totalUs, lo, hi);
          for (const avg of [line.avg10, line.avg60, line.avg300])
            assert.ok(avg >= 0 && avg <= 100, `${avg}%`);
        }
      }
      if (before.gauges !== after.gauges && attempt < 20) continue;
      assert.equal(before.gauges, after.gauges, 'memory changed across 20 reads of an idle container');
      const g = JSON.parse(before.gauges) as Gauges;
      assert.equal(stats.memoryUsageBytes, BigInt(g.current));
      assert.equal(stats.rssBytes, BigInt(g.anon));
      assert.equal(stats.workingSetBytes, BigInt(g.current) - BigInt(g.inactiveFile));
      if (g.swapCurrent === null) {
        assert.equal(stats.swap, null, 'no swap accounting, no swap figures');
      } else {
        // 64 MiB of memory and no swap limit: runc leaves memory.swap.max at "max".
        assert.equal(g.swapMax, 'max');
        assert.deepEqual(stats.swap, { usageBytes: BigInt(g.swapCurrent), limitBytes: null });
      }
      return;
    }
  });

  test(
    'PSI moves: a busy loop under a tight cpu quota, an allocation past memory.max; swap under its limit',
    { skip: CGROUP_V2 ? false : 'needs cgroup v2: v1 and hybrid keep no pressure files per cgroup' },
    async (t) => {
      const tight = `${id}-tight`;
      const tightPath = `/${CGROUP_PARENT}/${tight}`;
      const tightSpec = await runBusyboxContainer(runc, tight, join(base, 'bundles', tight), {
        applets: APPLETS,
        args: ['/bin/sleep', '1000'],
        cgroupsPath: tightPath,
        // A tenth of a core; 32 MiB of memory and 16 MiB of swap beside it.
        resources: { cpu: { quota: 10_000, period: 100_000 }, memory: { limit: 32 * MiB, swap: 48 * MiB } },
      });
      assert.ok(tightSpec.process);
      const read = async (): Promise<CgroupStats> => {
        const s = await cgroups.readStats(tightPath);
        assert.ok(s, 'stats of the tight container');
        return s;
      };
      const first = await read();
      const stalled = (s: CgroupStats, r: 'cpu' | 'memory'): bigint => s.pressure?.[r]?.some?.totalUs ?? -1n;
      assert.ok(stalled(first, 'cpu') >= 0n && stalled(first, 'memory') >= 0n, 'v2 keeps PSI here');

      // Throttled, the loop waits for cpu 90% of the time: a second of it stalls ~0.9 s. 100 ms is
      // the bound where both cores are busy with something else too (waiting counts as well).
      const burner = { ...tightSpec.process, args: ['/bin/sh', '-c', 'yes > /dev/null'] };
      let cpu = first;
      for (let burst = 0; burst < 20 && stalled(cpu, 'cpu') - stalled(first, 'cpu') < 100_000n; burst++) {
        await execSync(runc, tight, burner, { timeoutMs: 1000, maxOutputBytes: EXEC_SYNC_OUTPUT_CAP });
        cpu = await read();
      }
      const cpuStall = stalled(cpu, 'cpu') - stalled(first, 'cpu');
      assert.ok(cpuStall >= 100_000n, `cpu some stalled only ${cpuStall} us`);
      assert.ok(
        (cpu.pressure?.cpu?.full?.totalUs ?? 0n) > 0n,
        'one task throttled is the whole cgroup stalled',
      );

      // sort holds its one 96 MiB line in memory: reclaim finds nothing to free (no swap device, or
      // 16 MiB of it), and the OOM killer ends sort. The reclaim attempts are memory stalls. With a
      // whole core: at a tenth, sort took minutes to read its line in the emulated VM.
      await runc.update(tight, { cpu: { quota: 100_000, period: 100_000 } });
      const hog = {
        ...tightSpec.process,
        args: ['/bin/sh', '-c', 'head -c 100663296 /dev/zero | sort > /dev/null'],
      };
      let memory = cpu;
      for (let round = 0; round < 5 && stalled(memory, 'memory') <= stalled(first, 'memory'); round++) {
        await execSync(runc, tight, hog, { timeoutMs: 60_000, maxOutputBytes: EXEC_SYNC_OUTPUT_CAP });
        memory = await read();
      }
      assert.ok(stalled(memory, 'memory') > stalled(first, 'memory'), 'memory some stall time grew');

      const dir = join('/sys/fs/cgroup', CGROUP_PARENT, tight);
      const swapCurrent = await readFile(join(dir, 'memory.swap.current'), 'utf8').catch(() => null);
      if (swapCurrent === null) {
        t.diagnostic('this kernel does not account swap to cgroups: no swap figures');
        assert.equal(memory.swap, null);
        return;
      }
      assert.equal((await readFile(join(dir, 'memory.swap.max'), 'utf8')).trim(), String(16 * MiB));
      const swaps = (await readFile('/proc/swaps', 'utf8')).trim().split('\n').length - 1;
      t.diagnostic(`${swaps} swap device(s); memory.swap.current ${swapCurrent.trim()}`);
      assert.ok(memory.swap, 'swap is accounted');
      assert.equal(memory.swap.limitBytes, BigInt(16 * MiB));
      if (swaps === 0)
        assert.equal(memory.swap.usageBytes, 0n, 'nothing can be swapped out without a device');
      const now = await read();
      assert.ok(now.swap && now.swap.usageBytes <= now.swap.limitBytes!, 'usage stays under the limit');
    },
  );

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

describe('directoryUsage', { skip: hostProves }, () => {
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
