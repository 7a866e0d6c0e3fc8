/** Real overlayfs container root filesystems over hand-made layers; needs root. */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { lstat, mkdir, mkdtemp, open, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { AlreadyExistsError, NotFoundError } from '../../src/errors.js';
import { run } from '../../src/exec.js';
import {
  LayerStore,
  RootfsError,
  containerDir,
  isRootfsMounted,
  prepareRootfs,
  removeRootfs,
  sha256Digest,
} from '../../src/imagestore/index.js';
import { readMountInfo } from '../../src/mounts/mountinfo.js';
import { exists } from '../harness/files.js';

const T = 10_000;
const suffix = randomBytes(4).toString('hex');
let root = '';
let layers: LayerStore;
const ids: string[] = [];

function diffIdOf(name: string): string {
  return sha256Digest(Buffer.from(`${suffix} ${name}`));
}

function containerId(name: string): string {
  const id = `berth-test-${suffix}-${name}`;
  ids.push(id);
  return id;
}

/** A layer committed the way a pull does it, with `build` filling its tree. */
async function makeLayer(name: string, build: (dir: string) => Promise<void>): Promise<string> {
  const diffId = diffIdOf(name);
  const tmp = await layers.tmpLayerDir(diffId);
  await build(tmp);
  assert.equal(await layers.commitLayer(tmp, diffId), true);
  return diffId;
}

/** Many layers quickly: written straight into place rather than unpacked through a pull. */
async function makeBareLayers(prefix: string, count: number): Promise<string[]> {
  const diffIds: string[] = [];
  for (let i = 0; i < count; i++) {
    const diffId = diffIdOf(`${prefix}-${i}`);
    const fs = layers.fsDir(diffId);
    await mkdir(fs, { recursive: true });
    await writeFile(join(fs, `layer-${i}`), String(i));
    await writeFile(join(fs, 'shared'), String(i));
    diffIds.push(diffId);
  }
  return diffIds;
}

async function mknodWhiteout(path: string): Promise<void> {
  await run('mknod', [path, 'c', '0', '0'], { timeoutMs: T });
}

let base = '';
let middle = '';
let top = '';

before(async () => {
  root = await mkdtemp(join(tmpdir(), 'berth-rootfs-'));
  layers = new LayerStore(root);
  base = await makeLayer('base', async (dir) => {
    await mkdir(join(dir, 'etc'));
    await mkdir(join(dir, 'data'));
    await mkdir(join(dir, 'opaque'));
    await writeFile(join(dir, 'etc', 'hostname'), 'base\n');
    await writeFile(join(dir, 'data', 'keep'), 'keep\n');
    await writeFile(join(dir, 'data', 'gone'), 'gone\n');
    await writeFile(join(dir, 'opaque', 'old'), 'old\n');
  });
  middle = await makeLayer('middle', async (dir) => {
    await mkdir(join(dir, 'etc'));
    await mkdir(join(dir, 'data'));
    await writeFile(join(dir, 'etc', 'hostname'), 'middle\n');
    // The OCI whiteout `.wh.gone` as an unpacker writes it for overlayfs: a 0/0 char device.
    await mknodWhiteout(join(dir, 'data', 'gone'));
  });
  top = await makeLayer('top', async (dir) => {
    await mkdir(join(dir, 'opaque'));
    // `.wh..wh..opq`: the directory replaces the lower ones instead of merging with them.
    await run('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', join(dir, 'opaque')], { timeoutMs: T });
    await writeFile(join(dir, 'opaque', 'new'), 'new\n');
    await writeFile(join(dir, 'top'), 'top\n');
  });
});

after(async () => {
  for (const id of ids) await removeRootfs(id, root).catch(() => undefined);
  if (root) await rm(root, { recursive: true, force: true });
});

