/** The streaming tar reader, on archives made by GNU tar in each of its formats. */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, symlink, link, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { run } from '../../src/exec.js';
import { UnpackError } from '../../src/unpack/errors.js';
import { TarReader, type TarEntry } from '../../src/unpack/tar-reader.js';

const T = 30_000;
let tmp: string;
let src: string;

interface Member extends TarEntry {
  data: string;
}

async function tar(archive: string, args: readonly string[]): Promise<string> {
  const path = join(tmp, archive);
  await run('tar', ['-cf', path, '-C', src, ...args], { timeoutMs: T });
  return path;
}

/** The file in `size`-byte pieces: headers and data then straddle chunk boundaries. */
async function* chunks(path: string, size: number): AsyncGenerator<Buffer> {
  const bytes = await readFile(path);
  for (let i = 0; i < bytes.length; i += size) yield bytes.subarray(i, i + size);
}

async function readAll(path: string, chunk = 64 * 1024): Promise<Map<string, Member>> {
  const reader = new TarReader(chunks(path, chunk));
  const members = new Map<string, Member>();
  for (let e = await reader.next(); e !== undefined; e = await reader.next()) {
    const parts: Buffer[] = [];
    for await (const part of reader.body()) parts.push(part);
    members.set(e.path, { ...e, data: Buffer.concat(parts).toString('latin1') });
  }
  await reader.drain();
  return members;
}

function get(members: Map<string, Member>, path: string): Member {
  const m = members.get(path);
  assert.ok(m, `member ${path} in [${[...members.keys()].join(', ')}]`);
  return m;
}

async function corrupt(path: string, offset: number, out: string): Promise<string> {
  const bytes = await readFile(path);
  bytes[offset] = (bytes[offset] ?? 0) ^ 0x55;
  const target = join(tmp, out);
  await writeFile(target, bytes);
  return target;
}

const LONG_DIR = `${'d'.repeat(60)}/${'e'.repeat(60)}`; // > 100 bytes with the file: needs the ustar prefix
const LONG_NAME = `${'n'.repeat(150)}/${'m'.repeat(150)}`; // > 255 bytes: pax path or GNU 'L'
const LONG_TARGET = `/${'t'.repeat(200)}`; // > 100 bytes: pax linkpath or GNU 'K'
const BIG = `${createHash('sha256').update('x').digest('hex').repeat(3000)}tail`; // not block-aligned

before(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'berth-tar-'));
  src = join(tmp, 'src');
  await mkdir(join(src, 'dir', LONG_DIR), { recursive: true });
  await writeFile(join(src, 'dir', LONG_DIR, 'file.txt'), 'in a deep dir\n');
  await mkdir(join(src, LONG_NAME), { recursive: true });
  await writeFile(join(src, LONG_NAME, 'f'), 'long\n');
  await writeFile(join(src, 'big'), BIG);
  await writeFile(join(src, 'empty'), '');
  await symlink('big', join(src, 'short-link'));
  await symlink(LONG_TARGET, join(src, 'long-link'));
  await link(join(src, 'big'), join(src, 'hard'));
  await writeFile(join(src, 'attrs'), 'x');
  await run('setfattr', ['-n', 'user.berth', '-v', '1', join(src, 'attrs')], { timeoutMs: T });
  await run('setfattr', ['-n', 'user.empty', '-v', '', join(src, 'attrs')], { timeoutMs: T });
});

