/** Pure parts of the unpacker: compression detection, path safety, whiteout names, pax records. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MEDIA_TYPES } from '../../src/registry/manifest.js';
import { detectCompression } from '../../src/unpack/detect.js';
import { UnpackError } from '../../src/unpack/errors.js';
import { entryComponents } from '../../src/unpack/safety.js';
import { TarFormatError, parseHeader, parsePaxRecords } from '../../src/unpack/tar-header.js';
import { classifyWhiteout } from '../../src/unpack/whiteout.js';

const GZ = Buffer.from([0x1f, 0x8b, 0x08, 0x00]);
const ZST = Buffer.from([0x28, 0xb5, 0x2f, 0xfd, 0x04]);
const TAR = Buffer.from('etc/\0\0\0\0');

describe('detectCompression', () => {
  test('magic bytes decide', () => {
    assert.equal(detectCompression(MEDIA_TYPES.ociLayerGzip, GZ), 'gzip');
    assert.equal(detectCompression(MEDIA_TYPES.dockerLayerGzip, GZ), 'gzip');
    assert.equal(detectCompression(MEDIA_TYPES.ociLayerZstd, ZST), 'zstd');
    assert.equal(detectCompression(MEDIA_TYPES.ociLayer, TAR), 'none');
  });

  test('magic bytes win over a wrong media type', () => {
    assert.equal(detectCompression(MEDIA_TYPES.ociLayerGzip, ZST), 'zstd');
    assert.equal(detectCompression(MEDIA_TYPES.ociLayerZstd, GZ), 'gzip');
    assert.equal(detectCompression(MEDIA_TYPES.ociLayer, GZ), 'gzip');
    assert.equal(detectCompression(MEDIA_TYPES.dockerLayerGzip, TAR), 'none');
  });

  test('the media type decides when the bytes are too few to tell', () => {
    assert.equal(detectCompression(MEDIA_TYPES.ociLayerZstd, Buffer.alloc(0)), 'zstd');
    assert.equal(detectCompression(MEDIA_TYPES.dockerLayerGzip, Buffer.from([0x1f])), 'gzip');
    assert.equal(detectCompression('application/x-unknown', Buffer.alloc(0)), 'none');
  });
});

describe('entryComponents', () => {
  test('leading slashes and dots are relative to the layer root', () => {
    assert.deepEqual(entryComponents('/etc/passwd'), ['etc', 'passwd']);
    assert.deepEqual(entryComponents('./usr//bin/./ls'), ['usr', 'bin', 'ls']);
    assert.deepEqual(entryComponents('./'), []);
    assert.deepEqual(entryComponents('a..b/..c'), ['a..b', '..c']);
  });

  test('".." is refused anywhere', () => {
    for (const name of ['../x', 'a/../../x', '/..', 'a/..', './../etc']) {
      assert.throws(
        () => entryComponents(name),
        (err: unknown) => err instanceof UnpackError && err.entry === name,
      );
    }
  });
});

describe('classifyWhiteout', () => {
  test('names', () => {
    assert.deepEqual(classifyWhiteout('file'), { kind: 'none' });
    assert.deepEqual(classifyWhiteout('.wh.file'), { kind: 'file', name: 'file' });
    assert.deepEqual(classifyWhiteout('.wh..hidden'), { kind: 'file', name: '.hidden' });
    assert.deepEqual(classifyWhiteout('.wh..wh..opq'), { kind: 'opaque' });
    assert.deepEqual(classifyWhiteout('.wh..wh.plnk'), { kind: 'meta' });
    assert.deepEqual(classifyWhiteout('x.wh.y'), { kind: 'none' });
  });
});

describe('tar header bytes', () => {
  test('pax records: lengths in bytes, binary values, several records', () => {
    const value = Buffer.from([0xff, 0x00, 0x0a, 0x3d]);
    const record = (key: string, v: Buffer): Buffer => {
      const body = Buffer.concat([Buffer.from(` ${key}=`), v, Buffer.from('\n')]);
      let n = body.length + 1;
      while (String(n).length + body.length !== n) n++;
      return Buffer.concat([Buffer.from(String(n)), body]);
    };
    const recs = parsePaxRecords(
      Buffer.concat([record('path', Buffer.from('ünïcode/名前')), record('SCHILY.xattr.user.bin', value)]),
    );
    assert.equal(recs.get('path')?.toString(), 'ünïcode/名前');
    assert.deepEqual(recs.get('SCHILY.xattr.user.bin'), value);
  });

  test('malformed pax records are refused', () => {
    for (const bad of ['5 a=b\n', '99 path=x\n', 'x path=y\n', '9 pathx\n', '7 a=b\n']) {
      assert.throws(() => parsePaxRecords(Buffer.from(bad)), TarFormatError, bad);
    }
  });

  test('a header with a non-octal number is refused', () => {
    const block = Buffer.alloc(512);
    block.write('name', 0);
    block.write('00006x4\0', 100);
    block.write('        ', 148);
    let sum = 0;
    for (const b of block) sum += b;
    block.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
    assert.throws(() => parseHeader(block), /not octal/);
  });
});
