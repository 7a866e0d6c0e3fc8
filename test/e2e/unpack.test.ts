/**
 * Unpacking real layers made by GNU tar, gzip and zstd, as root: every file type, whiteouts under
 * a real overlayfs mount, every compression, hostile archives and broken streams.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, type Stats } from 'node:fs';
import {
  chmod,
  lchown,
  link,
  lstat,
  lutimes,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { after, before, describe, test } from 'node:test';
import { ExecError } from '../../src/errors.js';
import { run } from '../../src/exec.js';
import type { LayerCompression } from '../../src/unpack/index.js';
import { UnpackError, unpackLayer, type UnpackResult } from '../../src/unpack/index.js';
import { exists } from '../harness/files.js';

const T = 60_000;
const MTIME = 1_600_000_000;
let base: string;
let counter = 0;

async function sh(file: string, args: readonly string[]): Promise<string> {
  return (await run(file, args, { timeoutMs: T })).stdout;
}

/** A fresh, empty directory under the test's base. */
async function freshDir(name: string): Promise<string> {
  const dir = join(base, `${name}-${counter++}`);
  await mkdir(dir, { recursive: true });
  return dir;
}

/** Tars `dir`'s contents the way image builders do: pax, numeric owners, xattrs. */
async function tarDir(dir: string, out: string, extra: readonly string[] = []): Promise<string> {
  await sh('tar', [
    '--format=pax',
    '--xattrs',
    '--xattrs-include=*',
    '--numeric-owner',
    ...extra,
    '-cf',
    out,
    '-C',
    dir,
    '.',
  ]);
  return out;
}

async function unpack(
  file: string,
  compression: LayerCompression,
  target?: string,
): Promise<UnpackResult & { dir: string }> {
  const dir = target ?? (await freshDir('layer'));
  const result = await unpackLayer(createReadStream(file), compression, dir, { timeoutMs: T });
  return { ...result, dir };
}

async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

async function getXattr(path: string, name: string): Promise<string | undefined> {
  try {
    return await sh('getfattr', ['-h', '--absolute-names', '--only-values', '-n', name, path]);
  } catch (err) {
    if (err instanceof ExecError) return undefined;
    throw err;
  }
}

function typeOf(st: Stats): string {
  if (st.isFile()) return 'file';
  if (st.isDirectory()) return 'dir';
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isCharacterDevice()) return 'char';
  if (st.isBlockDevice()) return 'block';
  if (st.isFIFO()) return 'fifo';
  return 'other';
}

/** Everything about a tree that unpacking must reproduce, one line per path. */
async function listing(root: string): Promise<string[]> {
  const lines: string[] = [];
  const walk = async (rel: string): Promise<void> => {
    const path = join(root, rel);
    const st = await lstat(path);
    let extra = '';
    if (st.isFile()) extra = await sha256File(path);
    if (st.isSymbolicLink()) extra = await readlink(path);
    if (st.isCharacterDevice() || st.isBlockDevice()) extra = `rdev=${st.rdev}`;
    const mtime = st.isSymbolicLink() || rel !== '' ? Math.round(st.mtimeMs) : 'root';
    const xattrs = st.isSymbolicLink()
      ? ''
      : await sh('getfattr', ['-h', '--absolute-names', '-d', '-m', '-', '-e', 'hex', path]);
    const attrs = xattrs.split('\n').filter((l) => l && !l.startsWith('#'));
    lines.push(
      [
        rel || '.',
        typeOf(st),
        (st.mode & 0o7777).toString(8),
        `${st.uid}:${st.gid}`,
        `n${st.nlink}`,
        st.size,
        mtime,
        extra,
        attrs.join(','),
      ].join(' '),
    );
    if (st.isDirectory())
      for (const name of (await readdir(path)).sort()) await walk(rel ? `${rel}/${name}` : name);
  };
  await walk('');
  return lines;
}

let richTar: string;