test('prepareRootfs merges the layers bottom-first, with whiteouts and opaque dirs applied', async () => {
  const id = containerId('merge');
  const rootfs = await prepareRootfs(id, [base, middle, top], root);
  const dir = containerDir(id, root);
  assert.equal(rootfs, join(dir, 'rootfs'));
  assert.equal(await isRootfsMounted(id, root), true);
  const mount = (await readMountInfo()).find((m) => m.mountPoint === rootfs);
  assert.equal(mount?.fsType, 'overlay');

  assert.equal(await readFile(join(rootfs, 'etc', 'hostname'), 'utf8'), 'middle\n', 'upper layer wins');
  assert.equal(await readFile(join(rootfs, 'data', 'keep'), 'utf8'), 'keep\n');
  assert.equal(await exists(join(rootfs, 'data', 'gone')), false, 'whiteout hides the lower file');
  assert.deepEqual((await readdir(join(rootfs, 'opaque'))).sort(), ['new']);
  assert.equal(await readFile(join(rootfs, 'top'), 'utf8'), 'top\n');
  assert.equal((await stat(rootfs)).mode & 0o777, 0o755);

  // Writes land in upper/; the shared layers stay as they were.
  await writeFile(join(rootfs, 'etc', 'hostname'), 'container\n');
  await writeFile(join(rootfs, 'created'), 'mine\n');
  await rm(join(rootfs, 'data', 'keep'));
  assert.equal(await readFile(join(dir, 'upper', 'etc', 'hostname'), 'utf8'), 'container\n');
  assert.equal(await readFile(join(dir, 'upper', 'created'), 'utf8'), 'mine\n');
  assert.ok((await lstat(join(dir, 'upper', 'data', 'keep'))).isCharacterDevice(), 'deletion is a whiteout');
  assert.equal(await readFile(join(layers.fsDir(middle), 'etc', 'hostname'), 'utf8'), 'middle\n');
  assert.equal(await readFile(join(layers.fsDir(base), 'data', 'keep'), 'utf8'), 'keep\n');
  assert.equal(await exists(join(layers.fsDir(top), 'created')), false);

  // A second container over the same layers sees none of the first one's writes.
  const other = containerId('merge-2');
  const otherRootfs = await prepareRootfs(other, [base, middle, top], root);
  assert.equal(await readFile(join(otherRootfs, 'etc', 'hostname'), 'utf8'), 'middle\n');
  assert.equal(await exists(join(otherRootfs, 'created')), false);

  await removeRootfs(id, root);
  assert.equal(await isRootfsMounted(id, root), false);
  assert.equal(await exists(dir), false);
  await removeRootfs(id, root);
  await removeRootfs(other, root);
  assert.equal(await readFile(join(layers.fsDir(base), 'data', 'keep'), 'utf8'), 'keep\n');
});

test('a single layer, and no layer at all, mount too', async () => {
  const single = containerId('single');
  const rootfs = await prepareRootfs(single, [base], root);
  assert.equal(await readFile(join(rootfs, 'data', 'gone'), 'utf8'), 'gone\n');
  await writeFile(join(rootfs, 'w'), 'w');
  await removeRootfs(single, root);

  const empty = containerId('empty');
  const emptyRootfs = await prepareRootfs(empty, [], root);
  assert.deepEqual(await readdir(emptyRootfs), []);
  await removeRootfs(empty, root);
});

test('30 and 120 layers fit the mount options page', async () => {
  for (const count of [30, 120]) {
    const diffIds = await makeBareLayers(`many${count}`, count);
    // What absolute paths would have needed.
    const absolute = diffIds.map((d) => layers.fsDir(d)).join(':').length;
    if (count === 120) assert.ok(absolute > 4096, `${absolute} bytes of lowerdir`);
    const id = containerId(`many-${count}`);
    const rootfs = await prepareRootfs(id, diffIds, root);
    assert.equal(await readFile(join(rootfs, 'shared'), 'utf8'), String(count - 1), 'last layer is on top');
    const files = (await readdir(rootfs)).filter((name) => name.startsWith('layer-'));
    assert.equal(files.length, count);
    await removeRootfs(id, root);
    assert.equal(await exists(containerDir(id, root)), false);
  }
});

test('removeRootfs detaches a busy mount lazily', async () => {
  const id = containerId('busy');
  const rootfs = await prepareRootfs(id, [base, middle], root);
  const held = await open(join(rootfs, 'etc', 'hostname'), 'r');
  try {
    await assert.rejects(run('umount', [rootfs], { timeoutMs: T }), /busy/i, 'the mount is busy');
    await removeRootfs(id, root);
    assert.equal(await isRootfsMounted(id, root), false);
    assert.equal(await exists(containerDir(id, root)), false);
    assert.equal((await held.readFile('utf8')).toString(), 'middle\n', 'the open file still works');
  } finally {
    await held.close();
  }
});

test('failures leave nothing behind', async () => {
  // A missing layer is found before anything is created.
  const missing = containerId('missing');
  const err = await prepareRootfs(missing, [base, diffIdOf('never unpacked')], root).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(err instanceof NotFoundError);
  assert.equal(err.id, diffIdOf('never unpacked'));
  assert.equal(await exists(containerDir(missing, root)), false);

  // The kernel refuses more than 500 lowers: mount itself fails, after the dirs were made.
  const tooMany = containerId('too-many');
  const diffIds = await makeBareLayers('toomany', 501);
  await assert.rejects(prepareRootfs(tooMany, diffIds, root), RootfsError);
  assert.equal(await exists(containerDir(tooMany, root)), false);
  assert.equal(await isRootfsMounted(tooMany, root), false);

  // An existing container dir is not ours to touch.
  const taken = containerId('taken');
  const rootfs = await prepareRootfs(taken, [base], root);
  await writeFile(join(rootfs, 'mine'), 'x');
  await assert.rejects(prepareRootfs(taken, [middle], root), AlreadyExistsError);
  assert.equal(await isRootfsMounted(taken, root), true);
  assert.equal(await readFile(join(rootfs, 'mine'), 'utf8'), 'x');
  await removeRootfs(taken, root);

  assert.deepEqual(await readdir(join(root, 'containers')), []);
  assert.throws(() => containerDir('../escape', root), /plain file name/);
});
