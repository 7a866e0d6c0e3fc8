/** Real pinned network namespaces; needs root. */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../../src/exec.js';
import {
  createPinnedNetns,
  isMounted,
  isPinned,
  listNetns,
  prepareNetnsDir,
  removeNetns,
  unmountNetns,
} from '../../src/netns/index.js';
import { parseMountInfo, unescapeMountPath } from '../../src/mounts/mountinfo.js';
import { exists } from '../harness/files.js';
import { nsInode } from '../harness/namespaces.js';

const base = `/run/berth-test-${randomBytes(4).toString('hex')}`;
const dir = join(base, 'netns');
const T = 10_000;

/** Undoes everything, whatever state a failed test left: pins, the dir's self-bind, the files. */
async function cleanup(): Promise<void> {
  for (const p of await listNetns(dir, '')) await removeNetns(p).catch(() => undefined);
  for (let i = 0; i < 4 && (await isMounted(dir)); i++) {
    await run('umount', ['--lazy', dir], { timeoutMs: T }).catch(() => undefined);
  }
  await rm(base, { recursive: true, force: true });
}

before(async () => {
  await prepareNetnsDir(dir);
});

after(cleanup);

test('prepareNetnsDir makes a shared self-bind, once', async () => {
  await prepareNetnsDir(dir);
  await Promise.all([prepareNetnsDir(dir), prepareNetnsDir(dir)]);
  const mounts = parseMountInfo(await readFile('/proc/self/mountinfo', 'utf8'));
  const own = mounts.filter((m) => m.mountPoint === dir);
  assert.equal(own.length, 1, 'bound on itself exactly once');
  assert.ok(
    own[0]?.optionalFields.some((f) => f.startsWith('shared:')),
    'shared propagation',
  );
});

test('under a shared parent mount (as / is on systemd hosts), each pin is mounted once', async () => {
  const parent = join(base, 'shared-parent');
  const sharedDir = join(parent, 'netns');
  await mkdir(parent, { recursive: true });
  await run('mount', ['-t', 'tmpfs', 'tmpfs', parent], { timeoutMs: T });
  try {
    await run('mount', ['--make-shared', parent], { timeoutMs: T });
    await prepareNetnsDir(sharedDir);
    const pin = await createPinnedNetns(sharedDir, 'berth-test-shared', T);
    const mounts = parseMountInfo(await readFile('/proc/self/mountinfo', 'utf8'));
    assert.equal(mounts.filter((m) => m.mountPoint === pin).length, 1, 'the pin propagated onto its parent');
    await removeNetns(pin);
    const after = parseMountInfo(await readFile('/proc/self/mountinfo', 'utf8'));
    assert.equal(after.filter((m) => m.mountPoint === pin).length, 0);
  } finally {
    await run('umount', ['--recursive', '--lazy', parent], { timeoutMs: T }).catch(() => undefined);
  }
});

test('create, inspect, unmount and remove a pinned netns', async () => {
  const path = await createPinnedNetns(dir, 'berth-test-a', T);
  assert.equal(path, join(dir, 'berth-test-a'));
  assert.equal(await isMounted(path), true);
  assert.equal(await isPinned(path), true);
  // The netns dir is a mount point too (a shared self-bind), of tmpfs, not of a namespace.
  assert.equal(await isPinned(dir), false);
  assert.notEqual(await nsInode(path), await nsInode('/proc/self/ns/net'));

  const { stdout } = await run('nsenter', [`--net=${path}`, 'ip', '-j', 'link'], { timeoutMs: T });
  const links = JSON.parse(stdout) as { ifname: string; operstate: string }[];
  assert.deepEqual(
    links.map((l) => l.ifname),
    ['lo'],
  );
  assert.equal(links[0]?.operstate, 'DOWN', 'lo is left to the CNI loopback plugin');

  assert.deepEqual(await listNetns(dir, 'berth-test-'), [path]);
  assert.deepEqual(await listNetns(dir, 'other-'), []);

  await unmountNetns(path);
  assert.equal(await isMounted(path), false);
  assert.equal(await isPinned(path), false, 'a pin that lost its mount is a plain file');
  assert.equal(await exists(path), true, 'unmount keeps the file');
  assert.equal(await isPinned(join(dir, 'never-existed')), false);
  await unmountNetns(path);
  await unmountNetns(join(dir, 'never-existed'));

  await removeNetns(path);
  assert.equal(await exists(path), false);
  await removeNetns(path);
});