/** A tree with one of everything a layer can hold. */
async function buildRichTree(): Promise<string> {
  const src = await freshDir('rich-src');
  await mkdir(join(src, 'owned'));
  await writeFile(join(src, 'owned', 'file'), 'owned by 1000\n');
  await lchown(join(src, 'owned', 'file'), 1000, 1000);
  await chmod(join(src, 'owned', 'file'), 0o640);
  await lchown(join(src, 'owned'), 1000, 1000);
  await chmod(join(src, 'owned'), 0o750);
  await writeFile(join(src, 'setuid'), '#!/bin/true\n');
  await chmod(join(src, 'setuid'), 0o4755);
  await writeFile(join(src, 'setgid'), 'g');
  await lchown(join(src, 'setgid'), 0, 1000);
  await chmod(join(src, 'setgid'), 0o2750);
  await mkdir(join(src, 'sticky'));
  await chmod(join(src, 'sticky'), 0o1777);
  await symlink('owned/file', join(src, 'link'));
  await lchown(join(src, 'link'), 1000, 1000);
  await symlink('/nonexistent/absolute', join(src, 'dangling'));
  await link(join(src, 'owned', 'file'), join(src, 'hard'));
  await sh('mknod', ['-m', '666', join(src, 'null'), 'c', '1', '3']);
  await sh('mknod', ['-m', '660', join(src, 'blk'), 'b', '7', '250']);
  await sh('mknod', ['-m', '640', join(src, 'fifo'), 'p']);
  await writeFile(join(src, 'attrs'), 'with an xattr\n');
  await sh('setfattr', ['-n', 'user.berth', '-v', '1', join(src, 'attrs')]);
  await writeFile(join(src, 'random.bin'), randomBytes(3 * 1024 * 1024));
  await mkdir(join(src, 'deep', 'er', 'est'), { recursive: true });
  await writeFile(join(src, 'deep', 'er', 'est', 'leaf'), 'leaf\n');
  // Times last and deepest first: creating entries changes their dir's mtime.
  for (const p of ['deep/er/est/leaf', 'deep/er/est', 'deep/er', 'deep', 'owned/file', 'owned']) {
    await lutimes(join(src, p), MTIME, MTIME);
  }
  for (const p of [
    'setuid',
    'setgid',
    'sticky',
    'link',
    'dangling',
    'null',
    'blk',
    'fifo',
    'attrs',
    'random.bin',
  ]) {
    await lutimes(join(src, p), MTIME + 1, MTIME + 1);
  }
  return src;
}

before(async () => {
  base = await mkdtemp(join(tmpdir(), 'berth-unpack-'));
  richTar = await tarDir(await buildRichTree(), join(base, 'rich.tar'));
});

after(async () => {
  await rm(base, { recursive: true, force: true });
});

