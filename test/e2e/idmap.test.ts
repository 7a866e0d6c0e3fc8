/**
 * A pinned user namespace with given mappings, and idmapped bind mounts made with it, on real
 * ext4 and tmpfs; checked from the host and from a process in the namespace. Needs root.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, chown, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { run } from '../../src/exec.js';
import { AlreadyExistsError } from '../../src/errors.js';
import { isMounted, isPinned, NetnsError } from '../../src/netns/index.js';
import { createPinnedUserns, removeUserns } from '../../src/netns/userns.js';
import type { IdMapping } from '../../src/oci/userns.js';
import { idmappedBind } from '../../src/mounts/idmap.js';
import { MountFlags, MountSyscallError, mountSyscall, unmountAll } from '../../src/mounts/syscalls.js';
import { processesMentioning } from '../../src/process/index.js';
import { probeIdmapSupport } from '../../src/host/idmap-probe.js';
import { ensureInfraRootfs } from '../../src/oci/infra.js';
import { Runc } from '../../src/runtime/runc.js';
import { probeUsernsJoin } from '../../src/runtime/userns-probe.js';
import { rootSkip } from '../harness/skip.js';

const TIMEOUT_MS = 10_000;
/** Where the pod's ids start on the host; kubelet hands out multiples of 65536. */
const BASE = 65536 * 7;
const POD: IdMapping[] = [{ containerId: 0, hostId: BASE, length: 65536 }];

let dir = '';
const mounts: string[] = [];

/** `stat -c '%u %g'` of each path, run by a process in the pinned user namespace as its root. */
async function statInside(pin: string, paths: string[]): Promise<string[]> {
  const { stdout } = await run('nsenter', [`--user=${pin}`, '--', 'stat', '-c', '%u %g', ...paths], {
    timeoutMs: TIMEOUT_MS,
  });
  return stdout.trim().split('\n');
}

async function owner(path: string): Promise<string> {
  const s = await stat(path);
  return `${s.uid} ${s.gid}`;
}

async function fileOwnedBy(path: string, uid: number): Promise<void> {
  await writeFile(path, String(uid));
  await chown(path, uid, uid);
}