after(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe('ustar', () => {
  test('splits long paths over prefix and name; reads files, dirs, links', async () => {
    const path = await tar('ustar.tar', [
      '--format=ustar',
      '--owner=:1234',
      '--group=:5678',
      'dir',
      'big',
      'empty',
      'short-link',
      'hard',
    ]);
    for (const chunk of [7, 509, 65536]) {
      const m = await readAll(path, chunk);
      const deep = get(m, `dir/${LONG_DIR}/file.txt`);
      assert.equal(deep.type, 'file');
      assert.equal(deep.data, 'in a deep dir\n');
      assert.equal(deep.uid, 1234);
      assert.equal(deep.gid, 5678);
      assert.equal(get(m, 'dir').type, 'dir', 'trailing slash dropped');
      assert.equal(get(m, 'big').data, BIG);
      assert.equal(get(m, 'big').size, BIG.length);
      assert.equal(get(m, 'empty').size, 0);
      assert.equal(get(m, 'short-link').type, 'symlink');
      assert.equal(get(m, 'short-link').linkPath, 'big');
      assert.equal(get(m, 'hard').type, 'hardlink');
      assert.equal(get(m, 'hard').linkPath, 'big');
      assert.equal(get(m, 'hard').size, 0);
    }
  });
});

describe('pax', () => {
  test('path, linkpath, uid/gid beyond octal, fractional mtime, xattrs', async () => {
    const path = await tar('pax.tar', [
      '--format=pax',
      '--xattrs',
      '--xattrs-include=user.*',
      '--owner=:3000000',
      '--group=:3000001',
      '--mtime=@1700000000.25',
      LONG_NAME,
      'long-link',
      'attrs',
      'big',
    ]);
    for (const chunk of [3, 65536]) {
      const m = await readAll(path, chunk);
      const f = get(m, `${LONG_NAME}/f`);
      assert.equal(f.data, 'long\n');
      assert.equal(f.uid, 3000000);
      assert.equal(f.gid, 3000001);
      assert.equal(f.mtime, 1700000000.25);
      assert.equal(get(m, 'long-link').linkPath, LONG_TARGET);
      const attrs = get(m, 'attrs');
      assert.deepEqual(attrs.xattrs.get('user.berth'), Buffer.from('1'));
      assert.deepEqual(attrs.xattrs.get('user.empty'), Buffer.alloc(0));
      assert.equal(get(m, 'big').xattrs.size, 0);
      assert.equal(get(m, 'big').data, BIG);
    }
  });

  test('a global header applies to every later member', async () => {
    const path = await tar('global.tar', [
      '--format=pax',
      '--pax-option=uid=4242,comment=hi',
      'empty',
      'big',
    ]);
    const m = await readAll(path);
    assert.equal(get(m, 'empty').uid, 4242);
    assert.equal(get(m, 'big').uid, 4242);
    assert.equal(m.size, 2, 'the global header is no member');
  });
});

describe('gnu', () => {
  test("long names ('L'), long link targets ('K') and base-256 ids", async () => {
    const path = await tar('gnu.tar', [
      '--format=gnu',
      '--owner=:3000000',
      '--group=:3000001',
      LONG_NAME,
      'long-link',
      'big',
    ]);
    for (const chunk of [5, 65536]) {
      const m = await readAll(path, chunk);
      const f = get(m, `${LONG_NAME}/f`);
      assert.equal(f.data, 'long\n');
      assert.equal(f.uid, 3000000);
      assert.equal(f.gid, 3000001);
      assert.equal(get(m, LONG_NAME).type, 'dir');
      assert.equal(get(m, 'long-link').linkPath, LONG_TARGET);
      assert.equal(get(m, 'big').data, BIG);
    }
  });

  test('a volume label is no member', async () => {
    const path = await tar('vol.tar', ['--format=gnu', '-V', 'label', 'empty']);
    assert.deepEqual([...(await readAll(path)).keys()], ['empty']);
  });
});

describe('corrupt archives', () => {
  test('a bad header checksum is refused, naming the member', async () => {
    const path = await tar('ck.tar', ['--format=ustar', 'empty', 'big']);
    // Flip a byte of the first header's mode field.
    const bad = await corrupt(path, 101, 'ck-bad.tar');
    await assert.rejects(readAll(bad), (err: unknown) => {
      assert.ok(err instanceof UnpackError);
      assert.match(err.message, /checksum/);
      assert.equal(err.entry, 'empty');
      return true;
    });
  });

  test('a bad checksum in a later header is refused too', async () => {
    const path = await tar('ck2.tar', ['--format=ustar', 'empty', 'short-link']);
    const bad = await corrupt(path, 512 + 101, 'ck2-bad.tar');
    await assert.rejects(readAll(bad), /checksum/);
  });

  test('data cut short is refused', async () => {
    const path = await tar('cut.tar', ['--format=pax', 'big']);
    const bytes = await readFile(path);
    const cut = join(tmp, 'cut-short.tar');
    await writeFile(cut, bytes.subarray(0, 512 * 3 + 1000));
    await assert.rejects(readAll(cut), (err: unknown) => {
      assert.ok(err instanceof UnpackError);
      assert.match(err.message, /truncated/);
      assert.equal(err.entry, 'big');
      return true;
    });
  });

  test('a header cut short is refused', async () => {
    const path = await tar('cut2.tar', ['--format=ustar', 'empty', 'short-link']);
    const cut = join(tmp, 'cut-header.tar');
    await writeFile(cut, (await readFile(path)).subarray(0, 512 + 100));
    await assert.rejects(readAll(cut), /truncated/);
  });

  test('a pax header without its member is refused', async () => {
    const path = await tar('cut3.tar', ['--format=pax', '--mtime=@1.5', 'empty']);
    const cut = join(tmp, 'cut-pax.tar');
    await writeFile(cut, (await readFile(path)).subarray(0, 1024));
    await assert.rejects(readAll(cut), /extension header without its member/);
  });

  test('an archive without end-of-archive blocks is read, like Go archive/tar does', async () => {
    const path = await tar('noend.tar', ['--format=ustar', 'empty']);
    const cut = join(tmp, 'noend-cut.tar');
    await writeFile(cut, (await readFile(path)).subarray(0, 512));
    assert.deepEqual([...(await readAll(cut)).keys()], ['empty']);
  });

  test('unread data is skipped, and drain() reads what follows the end', async () => {
    const path = await tar('skip.tar', ['--format=ustar', 'big', 'empty']);
    const reader = new TarReader(createReadStream(path, { highWaterMark: 1000 }));
    // Nothing of big's body is read: next() must skip it and its padding.
    assert.equal((await reader.next())?.path, 'big');
    assert.equal((await reader.next())?.path, 'empty');
    assert.equal(await reader.next(), undefined);
    const total = (await readFile(path)).length;
    const padded = Math.ceil(BIG.length / 512) * 512;
    const headerAndData = 512 + padded + 512 + 1024;
    assert.equal(await reader.drain(), total - headerAndData, 'record padding after the end blocks');
  });
});