describe('file types and metadata', () => {
  test('files, dirs, symlinks, hard link, devices, fifo, setuid, owners and xattrs are preserved', async () => {
    const { dir, diffId, size } = await unpack(richTar, 'none');
    assert.equal(diffId, `sha256:${await sha256File(richTar)}`);
    assert.equal(size, (await lstat(richTar)).size);

    const file = await lstat(join(dir, 'owned', 'file'));
    assert.equal(await readFile(join(dir, 'owned', 'file'), 'utf8'), 'owned by 1000\n');
    assert.deepEqual([file.uid, file.gid, file.mode & 0o7777], [1000, 1000, 0o640]);
    assert.equal(file.mtimeMs, MTIME * 1000);

    const owned = await lstat(join(dir, 'owned'));
    assert.ok(owned.isDirectory());
    assert.deepEqual([owned.uid, owned.gid, owned.mode & 0o7777], [1000, 1000, 0o750]);
    assert.equal(owned.mtimeMs, MTIME * 1000, 'dir mtime set after its contents');
    assert.equal((await lstat(join(dir, 'deep', 'er'))).mtimeMs, MTIME * 1000);

    assert.equal((await lstat(join(dir, 'setuid'))).mode & 0o7777, 0o4755);
    const setgid = await lstat(join(dir, 'setgid'));
    assert.deepEqual([setgid.gid, setgid.mode & 0o7777], [1000, 0o2750]);
    assert.equal((await lstat(join(dir, 'sticky'))).mode & 0o7777, 0o1777);

    const link = await lstat(join(dir, 'link'));
    assert.ok(link.isSymbolicLink());
    assert.equal(await readlink(join(dir, 'link')), 'owned/file');
    assert.deepEqual([link.uid, link.gid], [1000, 1000]);
    assert.equal(link.mtimeMs, (MTIME + 1) * 1000);
    assert.equal(await readlink(join(dir, 'dangling')), '/nonexistent/absolute');

    const hard = await lstat(join(dir, 'hard'));
    assert.equal(hard.ino, file.ino, 'hard link shares the inode');
    assert.equal(hard.nlink, 2);

    const nul = await lstat(join(dir, 'null'));
    assert.ok(nul.isCharacterDevice());
    assert.equal(nul.rdev, (1 << 8) | 3);
    assert.equal(nul.mode & 0o7777, 0o666);
    const blk = await lstat(join(dir, 'blk'));
    assert.ok(blk.isBlockDevice());
    assert.equal(blk.rdev, (7 << 8) | 250);
    const fifo = await lstat(join(dir, 'fifo'));
    assert.ok(fifo.isFIFO());
    assert.equal(fifo.mode & 0o7777, 0o640);

    assert.equal(await getXattr(join(dir, 'attrs'), 'user.berth'), '1');
    assert.equal(await getXattr(join(dir, 'setuid'), 'user.berth'), undefined, 'only where present');
  });
});

describe('whiteouts', () => {
  let lowerDir: string;
  let upperDir: string;
  let mnt = '';

  before(async () => {
    const lower = await freshDir('lower-src');
    await writeFile(join(lower, 'keep'), 'keep\n');
    await writeFile(join(lower, 'gone'), 'gone\n');
    await mkdir(join(lower, 'opq'));
    await writeFile(join(lower, 'opq', 'old'), 'old\n');
    await mkdir(join(lower, 'merged'));
    await writeFile(join(lower, 'merged', 'from-lower'), 'l\n');
    const upper = await freshDir('upper-src');
    await writeFile(join(upper, '.wh.gone'), '');
    await mkdir(join(upper, 'opq'));
    await writeFile(join(upper, 'opq', '.wh..wh..opq'), '');
    await writeFile(join(upper, 'opq', 'new'), 'new\n');
    await mkdir(join(upper, 'merged'));
    await writeFile(join(upper, 'merged', 'from-upper'), 'u\n');
    lowerDir = (await unpack(await tarDir(lower, join(base, 'lower.tar')), 'none')).dir;
    upperDir = (await unpack(await tarDir(upper, join(base, 'upper.tar')), 'none')).dir;
  });

  after(async () => {
    if (mnt) await run('umount', [mnt], { timeoutMs: T }).catch(() => undefined);
  });

  test('.wh.<name> becomes a 0/0 char device and .wh..wh..opq an opaque xattr', async () => {
    const gone = await lstat(join(upperDir, 'gone'));
    assert.ok(gone.isCharacterDevice());
    assert.equal(gone.rdev, 0);
    assert.equal(await exists(join(upperDir, '.wh.gone')), false);
    assert.equal(await getXattr(join(upperDir, 'opq'), 'trusted.overlay.opaque'), 'y');
    assert.equal(await exists(join(upperDir, 'opq', '.wh..wh..opq')), false);
    assert.equal(await getXattr(join(upperDir, 'merged'), 'trusted.overlay.opaque'), undefined);
  });

  test('overlayfs hides the whited-out file and the lower contents of the opaque dir', async () => {
    const rw = await freshDir('rw');
    const work = await freshDir('work');
    mnt = await freshDir('mnt');
    await run(
      'mount',
      [
        '-t',
        'overlay',
        'overlay',
        '-o',
        `lowerdir=${upperDir}:${lowerDir},upperdir=${rw},workdir=${work}`,
        mnt,
      ],
      { timeoutMs: T },
    );
    try {
      assert.deepEqual((await readdir(mnt)).sort(), ['keep', 'merged', 'opq']);
      assert.equal(await exists(join(mnt, 'gone')), false);
      assert.deepEqual(await readdir(join(mnt, 'opq')), ['new']);
      assert.deepEqual((await readdir(join(mnt, 'merged'))).sort(), ['from-lower', 'from-upper']);
      assert.equal(await readFile(join(mnt, 'keep'), 'utf8'), 'keep\n');
    } finally {
      await run('umount', [mnt], { timeoutMs: T });
      mnt = '';
    }
  });
});

