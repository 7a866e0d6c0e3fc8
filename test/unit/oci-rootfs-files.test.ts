/**
 * Files and directories inside an image's rootfs, read and made as root on a real file system: a
 * rootfs holding FIFOs, device nodes, oversized files and links that lead out of it.
 */
import assert from 'node:assert/strict';
import { lstat, mkdir, mkdtemp, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { run } from '../../src/exec.js';
import { MAX_IMAGE_FILE_BYTES, makeDirInRoot, readInRoot } from '../../src/oci/rootfs-files.js';
import { rootSkip } from '../harness/skip.js';

let base = '';
let root = '';

before(async () => {
  base = await mkdtemp(join(tmpdir(), 'berth-rootfs-files-'));
  root = join(base, 'root');
  await mkdir(join(root, 'etc'), { recursive: true });
});

after(async () => {
  await rm(base, { recursive: true, force: true });
});

test(
  'a FIFO, a device or a socket is refused naming the file, without opening it',
  { skip: rootSkip },
  async () => {
    await run('mknod', [join(root, 'etc', 'fifo'), 'p'], { timeoutMs: 10_000 });
    // /dev/zero's numbers: a read that never ends, if it were opened.
    await run('mknod', [join(root, 'etc', 'zero'), 'c', '1', '5'], { timeoutMs: 10_000 });
    await symlink('/etc/fifo', join(root, 'etc', 'to-fifo'));
    const cases: [string, RegExp][] = [
      ['/etc/fifo', /^\/etc\/fifo in the image is a FIFO, not a regular file$/],
      ['/etc/zero', /^\/etc\/zero in the image is a character device, not a regular file$/],
      ['/etc/to-fifo', /^\/etc\/to-fifo in the image is a FIFO/],
    ];
    for (const [path, message] of cases) {
      await assert.rejects(readInRoot(root, path), { name: 'FailedPreconditionError', message });
    }
  },
);

test('a file larger than the bound is refused; one at the bound is read', async () => {
  await writeFile(join(root, 'etc', 'big'), Buffer.alloc(MAX_IMAGE_FILE_BYTES + 1, 'x'));
  await assert.rejects(readInRoot(root, '/etc/big'), {
    name: 'FailedPreconditionError',
    message: /^\/etc\/big in the image is \d+ bytes, more than the \d+ berth reads$/,
  });
  await writeFile(join(root, 'etc', 'full'), Buffer.alloc(MAX_IMAGE_FILE_BYTES, 'y'));
  assert.equal((await readInRoot(root, '/etc/full')).length, MAX_IMAGE_FILE_BYTES);
});

test('a directory, or a path through a file, reads as empty', async () => {
  await mkdir(join(root, 'etc', 'dir'));
  await writeFile(join(root, 'etc', 'plain'), 'plain\n');
  assert.equal(await readInRoot(root, '/etc/dir'), '');
  assert.equal(await readInRoot(root, '/etc/plain/below'), '');
  assert.equal(await readInRoot(root, '/etc/plain'), 'plain\n');
});

test('makeDirInRoot makes missing dirs inside the rootfs, through links that point out', async () => {
  const outside = join(base, 'outside');
  await symlink(`${outside}/deep`, join(root, 'abs'));
  await symlink('../../../../../../elsewhere', join(root, 'rel'));
  await symlink('/missing/../../../up', join(root, 'dotdot'));

  assert.equal(await makeDirInRoot(root, '/abs/sub', 'cwd'), join(root, outside, 'deep', 'sub'));
  assert.equal(await makeDirInRoot(root, '/rel', 'cwd'), join(root, 'elsewhere'));
  assert.equal(await makeDirInRoot(root, '/dotdot/x', 'cwd'), join(root, 'up', 'x'));
  await assert.rejects(lstat(outside), { code: 'ENOENT' }, 'made on the host');
  assert.equal(await readlink(join(root, 'abs')), `${outside}/deep`, 'the link itself is left alone');
  const made = await lstat(join(root, 'elsewhere'));
  assert.ok(made.isDirectory());
  assert.equal(made.mode & 0o7777, 0o755);
  // Already there: nothing to do.
  assert.equal(await makeDirInRoot(root, '/etc', 'cwd'), join(root, 'etc'));
});

test('makeDirInRoot refuses a loop, or a file on the way, naming what it was making', async () => {
  await symlink('loop', join(root, 'loop'));
  await writeFile(join(root, 'file'), '');
  await symlink('/file', join(root, 'to-file'));
  const cases: [string, RegExp][] = [
    ['/loop', /^working dir: too many levels of symbolic links$/],
    ['/file/sub', /^working dir: \/file is a regular file$/],
    ['/to-file', /^working dir: \/file is a regular file$/],
  ];
  for (const [path, message] of cases) {
    await assert.rejects(makeDirInRoot(root, path, 'working dir'), {
      name: 'FailedPreconditionError',
      message,
    });
  }
});