test('two pins are two different namespaces', async () => {
  const a = await createPinnedNetns(dir, 'berth-test-b1', T);
  const b = await createPinnedNetns(dir, 'berth-test-b2', T);
  try {
    assert.notEqual(await nsInode(a), await nsInode(b));
  } finally {
    await removeNetns(a);
    await removeNetns(b);
  }
});

test('removeNetns copes with a stacked mount', async () => {
  const path = await createPinnedNetns(dir, 'berth-test-c', T);
  await run('mount', ['--bind', path, path], { timeoutMs: T });
  await removeNetns(path);
  assert.equal(await isMounted(path), false);
  assert.equal(await exists(path), false);
});

test('an existing name is refused and the pin left alone', async () => {
  const path = await createPinnedNetns(dir, 'berth-test-d', T);
  try {
    const inode = await nsInode(path);
    await assert.rejects(createPinnedNetns(dir, 'berth-test-d', T), { name: 'AlreadyExistsError' });
    assert.equal(await nsInode(path), inode);
    assert.equal(await isMounted(path), true);
  } finally {
    await removeNetns(path);
  }
});

test('bad dir or name: refused, nothing touched', async () => {
  await assert.rejects(createPinnedNetns(join(base, 'no-such-dir'), 'x', T), { name: 'NetnsError' });
  // A stale plain file elsewhere is not touched by a bad name either.
  await writeFile(join(dir, 'keep'), '');
  await assert.rejects(createPinnedNetns(dir, '../keep', T), { name: 'InvalidArgumentError' });
  assert.equal(await exists(join(dir, 'keep')), true);
  await rm(join(dir, 'keep'));
});

test('when unshare fails, its stderr is in the error and no file is left', async () => {
  const fakeBin = join(base, 'fake-bin');
  await mkdir(fakeBin, { recursive: true });
  await writeFile(
    join(fakeBin, 'unshare'),
    '#!/bin/sh\necho "unshare: mount failed: Resource busy" >&2\nexit 1\n',
    {
      mode: 0o755,
    },
  );
  const savedPath = process.env.PATH;
  process.env.PATH = `${fakeBin}:${savedPath ?? ''}`;
  try {
    await assert.rejects(createPinnedNetns(dir, 'berth-test-e', T), (err: Error) => {
      assert.equal(err.name, 'NetnsError');
      assert.match(err.message, /mount failed: Resource busy/);
      return true;
    });
    assert.equal(await exists(join(dir, 'berth-test-e')), false);
    // A "successful" unshare that mounted nothing is caught too.
    await writeFile(join(fakeBin, 'unshare'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
    await assert.rejects(createPinnedNetns(dir, 'berth-test-e', T), /nothing is mounted/);
    assert.equal(await exists(join(dir, 'berth-test-e')), false);
  } finally {
    process.env.PATH = savedPath;
  }
});

test('mountinfo paths: octal escapes and optional fields', () => {
  assert.equal(unescapeMountPath('/run/a\\040b\\134c'), '/run/a b\\c');
  const entries = parseMountInfo(
    [
      '42 27 254:0 /run/x /run/my\\040netns rw,relatime shared:1 - ext4 /dev/vda rw',
      '43 42 0:4 net:[4026532177] /run/my\\040netns/p rw shared:2 master:3 - nsfs nsfs rw',
      '44 27 0:5 / /mnt rw - tmpfs tmpfs rw',
    ].join('\n'),
  );
  assert.deepEqual(
    entries.map((e) => [e.mountPoint, e.optionalFields, e.fsType]),
    [
      ['/run/my netns', ['shared:1'], 'ext4'],
      ['/run/my netns/p', ['shared:2', 'master:3'], 'nsfs'],
      ['/mnt', [], 'tmpfs'],
    ],
  );
});

test('a pin whose path has a space is seen as mounted', async () => {
  const spaced = join(base, 'with space');
  await prepareNetnsDir(spaced);
  try {
    const path = await createPinnedNetns(spaced, 'berth-test-f', T);
    assert.equal(await isMounted(path), true);
    await removeNetns(path);
    assert.equal(await isMounted(path), false);
  } finally {
    await run('umount', ['--lazy', spaced], { timeoutMs: T }).catch(() => undefined);
  }
});