describe('layer semantics', () => {
  async function xattrHex(path: string, name: string): Promise<string | undefined> {
    const out = await sh('getfattr', ['-h', '--absolute-names', '-e', 'hex', '-n', name, path]).catch(
      () => '',
    );
    return /=(0x[0-9a-f]*)/.exec(out)?.[1];
  }

  test('a file capability survives the owner change (xattrs are set after chown)', async () => {
    const src = await freshDir('cap-src');
    await writeFile(join(src, 'ping'), 'x');
    await lchown(join(src, 'ping'), 1000, 1000);
    const cap = '0x0100000200200000000000000000000000000000'; // cap_net_raw, permitted
    await sh('setfattr', ['-n', 'security.capability', '-v', cap, join(src, 'ping')]);
    const { dir } = await unpack(await tarDir(src, join(base, 'cap.tar')), 'none');
    const st = await lstat(join(dir, 'ping'));
    assert.deepEqual([st.uid, st.gid], [1000, 1000]);
    assert.equal(await xattrHex(join(dir, 'ping'), 'security.capability'), cap);
  });

  test('overlayfs xattrs carried by a layer are not applied', async () => {
    const src = await freshDir('ovl-src');
    await mkdir(join(src, 'sneaky'));
    await sh('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', join(src, 'sneaky')]);
    const { dir } = await unpack(await tarDir(src, join(base, 'ovl.tar')), 'none');
    assert.equal(await getXattr(join(dir, 'sneaky'), 'trusted.overlay.opaque'), undefined);
  });

  test('the later of two members at one path wins', async () => {
    const a = await freshDir('dup-a');
    const b = await freshDir('dup-b');
    await writeFile(join(a, 'f2f'), 'first\n');
    await writeFile(join(b, 'f2f'), 'second\n');
    await writeFile(join(a, 'f2d'), 'file\n');
    await mkdir(join(b, 'f2d'));
    await mkdir(join(a, 'd2f'));
    await writeFile(join(a, 'd2f', 'child'), 'child\n');
    await writeFile(join(b, 'd2f'), 'now a file\n');
    await symlink('/etc', join(a, 's2f'));
    await writeFile(join(b, 's2f'), 'not a link\n');
    await writeFile(join(a, 'f2s'), 'file\n');
    await symlink('f2f', join(b, 'f2s'));
    await mkdir(join(a, 'd2d'));
    await writeFile(join(a, 'd2d', 'kept'), 'kept\n');
    await mkdir(join(b, 'd2d'));
    await chmod(join(b, 'd2d'), 0o711);
    const names = ['f2f', 'f2d', 'd2f', 's2f', 'f2s', 'd2d'];
    const tarFile = join(base, 'dup.tar');
    await sh('tar', ['--format=pax', '-cf', tarFile, '-C', a, ...names, '-C', b, ...names]);
    const { dir } = await unpack(tarFile, 'none');
    assert.equal(await readFile(join(dir, 'f2f'), 'utf8'), 'second\n');
    assert.ok((await lstat(join(dir, 'f2d'))).isDirectory());
    assert.equal(await readFile(join(dir, 'd2f'), 'utf8'), 'now a file\n');
    assert.ok((await lstat(join(dir, 's2f'))).isFile());
    assert.equal(await readlink(join(dir, 'f2s')), 'f2f');
    assert.equal(
      await readFile(join(dir, 'd2d', 'kept'), 'utf8'),
      'kept\n',
      'dir over dir keeps the contents',
    );
    assert.equal((await lstat(join(dir, 'd2d'))).mode & 0o7777, 0o711, 'and takes the later metadata');
  });

  test('a whiteout does not hide a file of its own layer, in either order', async () => {
    const src = await freshDir('wh-own');
    await writeFile(join(src, 'foo'), 'mine\n');
    await writeFile(join(src, '.wh.foo'), '');
    for (const order of [
      ['foo', '.wh.foo'],
      ['.wh.foo', 'foo'],
    ]) {
      const tarFile = join(base, `wh-own-${order[0]}.tar`);
      await sh('tar', ['--format=pax', '-cf', tarFile, '-C', src, ...order]);
      const { dir } = await unpack(tarFile, 'none');
      assert.equal(await readFile(join(dir, 'foo'), 'utf8'), 'mine\n', order.join(' then '));
      assert.deepEqual(await readdir(dir), ['foo']);
    }
  });
});

