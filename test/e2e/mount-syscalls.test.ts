/** mount(2) and umount2(2) through koffi, on real tmpfs mounts; needs root. */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { isMounted } from '../../src/netns/index.js';
import { MountFlags, MountSyscallError, mountSyscall, unmountAll } from '../../src/mounts/syscalls.js';
import { readMountInfo } from '../../src/mounts/mountinfo.js';

let dir = '';

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'berth-mount-syscalls-'));
});

after(async () => {
  for (const name of ['a', 'busy']) await unmountAll(join(dir, name)).catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

function tmpfs(target: string, data = 'size=1m'): Parameters<typeof mountSyscall>[0] {
  return { source: 'berth-test', target, fstype: 'tmpfs', flags: MountFlags.NOSUID | MountFlags.NODEV, data };
}

test('mounts with the flags and data given, and unmounts every mount stacked on the path', async () => {
  const target = join(dir, 'a');
  await mkdir(target);
  await mountSyscall(tmpfs(target, 'size=1m,mode=1700'));
  await mountSyscall(tmpfs(target));
  const entries = (await readMountInfo()).filter((e) => e.mountPoint === target);
  assert.equal(entries.length, 2);
  const options = (await readFile('/proc/self/mounts', 'utf8')).split('\n').find((l) => l.includes(target));
  assert.match(options ?? '', /nosuid,nodev/);

  assert.equal(await unmountAll(target), 2);
  assert.equal(await isMounted(target), false);
  assert.equal(await unmountAll(target), 0, 'idempotent: no mount point');
  assert.equal(await unmountAll(join(dir, 'missing')), 0, 'idempotent: no such path');

  // maxMounts bounds a path something keeps mounting on: exactly that many is fine, one more is not.
  for (let i = 0; i < 3; i++) await mountSyscall(tmpfs(target));
  await assert.rejects(unmountAll(target, 1), (err: unknown) => {
    assert.ok(err instanceof MountSyscallError);
    assert.match(err.message, /gave up after 2 unmounts/);
    return true;
  });
  assert.equal(await unmountAll(target, 1), 1, 'the last of the three');
  assert.equal(await isMounted(target), false);
});

test('a busy mount is detached lazily, and what holds it keeps working', async () => {
  const target = join(dir, 'busy');
  await mkdir(target);
  await mountSyscall(tmpfs(target));
  await writeFile(join(target, 'f'), 'held');
  const held = await open(join(target, 'f'), 'r');
  try {
    assert.equal(await unmountAll(target), 1);
    assert.equal(await isMounted(target), false);
    assert.equal(await held.readFile('utf8'), 'held');
  } finally {
    await held.close();
  }
});

test('a refused mount names the target and the errno', async () => {
  const target = join(dir, 'refused');
  await mkdir(target);
  const err = await mountSyscall({ ...tmpfs(target), fstype: 'berth-no-such-fs' }).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(err instanceof MountSyscallError);
  assert.equal(err.code, 'ENODEV');
  assert.match(err.message, new RegExp(`mount berth-no-such-fs on ${target}: ENODEV \\(no such device\\)`));
  await assert.rejects(mountSyscall(tmpfs(join(dir, 'no-such-dir'))), /ENOENT/);
});