describe('idmapped mounts with a pinned user namespace', { skip: rootSkip }, () => {
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-idmap-'));
    // The namespace's processes are unprivileged host ids: they must be able to get to the mounts.
    await chmod(dir, 0o755);
  });

  after(async () => {
    for (const path of mounts.reverse()) await unmountAll(path).catch(() => undefined);
    for (const name of await readdir(dir)) {
      if (name.startsWith('userns-')) await removeUserns(join(dir, name)).catch(() => undefined);
    }
    await rm(dir, { recursive: true, force: true });
  });

  test('a pinned user namespace has exactly the mappings asked for, and goes with its pin', async () => {
    const pin = join(dir, 'userns-maps');
    const gids: IdMapping[] = [{ containerId: 0, hostId: BASE + 65536, length: 1000 }];
    await createPinnedUserns({ path: pin, uids: POD, gids }, TIMEOUT_MS);
    assert.equal(await isPinned(pin), true);
    const { stdout } = await run(
      'nsenter',
      [`--user=${pin}`, '--', 'cat', '/proc/self/uid_map', '/proc/self/gid_map'],
      { timeoutMs: TIMEOUT_MS },
    );
    const lines = stdout
      .trim()
      .split('\n')
      .map((l) => l.trim().split(/\s+/).map(Number));
    assert.deepEqual(lines, [
      [0, BASE, 65536],
      [0, BASE + 65536, 1000],
    ]);
    // The helper that made it is gone: the pin alone holds the namespace.
    assert.deepEqual(await processesMentioning(pin), []);

    await assert.rejects(createPinnedUserns({ path: pin, uids: POD, gids }, TIMEOUT_MS), AlreadyExistsError);
    assert.equal(await isPinned(pin), true, 'a refused second create leaves the first pin alone');

    await removeUserns(pin);
    assert.equal(await isPinned(pin), false);
    assert.equal(existsSync(pin), false);
    await removeUserns(pin);
  });

  test('mappings the kernel refuses fail naming the pin, and leave no pin, file or process', async () => {
    const pin = join(dir, 'userns-bad');
    const overlapping: IdMapping[] = [
      { containerId: 0, hostId: BASE, length: 100 },
      { containerId: 50, hostId: BASE + 1000, length: 100 },
    ];
    const err = await createPinnedUserns({ path: pin, uids: overlapping, gids: POD }, TIMEOUT_MS).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof NetnsError, String(err));
    assert.match(err.message, new RegExp(`create user namespace ${pin}: .*EINVAL`));
    assert.equal(existsSync(pin), false);
    assert.deepEqual(
      (await readdir(dir)).filter((n) => n.startsWith('userns-bad')),
      [],
    );
  });

  for (const fs of ['ext4', 'tmpfs'] as const) {
    test(`an idmapped bind of a dir on ${fs} shows its files as their mapped owners`, async () => {
      const pin = join(dir, `userns-${fs}`);
      await createPinnedUserns({ path: pin, uids: POD, gids: POD }, TIMEOUT_MS);
      const source = join(dir, `source-${fs}`);
      const target = join(dir, `target-${fs}`);
      await mkdir(source);
      await mkdir(target);
      if (fs === 'tmpfs') {
        await mountSyscall({
          source: 'berth-test',
          target: source,
          fstype: 'tmpfs',
          flags: 0,
          data: 'size=1m',
        });
        mounts.push(source);
      }
      await chmod(source, 0o1777);
      await fileOwnedBy(join(source, 'root'), 0);
      await fileOwnedBy(join(source, 'five'), 5);
      // An id outside the mapping has no name in the namespace: the overflow id, 65534.
      await fileOwnedBy(join(source, 'outside'), 70_000);

      await idmappedBind({ source, target, userns: pin, recursive: false });
      mounts.push(target);
      assert.equal(await isMounted(target), true);

      assert.equal(await owner(join(target, 'root')), `${BASE} ${BASE}`);
      assert.equal(await owner(join(target, 'five')), `${BASE + 5} ${BASE + 5}`);
      assert.equal(await owner(join(source, 'five')), '5 5', 'the source is not changed');
      const names = ['root', 'five', 'outside'].map((n) => join(target, n));
      assert.deepEqual(await statInside(pin, names), ['0 0', '5 5', '65534 65534']);
      // Without the idmapping, the namespace sees the same disk as nobody's.
      assert.deepEqual(await statInside(pin, [join(source, 'root')]), ['65534 65534']);

      // What an id of the namespace writes through the mount is stored as its id inside.
      await run(
        'nsenter',
        [`--user=${pin}`, '--setuid=7', '--setgid=7', '--', 'touch', join(target, 'by-seven')],
        { timeoutMs: TIMEOUT_MS },
      );
      await run('nsenter', [`--user=${pin}`, '--', 'touch', join(target, 'by-root')], {
        timeoutMs: TIMEOUT_MS,
      });
      assert.equal(await owner(join(source, 'by-seven')), '7 7');
      assert.equal(await owner(join(source, 'by-root')), '0 0');
      assert.equal(await owner(join(target, 'by-seven')), `${BASE + 7} ${BASE + 7}`);

      await unmountAll(target);
      await removeUserns(pin);
    });
  }

  test('a recursive idmapped bind takes the submounts along, idmapped too', async () => {
    const pin = join(dir, 'userns-rec');
    await createPinnedUserns({ path: pin, uids: POD, gids: POD }, TIMEOUT_MS);
    const source = join(dir, 'source-rec');
    const sub = join(source, 'sub');
    await mkdir(sub, { recursive: true });
    await mountSyscall({ source: 'berth-test', target: sub, fstype: 'tmpfs', flags: 0, data: 'size=1m' });
    mounts.push(sub);
    await fileOwnedBy(join(sub, 'three'), 3);
    for (const recursive of [false, true]) {
      const target = join(dir, `target-rec-${recursive}`);
      await mkdir(target);
      await idmappedBind({ source, target, userns: pin, recursive });
      mounts.push(target);
      const seen = existsSync(join(target, 'sub', 'three'));
      assert.equal(seen, recursive, `the submount's file is seen through the ${String(recursive)} bind`);
      if (recursive) assert.equal(await owner(join(target, 'sub', 'three')), `${BASE + 3} ${BASE + 3}`);
      await unmountAll(target);
    }
    await removeUserns(pin);
  });

  test('each failure names the paths, the step and the errno, and leaves nothing mounted', async () => {
    const pin = join(dir, 'userns-fail');
    await createPinnedUserns({ path: pin, uids: POD, gids: POD }, TIMEOUT_MS);
    const source = join(dir, 'source-fail');
    const target = join(dir, 'target-fail');
    await mkdir(source);
    await mkdir(target);
    mounts.push(target);
    const failure = async (request: Parameters<typeof idmappedBind>[0]): Promise<MountSyscallError> => {
      const err = await idmappedBind(request).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof MountSyscallError, String(err));
      assert.equal(await isMounted(target), false);
      return err;
    };
    const missing = join(dir, 'no-such-dir');
    let err = await failure({ source: missing, target, userns: pin, recursive: false });
    assert.match(err.message, new RegExp(`idmapped bind of ${missing} on ${target} \\(open_tree\\): ENOENT`));
    err = await failure({ source, target: missing, userns: pin, recursive: false });
    assert.match(err.message, new RegExp(`on ${missing} \\(move_mount\\): ENOENT`));
    // A file that is no user namespace cannot lend its mappings.
    const plain = join(dir, 'plain-file');
    await writeFile(plain, '');
    err = await failure({ source, target, userns: plain, recursive: false });
    assert.match(err.message, /\(mount_setattr\): E[A-Z]+/);
    err = await failure({ source, target, userns: missing, recursive: false });
    assert.match(err.message, new RegExp(`open user namespace ${missing}\\): ENOENT`));
    // The initial user namespace maps nothing anew: the kernel refuses to idmap with it.
    await mountSyscall({ source, target: source, fstype: null, flags: MountFlags.BIND, data: null });
    mounts.push(source);
    err = await failure({ source, target, userns: '/proc/self/ns/user', recursive: false });
    assert.match(err.message, /\(mount_setattr\): EPERM/);
    await removeUserns(pin);
  });

  test('the host probe finds this kernel idmaps overlay lower layers and tmpfs, and leaves nothing', async () => {
    const scratch = join(dir, 'probe');
    // What a berthd killed mid-probe leaves: a pinned namespace and a mount in its scratch dir.
    const stale = join(scratch, 'idmap-stale');
    await mkdir(join(stale, 'tmpfs'), { recursive: true });
    await createPinnedUserns({ path: join(stale, 'userns'), uids: POD, gids: POD }, TIMEOUT_MS);
    await mountSyscall({
      source: 'berth-test',
      target: join(stale, 'tmpfs'),
      fstype: 'tmpfs',
      flags: 0,
      data: null,
    });

    assert.deepEqual(await probeIdmapSupport(scratch, TIMEOUT_MS), {
      overlayLower: true,
      tmpfs: true,
      reason: null,
    });
    assert.deepEqual(await readdir(scratch), [], 'no scratch dir left, the stale one gone too');
    const table = await readFile('/proc/self/mountinfo', 'utf8');
    assert.equal(table.includes(scratch), false, 'nothing mounted below the scratch dir');
  });

  test('the host probe says why when the filesystem cannot be idmapped', async () => {
    // overlayfs itself cannot be idmapped: a scratch dir on one fails the lower-layer check alone.
    const base = join(dir, 'on-overlay');
    const [lower, upper, work, merged] = ['lower', 'upper', 'work', 'merged'].map((n) => join(base, n)) as [
      string,
      string,
      string,
      string,
    ];
    for (const d of [lower, upper, work, merged]) await mkdir(d, { recursive: true });
    const data = `lowerdir=${lower},upperdir=${upper},workdir=${work}`;
    await mountSyscall({ source: 'overlay', target: merged, fstype: 'overlay', flags: 0, data });
    mounts.push(merged);
    const found = await probeIdmapSupport(join(merged, 'probe'), TIMEOUT_MS);
    assert.equal(found.overlayLower, false);
    assert.equal(found.tmpfs, true);
    assert.match(found.reason ?? '', /^idmapped overlay lower layer: .*\(mount_setattr\): EINVAL/);
    assert.deepEqual(await readdir(join(merged, 'probe')), []);
  });

  test('runc joins a pinned user namespace by path; the probe says why when a container cannot run', async () => {
    const rootfs = await ensureInfraRootfs(join(dir, 'root'));
    const runc = new Runc({
      binary: 'runc',
      root: join(dir, 'runc'),
      systemdCgroup: false,
      timeoutMs: TIMEOUT_MS,
    });
    const scratchParent = join(dir, 'state', 'probe');
    assert.equal(await probeUsernsJoin(runc, { rootfs, scratchParent, timeoutMs: TIMEOUT_MS }), null);
    assert.deepEqual(await readdir(scratchParent), []);
    assert.deepEqual(await runc.list(), [], 'runc deleted the probe container');

    // A rootfs without catatonit: runc joins, but the process cannot start.
    const empty = join(dir, 'empty-rootfs');
    for (const mountPoint of ['proc', 'dev', 'sys'])
      await mkdir(join(empty, mountPoint), { recursive: true });
    const reason = await probeUsernsJoin(runc, { rootfs: empty, scratchParent, timeoutMs: TIMEOUT_MS });
    assert.match(reason ?? '', /runc .* run .*catatonit/);
    assert.deepEqual(await readdir(scratchParent), []);
    assert.deepEqual(await runc.list(), []);
    assert.equal((await readFile('/proc/self/mountinfo', 'utf8')).includes(scratchParent), false);
  });

  test('the join probe runs where the root dir is a noexec filesystem (the VM keeps it in /run)', async () => {
    const noexec = join(dir, 'noexec');
    await mkdir(noexec);
    const flags = MountFlags.NOEXEC | MountFlags.NOSUID | MountFlags.NODEV;
    await mountSyscall({ source: 'tmpfs', target: noexec, fstype: 'tmpfs', flags, data: 'mode=711' });
    mounts.push(noexec);
    // A bind keeps its source's flags: the infra rootfs is what must be executable.
    const rootfs = await ensureInfraRootfs(join(noexec, 'root'));
    const runc = new Runc({
      binary: 'runc',
      root: join(dir, 'runc'),
      systemdCgroup: false,
      timeoutMs: TIMEOUT_MS,
    });
    const scratchParent = join(noexec, 'probe');
    await mkdir(scratchParent, { mode: 0o711 });
    assert.equal(await probeUsernsJoin(runc, { rootfs, scratchParent, timeoutMs: TIMEOUT_MS }), null);
    assert.deepEqual(await readdir(scratchParent), []);
  });
});