describe('compressions', () => {
  test('zstd (single and multi-frame, long window), gzip and plain give the same tree and diffId', async () => {
    const expected = `sha256:${(await sh('sha256sum', [richTar])).split(' ')[0]}`;
    const bytes = await readFile(richTar);
    const work = await freshDir('compress');

    const gz = join(work, 'layer.tar.gz');
    await sh('cp', [richTar, join(work, 'layer.tar')]);
    await sh('gzip', ['-k', '-f', join(work, 'layer.tar')]);
    const zst = join(work, 'single.tar.zst');
    await sh('zstd', ['-q', '-f', '-19', richTar, '-o', zst]);
    const long = join(work, 'long.tar.zst');
    await sh('zstd', ['-q', '-f', '--long=27', '-T2', richTar, '-o', long]);
    // Multi-frame: three independently compressed pieces, concatenated (what pigz-like tools emit).
    const third = Math.ceil(bytes.length / 3);
    const pieces: string[] = [];
    for (let i = 0; i < 3; i++) {
      const piece = join(work, `piece${i}`);
      await writeFile(piece, bytes.subarray(i * third, (i + 1) * third));
      pieces.push(piece);
    }
    await sh('zstd', ['-q', '-f', ...pieces]);
    const multi = join(work, 'multi.tar.zst');
    await writeFile(multi, Buffer.concat(await Promise.all(pieces.map((p) => readFile(`${p}.zst`)))));
    const frames = await sh('zstd', ['-l', multi]);
    assert.match(frames, /^\s+3\s/m, 'three frames');

    const plain = await unpack(richTar, 'none');
    const want = await listing(plain.dir);
    assert.equal(plain.diffId, expected);
    for (const [file, compression] of [
      [gz, 'gzip'],
      [zst, 'zstd'],
      [long, 'zstd'],
      [multi, 'zstd'],
    ] as const) {
      const got = await unpack(file, compression);
      assert.equal(got.diffId, expected, file);
      assert.equal(got.size, bytes.length, file);
      assert.deepEqual(await listing(got.dir), want, file);
    }
  });
});

