/**
 * A checkpoint archive read as the untrusted input it is, against real files: a tar whose member
 * claims more than the file holds, outside and inside rootfs-diff.tar, is refused when it is
 * checked, and a rootfs-diff.tar that would write through a link of the image's is refused when it
 * is applied; each time INVALID_ARGUMENT's error naming the archive member, never an untyped one.
 * Needs root (the unpacker sets owners).
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import {
  applyRootfsChanges,
  checkArchive,
  checkArchiveDir,
  type CheckedArchive,
} from '../../src/container/checkpoint-archive.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { tarball, type LayerEntry } from '../harness/images.js';
import { rootSkip as skip } from '../harness/skip.js';

const TIMEOUT_MS = 10_000;
const FIELD = 'config.image.image';
const GiB = 1024 ** 3;
let dir: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'berth-archive-read-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

const members: LayerEntry[] = [
  { type: 'file', path: 'config.dump', content: JSON.stringify({ rootfsImage: 'busybox' }) },
  {
    type: 'file',
    path: 'spec.dump',
    content: JSON.stringify({ ociVersion: '1.0.2', process: {}, root: {}, linux: {} }),
  },
  { type: 'dir', path: 'checkpoint' },
];

/** The tar of `entries`, its last member's header claiming `size` bytes, and nothing after its first data block. */
function claiming(entries: LayerEntry[], size: number): Buffer {
  const whole = tarball(entries);
  let offset = 0;
  for (const entry of entries.slice(0, -1)) offset += 512 + Math.ceil(memberBytes(entry) / 512) * 512;
  const header = Buffer.from(whole.subarray(offset, offset + 512));
  header.write(`${size.toString(8).padStart(11, '0')}\0`, 124, 12, 'latin1');
  return Buffer.concat([
    whole.subarray(0, offset),
    fixChecksum(header),
    whole.subarray(offset + 512, offset + 1024),
  ]);
}

function memberBytes(entry: LayerEntry): number {
  return entry.type === 'file' ? Buffer.from(entry.content).length : 0;
}

async function refusal(promise: Promise<unknown>): Promise<InvalidArgumentError> {
  const err = await promise.then(
    () => assert.fail('accepted'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof InvalidArgumentError, `not an InvalidArgumentError: ${String(err)}`);
  assert.equal(err.field, FIELD);
  return err;
}

test('a member claiming 8 GiB of a short file: refused naming the member', { skip }, async () => {
  const path = join(dir, 'short.tar');
  const pages: LayerEntry = { type: 'file', path: 'checkpoint/pages-1.img', content: 'p'.repeat(600) };
  await writeFile(path, claiming([...members, pages], 8 * GiB - 1));
  const err = await refusal(checkArchive(path, TIMEOUT_MS));
  assert.match(err.message, /checkpoint\/pages-1\.img.*truncated/);
});

test(
  'rootfs-diff.tar whose member claims 8 GiB it lacks: refused at the check, naming both',
  { skip },
  async () => {
    const inner = claiming([{ type: 'file', path: 'big', content: 'b'.repeat(600) }], 8 * GiB - 1);
    const diff: LayerEntry = { type: 'file', path: 'rootfs-diff.tar', content: inner };
    const path = join(dir, 'short-diff.tar');
    await writeFile(path, tarball([...members, diff]));
    const err = await refusal(checkArchive(path, TIMEOUT_MS));
    assert.match(err.message, /member rootfs-diff\.tar: .*"big".*truncated/);

    // The same files as a checkpoint image's layer holds them.
    const layer = join(dir, 'short-diff-layer');
    await mkdir(join(layer, 'checkpoint'), { recursive: true });
    for (const m of members) if (m.type === 'file') await writeFile(join(layer, m.path), m.content);
    await writeFile(join(layer, 'rootfs-diff.tar'), inner);
    const fromDir = await refusal(checkArchiveDir(layer));
    assert.match(fromDir.message, /member rootfs-diff\.tar: .*"big".*truncated/);
  },
);

test('rootfs-diff.tar with a path out of the rootfs: refused at the check', { skip }, async () => {
  const inner = tarball([{ type: 'file', path: 'x', content: 'x' }]);
  inner.write('../../escaped', 0, 100, 'latin1');
  const path = join(dir, 'escaping-diff.tar');
  await writeFile(
    path,
    tarball([...members, { type: 'file', path: 'rootfs-diff.tar', content: fixChecksum(inner) }]),
  );
  const err = await refusal(checkArchive(path, TIMEOUT_MS));
  assert.match(err.message, /member rootfs-diff\.tar: .*escapes/);
});

test(
  "rootfs-diff.tar writing through a link of the image's: INVALID_ARGUMENT naming rootfs-diff.tar, nothing written outside",
  { skip },
  async () => {
    const rootfs = join(dir, 'rootfs');
    const outside = join(dir, 'outside');
    await mkdir(rootfs);
    await mkdir(outside);
    await symlink(outside, join(rootfs, 'etc'));
    const unpacked = join(dir, 'unpacked');
    await mkdir(unpacked);
    await writeFile(
      join(unpacked, 'rootfs-diff.tar'),
      tarball([{ type: 'file', path: 'etc/passwd', content: 'root::0:0::/:/bin/sh\n' }]),
    );
    const archive = {
      path: '/checkpoints/hostile.tar',
      kind: 'tar',
      hasRootfsDiff: true,
      deleted: [],
    } as unknown as CheckedArchive;
    const err = await refusal(applyRootfsChanges(archive, unpacked, rootfs, TIMEOUT_MS));
    assert.match(err.message, /hostile\.tar: member rootfs-diff\.tar: .*etc/);
    assert.deepEqual(await readdir(outside), []);
  },
);

test('a spec.dump whose user is not ids: refused naming spec.dump, not compared', { skip }, async () => {
  for (const user of [{ uid: '0' }, { uid: 0, gid: 0, additionalGids: 6 }, { uid: -1 }, 'root']) {
    const path = join(dir, 'odd-user.tar');
    const spec = { ociVersion: '1.0.2', process: { user }, root: {}, linux: {} };
    await writeFile(
      path,
      tarball([
        members[0] as LayerEntry,
        { type: 'file', path: 'spec.dump', content: JSON.stringify(spec) },
        members[2] as LayerEntry,
      ]),
    );
    const err = await refusal(checkArchive(path, TIMEOUT_MS));
    assert.match(err.message, /spec\.dump: process\.user is not/, JSON.stringify(user));
  }
});

/** `tar` with its first header's checksum made right again after an edit. */
function fixChecksum(tar: Buffer): Buffer {
  const header = tar.subarray(0, 512);
  header.fill(' ', 148, 156);
  let sum = 0;
  for (const byte of header) sum += byte;
  header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'latin1');
  return tar;
}