describe('hostile layers', () => {
  test('"../evil" is refused and nothing is written outside', async () => {
    const src = await freshDir('trav-src');
    await writeFile(join(src, 'evil'), 'evil\n');
    const tarFile = join(base, 'trav.tar');
    await sh('tar', [
      '--format=pax',
      '-P',
      '--transform=s|^evil$|../evil|',
      '-cf',
      tarFile,
      '-C',
      src,
      'evil',
    ]);
    const parent = await freshDir('trav');
    const target = join(parent, 'target');
    await mkdir(target);
    await assert.rejects(unpack(tarFile, 'none', target), (err: unknown) => {
      assert.ok(err instanceof UnpackError, String(err));
      assert.equal(err.entry, '../evil');
      return true;
    });
    assert.deepEqual(await readdir(parent), ['target']);
  });

  test('a write through a symlink that points out is refused', async () => {
    const outside = await freshDir('outside');
    const a = await freshDir('sym-a');
    const b = await freshDir('sym-b');
    await symlink(outside, join(a, 'link'));
    await mkdir(join(b, 'link'));
    await writeFile(join(b, 'link', 'file'), 'pwned\n');
    const tarFile = join(base, 'sym.tar');
    await sh('tar', ['--format=pax', '-cf', tarFile, '-C', a, 'link', '-C', b, 'link/file']);
    await assert.rejects(unpack(tarFile, 'none'), (err: unknown) => {
      assert.ok(err instanceof UnpackError, String(err));
      assert.equal(err.entry, 'link/file');
      assert.match(err.message, /symlink/);
      return true;
    });
    assert.deepEqual(await readdir(outside), []);
  });

  test('hard links to outside the layer are refused', async () => {
    const parent = await freshDir('hl');
    const secret = join(parent, 'secret');
    await writeFile(secret, 'secret\n');
    const src = await freshDir('hl-src');
    await writeFile(join(src, 'a'), 'a\n');
    await link(join(src, 'a'), join(src, 'b'));
    for (const [name, to] of [
      ['relative', '../secret'],
      ['absolute', secret],
    ] as const) {
      const tarFile = join(base, `hl-${name}.tar`);
      await sh('tar', [
        '--format=pax',
        '-P',
        `--transform=flags=h;s|^a$|${to}|`,
        '-cf',
        tarFile,
        '-C',
        src,
        'a',
        'b',
      ]);
      const target = join(parent, `target-${name}`);
      await mkdir(target);
      await assert.rejects(unpack(tarFile, 'none', target), (err: unknown) => {
        assert.ok(err instanceof UnpackError, String(err));
        assert.equal(err.entry, 'b');
        return true;
      });
      assert.equal(await exists(join(target, 'b')), false);
    }
    assert.equal((await lstat(secret)).nlink, 1, 'no new link to the outside file');
  });

  test('a hard link to a symlink that points out links the symlink, not what it points to', async () => {
    const outside = join(await freshDir('hls'), 'secret');
    await writeFile(outside, 'secret\n');
    const src = await freshDir('hls-src');
    await symlink(outside, join(src, 'evil'));
    await link(join(src, 'evil'), join(src, 'x'));
    const tarFile = join(base, 'hls.tar');
    await sh('tar', ['--format=pax', '-cf', tarFile, '-C', src, 'evil', 'x']);
    const { dir } = await unpack(tarFile, 'none');
    assert.ok((await lstat(join(dir, 'x'))).isSymbolicLink());
    assert.equal((await lstat(join(dir, 'x'))).nlink, 2);
    assert.equal((await lstat(outside)).nlink, 1);
  });
});

describe('broken streams', () => {
  async function noZstdChildren(): Promise<void> {
    const { stdout } = await run('pgrep', ['-l', '-P', String(process.pid)], { timeoutMs: T }).catch(() => ({
      stdout: '',
    }));
    assert.doesNotMatch(stdout, /zstd/, 'no zstd child left');
  }

  test('a truncated gzip or zstd stream rejects', async () => {
    const work = await freshDir('trunc');
    await sh('cp', [richTar, join(work, 'l.tar')]);
    await sh('gzip', ['-k', '-f', join(work, 'l.tar')]);
    await sh('zstd', ['-q', '-f', join(work, 'l.tar')]);
    for (const [file, compression, pattern] of [
      ['l.tar.gz', 'gzip', /gzip: unexpected end of file/],
      ['l.tar.zst', 'zstd', /zstd exited with code 1/],
    ] as const) {
      const whole = await readFile(join(work, file));
      const cut = join(work, `cut-${file}`);
      await writeFile(cut, whole.subarray(0, Math.floor(whole.length / 2)));
      await assert.rejects(unpack(cut, compression), (err: unknown) => {
        assert.ok(err instanceof UnpackError, String(err));
        assert.match(err.message, pattern);
        return true;
      });
    }
    await noZstdChildren();
  });

  test('a source stream error rejects, for every compression', async () => {
    const work = await freshDir('srcerr');
    await sh('cp', [richTar, join(work, 'l.tar')]);
    await sh('gzip', ['-k', '-f', join(work, 'l.tar')]);
    await sh('zstd', ['-q', '-f', join(work, 'l.tar')]);
    for (const [file, compression] of [
      ['l.tar', 'none'],
      ['l.tar.gz', 'gzip'],
      ['l.tar.zst', 'zstd'],
    ] as const) {
      const data = await readFile(join(work, file));
      const source = new Readable({ read: () => undefined });
      source.push(data.subarray(0, Math.floor(data.length / 3)));
      setTimeout(() => source.destroy(new Error('connection reset')), 50);
      await assert.rejects(
        unpackLayer(source, compression, await freshDir('e'), { timeoutMs: T }),
        (err: unknown) => {
          assert.ok(err instanceof UnpackError, String(err));
          assert.match(err.message, /connection reset/);
          return true;
        },
      );
    }
    await noZstdChildren();
  });

  test('a missing zstd program is a clear error', async () => {
    const path = process.env.PATH;
    process.env.PATH = '/nonexistent';
    try {
      await assert.rejects(unpack(richTar, 'zstd'), (err: unknown) => {
        assert.ok(err instanceof UnpackError, String(err));
        assert.match(err.message, /zstd program is not installed/);
        return true;
      });
    } finally {
      process.env.PATH = path;
    }
  });

  test('a stalled source times out instead of hanging', async () => {
    const data = await readFile(richTar);
    for (const compression of ['none', 'zstd'] as const) {
      const source = new Readable({ read: () => undefined });
      source.push(compression === 'none' ? data.subarray(0, 100_000) : Buffer.from([0x28, 0xb5, 0x2f, 0xfd]));
      await assert.rejects(
        unpackLayer(source, compression, await freshDir('stall'), { timeoutMs: 300 }),
        /timed out/,
      );
    }
    await noZstdChildren();
  });
});

describe('size', () => {
  test('a 60 MB layer unpacks in reasonable time', async (t) => {
    const src = await freshDir('big-src');
    const out = createWriteStream(join(src, 'random.bin'));
    for (let i = 0; i < 60; i++) out.write(randomBytes(1024 * 1024));
    out.end();
    await finished(out);
    const tarFile = await tarDir(src, join(base, 'big.tar'));
    await sh('zstd', ['-q', '-f', '-T0', tarFile]);
    await sh('gzip', ['-k', '-f', '-1', tarFile]);
    const want = await sha256File(join(src, 'random.bin'));
    for (const [file, compression] of [
      [tarFile, 'none'],
      [`${tarFile}.gz`, 'gzip'],
      [`${tarFile}.zst`, 'zstd'],
    ] as const) {
      const started = process.hrtime.bigint();
      const got = await unpack(file, compression);
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      const mbps = got.size / 1024 / 1024 / (ms / 1000);
      t.diagnostic(
        `${compression}: ${(got.size / 1024 / 1024).toFixed(1)} MiB tar in ${ms.toFixed(0)} ms (${mbps.toFixed(0)} MiB/s)`,
      );
      assert.equal(await sha256File(join(got.dir, 'random.bin')), want);
      assert.ok(ms < 30_000, `${compression} took ${ms} ms`);
      await rm(got.dir, { recursive: true, force: true });
    }
  });
});
