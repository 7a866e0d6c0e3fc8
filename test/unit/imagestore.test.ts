import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { link, mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { afterEach, beforeEach, describe, it } from 'node:test';

import Database from 'better-sqlite3';

import { migrate } from '../../state/migrate.js';
import { migrations } from '../../state/migrations.js';
import { NotFoundError } from '../../src/errors.js';
import { readVerified } from '../../src/imagestore/content.js';
import { StoreFlush } from '../../src/imagestore/durability.js';
import {
  ContentStore,
  DigestMismatchError,
  InvalidDigestError,
  LayerStore,
  SizeMismatchError,
  sha256Digest,
  type ImageRecord,
} from '../../src/imagestore/index.js';
import { sandboxMapping } from '../../src/store/sandbox-record.js';
import { Store } from '../../src/store/index.js';
import { insertRow } from '../harness/database.js';
import { cniResults, sandbox } from '../harness/records.js';

function digestOf(text: string): string {
  return sha256Digest(Buffer.from(text));
}

function blob(text: string): { bytes: Buffer; digest: string; size: number } {
  const bytes = Buffer.from(text);
  return { bytes, digest: sha256Digest(bytes), size: bytes.length };
}

/** A source that yields `chunks`, then fails. */
function failingSource(chunks: Buffer[], error: Error): Readable {
  return Readable.from(
    (async function* () {
      for (const chunk of chunks) yield chunk;
      throw error;
    })(),
  );
}

function chunksOf(bytes: Buffer, size: number): Buffer[] {
  const chunks: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += size) chunks.push(bytes.subarray(at, at + size));
  return chunks;
}

async function collect(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function list(dir: string): Promise<string[]> {
  return readdir(dir).catch(() => []);
}

describe('ContentStore', () => {
  let root: string;
  let content: ContentStore;

  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'berth-content-'));
    content = new ContentStore(root);
  });

  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('ingests a stream that matches its descriptor', async () => {
    const b = blob('hello layer');
    await content.ingest(
      { digest: b.digest, size: b.size },
      Readable.from([b.bytes.subarray(0, 3), b.bytes.subarray(3)]),
    );
    assert.equal(await content.has(b.digest), true);
    assert.equal(content.path(b.digest), join(root, 'blobs', 'sha256', b.digest.slice(7)));
    assert.deepEqual(await content.readBuffer(b.digest), b.bytes);
    const chunks: Buffer[] = [];
    for await (const chunk of await content.openRead(b.digest)) chunks.push(chunk as Buffer);
    assert.deepEqual(Buffer.concat(chunks), b.bytes);
    assert.deepEqual(await list(join(root, 'ingest')), [], 'no partial left');
    assert.deepEqual(await content.list(), [b.digest]);
  });

  it('ingests an empty blob', async () => {
    const b = blob('');
    await content.ingest({ digest: b.digest, size: 0 }, Readable.from([]));
    assert.deepEqual(await content.readBuffer(b.digest), Buffer.alloc(0));
  });

  it('refuses a digest mismatch and leaves neither blob nor partial', async () => {
    const b = blob('the real bytes');
    const wrong = digestOf('other bytes');
    const err = await content.ingest({ digest: wrong, size: b.size }, Readable.from([b.bytes])).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof DigestMismatchError);
    assert.equal(err.expected, wrong);
    assert.equal(err.actual, b.digest);
    assert.match(err.message, new RegExp(`expected ${wrong}, got ${b.digest}`));
    assert.equal(await content.has(wrong), false);
    assert.equal(await content.has(b.digest), false);
    assert.deepEqual(await list(join(root, 'ingest')), []);
  });

  it('refuses a short stream', async () => {
    const b = blob('twelve bytes');
    const err = await content.ingest({ digest: b.digest, size: b.size + 5 }, Readable.from([b.bytes])).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof SizeMismatchError);
    assert.equal(err.expected, b.size + 5);
    assert.equal(err.actual, b.size);
    assert.equal(err.exceeded, false);
    assert.equal(await content.has(b.digest), false);
    assert.deepEqual(await list(join(root, 'ingest')), []);
  });

  it('stops reading a stream that runs past the expected size', async () => {
    let produced = 0;
    const endless = Readable.from(
      (function* () {
        for (;;) {
          produced++;
          yield Buffer.alloc(1024, 1);
        }
      })(),
    );
    const err = await content.ingest({ digest: digestOf('x'), size: 4096 }, endless).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof SizeMismatchError);
    assert.equal(err.exceeded, true);
    assert.match(err.message, /expected 4096 bytes, got more than 4096/);
    assert.ok(produced < 100, `read ${produced} chunks after the limit`);
    assert.equal(endless.destroyed, true);
    assert.deepEqual(await list(join(root, 'ingest')), []);
  });

  it('passes a stream error on and cleans up', async () => {
    const b = blob('abcdef');
    const boom = new Error('connection reset');
    await assert.rejects(
      content.ingest({ digest: b.digest, size: b.size }, failingSource([b.bytes.subarray(0, 3)], boom)),
      (err) => err === boom,
    );
    assert.equal(await content.has(b.digest), false);
    assert.deepEqual(await list(join(root, 'ingest')), []);
  });

  it('does not rewrite a blob already present, nor read the source', async () => {
    const b = blob('present');
    await content.writeBuffer(b.digest, b.bytes);
    const before = await stat(content.path(b.digest));
    let pulled = false;
    const source = Readable.from(
      (function* () {
        pulled = true;
        yield b.bytes;
      })(),
    );
    await content.ingest({ digest: b.digest, size: b.size }, source);
    assert.equal(pulled, false);
    assert.equal(source.destroyed, true);
    const after = await stat(content.path(b.digest));
    assert.equal(after.ino, before.ino);
    assert.equal(after.mtimeMs, before.mtimeMs);
  });

  it('lets concurrent ingests of one blob both succeed', async () => {
    const b = blob('raced');
    await Promise.all(
      [1, 2, 3].map(() => content.ingest({ digest: b.digest, size: b.size }, Readable.from([b.bytes]))),
    );
    assert.deepEqual(await content.readBuffer(b.digest), b.bytes);
    assert.deepEqual(await list(join(root, 'ingest')), []);
  });

  it('writeBuffer verifies like ingest', async () => {
    const b = blob('{"schemaVersion":2}');
    await content.writeBuffer(b.digest, b.bytes);
    assert.deepEqual(await content.readBuffer(b.digest), b.bytes);
    await assert.rejects(content.writeBuffer(digestOf('nope'), b.bytes), DigestMismatchError);
    assert.equal(await content.has(digestOf('nope')), false);
  });

  it('hands a tap the accepted bytes and ends it once they are verified', async () => {
    const b = blob('layer bytes for the unpacker');
    const tap = new PassThrough();
    const read = collect(tap);
    await content.ingest({ digest: b.digest, size: b.size }, Readable.from(chunksOf(b.bytes, 5)), tap);
    assert.deepEqual(await read, b.bytes);
    assert.deepEqual(await content.readBuffer(b.digest), b.bytes);
  });

  it('destroys the tap with the error when the bytes do not match, and stores nothing', async () => {
    const b = blob('corrupt on the way');
    const wrong = digestOf('what the manifest promised');
    const tap = new PassThrough();
    const read = collect(tap).then(
      () => undefined,
      (e: unknown) => e,
    );
    const err = await content.ingest({ digest: wrong, size: b.size }, Readable.from([b.bytes]), tap).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof DigestMismatchError);
    assert.equal(await read, err, 'the reader sees the ingest fail');
    assert.equal(await content.has(wrong), false);
    assert.deepEqual(await list(join(root, 'ingest')), []);
  });

  it("goes on storing when the tap's reader gives up: the digest decides", async () => {
    const big = Buffer.alloc(256 * 1024, 7);
    const digest = sha256Digest(big);
    const tap = new PassThrough({ highWaterMark: 1024 });
    const reader = (async () => {
      // Leaving the loop destroys the tap, as an unpacker that met a bad tar header does.
      for await (const chunk of tap) if (chunk) throw new Error('bad tar');
    })().then(
      () => 'read to the end',
      (e: unknown) => e,
    );
    await content.ingest({ digest, size: big.length }, Readable.from(chunksOf(big, 4096)), tap);
    assert.match(String(await reader), /bad tar/);
    assert.deepEqual(await content.readBuffer(digest), big);
  });

  it('feeds a tap from the stored copy when the blob is already present', async () => {
    const b = blob('stored before');
    await content.writeBuffer(b.digest, b.bytes);
    const source = Readable.from([Buffer.from('never read')]);
    const tap = new PassThrough();
    const read = collect(tap);
    await content.ingest({ digest: b.digest, size: b.size }, source, tap);
    assert.deepEqual(await read, b.bytes);
    assert.equal(source.destroyed, true);
  });

  it('readVerified returns checked bytes and stores nothing', async () => {
    const b = blob('{"architecture":"amd64"}');
    assert.deepEqual(
      await readVerified({ digest: b.digest, size: b.size }, Readable.from([b.bytes])),
      b.bytes,
    );
    await assert.rejects(
      readVerified({ digest: digestOf('other'), size: b.size }, Readable.from([b.bytes])),
      DigestMismatchError,
    );
    await assert.rejects(
      readVerified({ digest: b.digest, size: b.size - 1 }, Readable.from([b.bytes])),
      SizeMismatchError,
    );
    await assert.rejects(
      readVerified({ digest: 'sha256:nope', size: 1 }, Readable.from([b.bytes])),
      InvalidDigestError,
    );
    assert.deepEqual(await list(join(root, 'blobs', 'sha256')), []);
  });

  it('refuses malformed digests before touching the disk', async () => {
    for (const digest of [
      'sha256:../../etc/passwd',
      'sha512:' + 'a'.repeat(128),
      'sha256:' + 'A'.repeat(64),
    ]) {
      assert.throws(() => content.path(digest), InvalidDigestError);
      const source = Readable.from([Buffer.from('x')]);
      await assert.rejects(content.ingest({ digest, size: 1 }, source), InvalidDigestError);
      assert.equal(source.destroyed, true);
    }
    assert.deepEqual(await list(root), []);
  });

  it('reports missing blobs as NotFoundError and deletes idempotently', async () => {
    const missing = digestOf('missing');
    await assert.rejects(content.readBuffer(missing), NotFoundError);
    await assert.rejects(content.openRead(missing), NotFoundError);
    const b = blob('doomed');
    await content.writeBuffer(b.digest, b.bytes);
    assert.equal(await content.delete(b.digest), true);
    assert.equal(await content.delete(b.digest), false);
    assert.equal(await content.has(b.digest), false);
  });

  it('cleanupTemporary removes partials and temporary layer dirs only', async () => {
    const b = blob('kept');
    await content.writeBuffer(b.digest, b.bytes);
    const layers = new LayerStore(root);
    const committed = digestOf('committed layer');
    const tmp = await layers.tmpLayerDir(committed);
    await writeFile(join(tmp, 'file'), 'x');
    await layers.commitLayer(tmp, committed);
    // What a killed pull, unpack, commit and removal leave behind.
    await writeFile(join(root, 'ingest', 'deadbeef.partial'), 'half');
    const half = await layers.tmpLayerDir(digestOf('half unpacked'));
    await writeFile(join(half, 'file'), 'x');
    const fsless = join(layers.layersDir, digestOf('crashed commit').slice(7));
    await mkdir(fsless);
    const removing = join(layers.layersDir, `${digestOf('removing').slice(7)}.tmp-rm-123`);
    await mkdir(join(removing, 'fs'), { recursive: true });

    const removed = await content.cleanupTemporary();
    assert.deepEqual(
      removed.sort(),
      [join(root, 'ingest', 'deadbeef.partial'), half, fsless, removing].sort(),
    );
    assert.deepEqual(await list(join(root, 'ingest')), []);
    assert.deepEqual(await list(layers.layersDir), [committed.slice(7)]);
    assert.equal(await content.has(b.digest), true);
    assert.deepEqual(await layers.list(), [committed]);
    assert.deepEqual(await content.cleanupTemporary(), []);
  });

  it('usage counts blocks and inodes over blobs and layers, hard links once', async () => {
    assert.deepEqual(await content.usage(), { bytes: 0, inodes: 0 });
    const big = Buffer.alloc(64 * 1024, 7);
    await content.writeBuffer(sha256Digest(big), big);
    // blobs/, blobs/sha256/, the blob
    const afterBlob = await content.usage();
    assert.equal(afterBlob.inodes, 3);
    assert.ok(afterBlob.bytes >= big.length, `${afterBlob.bytes} bytes`);

    const layers = new LayerStore(root);
    const diffId = digestOf('layer');
    const tmp = await layers.tmpLayerDir(diffId);
    await writeFile(join(tmp, 'a'), 'a');
    await link(join(tmp, 'a'), join(tmp, 'b'));
    await layers.commitLayer(tmp, diffId);
    // + layers/, layers/<hex>/, fs/, and a|b as one inode
    const total = await content.usage();
    assert.equal(total.inodes, 3 + 4);
    assert.ok(total.bytes > afterBlob.bytes);
  });
});

describe('StoreFlush', () => {
  let root: string;

  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'berth-flush-'));
  });

  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('flushes what was noted, sharing one sync between concurrent callers', async () => {
    const flush = new StoreFlush();
    await flush.flush();
    flush.noteWrite(root);
    await Promise.all([flush.flush(), flush.flush(), flush.flush()]);
    flush.noteWrite(join(root, 'gone'));
    await assert.rejects(flush.flush(), /gone/);
  });
});

describe('LayerStore', () => {
  let root: string;
  let layers: LayerStore;
  const diffId = digestOf('a layer');

  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), 'berth-layers-'));
    layers = new LayerStore(root);
  });

  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('commits a temporary tree as <hex>/fs', async () => {
    const tmp = await layers.tmpLayerDir(diffId);
    assert.match(tmp, new RegExp(`^${layers.layersDir}/${diffId.slice(7)}\\.tmp-[0-9a-f]+$`));
    await writeFile(join(tmp, 'hello'), 'world');
    assert.equal(await layers.has(diffId), false);
    assert.equal(await layers.commitLayer(tmp, diffId), true);
    assert.equal(layers.fsDir(diffId), join(root, 'layers', diffId.slice(7), 'fs'));
    assert.equal(await readFile(join(layers.fsDir(diffId), 'hello'), 'utf8'), 'world');
    assert.equal(await exists(tmp), false);
    assert.equal(await layers.has(diffId), true);
  });

  it('keeps the first commit when two unpacks race', async () => {
    const first = await layers.tmpLayerDir(diffId);
    const second = await layers.tmpLayerDir(diffId);
    assert.notEqual(first, second);
    await writeFile(join(first, 'who'), 'first');
    await writeFile(join(second, 'who'), 'second');
    assert.equal(await layers.commitLayer(first, diffId), true);
    assert.equal(await layers.commitLayer(second, diffId), false);
    assert.equal(await exists(second), false, 'the loser is deleted');
    assert.equal(await readFile(join(layers.fsDir(diffId), 'who'), 'utf8'), 'first');
  });

  it('refuses to commit a dir that is not its own temporary dir', async () => {
    const other = await layers.tmpLayerDir(digestOf('other'));
    await assert.rejects(layers.commitLayer(other, diffId), /not a temporary dir/);
    await assert.rejects(layers.commitLayer(root, diffId), /not a temporary dir/);
  });

  it('removes a layer idempotently', async () => {
    const tmp = await layers.tmpLayerDir(diffId);
    await layers.commitLayer(tmp, diffId);
    await layers.removeLayer(diffId);
    assert.equal(await layers.has(diffId), false);
    assert.deepEqual(await list(layers.layersDir), []);
    await layers.removeLayer(diffId);
  });
});

function image(seed: string, layerSeeds: string[], overrides: Partial<ImageRecord> = {}): ImageRecord {
  return {
    id: digestOf(`config ${seed}`),
    manifestDigest: digestOf(`manifest ${seed}`),
    manifestMediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: {
      architecture: 'amd64',
      os: 'linux',
      rootfs: { type: 'layers', diff_ids: [] },
    },
    size: 1000 + layerSeeds.length,
    layers: layerSeeds.map((l) => ({
      digest: digestOf(`blob ${l}`),
      diffId: digestOf(`diff ${l}`),
      size: 100,
      mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
    })),
    createdAt: '1763793600000000000',
    lastUsedAt: '1763793600000000000',
    pinned: false,
    ...overrides,
  };
}

const BUSYBOX = 'docker.io/library/busybox';

describe('ImageRepo', () => {
  let dir: string;
  let path: string;
  let store: Store;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-images-'));
    path = join(dir, 'berth.db');
    store = Store.open(path);
  });

  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('puts an image and finds it by id, name and id prefix', () => {
    const img = image('busybox', ['base', 'top']);
    const tag = `${BUSYBOX}:latest`;
    const byDigest = `${BUSYBOX}@${img.manifestDigest}`;
    assert.deepEqual(store.images.putImage(img, [tag, byDigest]), []);

    assert.deepEqual(store.images.getImage(img.id), img);
    assert.deepEqual(store.images.findImageByName(tag), img);
    assert.deepEqual(store.images.findImageByName(byDigest), img);
    assert.equal(store.images.findImageByName(`${BUSYBOX}:other`), undefined);
    assert.deepEqual(store.images.namesOf(img.id), [byDigest, tag].sort());
    assert.deepEqual(store.images.imageNames(img.id), { repoTags: [tag], repoDigests: [byDigest] });

    const hex = img.id.slice(7);
    assert.deepEqual(store.images.findImagesByIdPrefix(hex.slice(0, 12)), [img]);
    assert.deepEqual(store.images.findImagesByIdPrefix(`sha256:${hex.slice(0, 12)}`), [img]);
    assert.deepEqual(store.images.findImagesByIdPrefix(''), []);
    assert.deepEqual(store.images.findImagesByIdPrefix('zz'), []);
    assert.deepEqual(store.images.findImagesByIdPrefix('sha256:'), [], 'no hex, no match');
    assert.deepEqual(store.images.findImagesByIdPrefix('sha'), []);

    assert.deepEqual(store.images.listImages(), [{ ...img, repoTags: [tag], repoDigests: [byDigest] }]);
  });

  it('re-putting an image keeps its created_at and adds names', () => {
    const img = image('busybox', ['base']);
    store.images.putImage(img, [`${BUSYBOX}:1.36`]);
    const again = {
      ...img,
      createdAt: '1763793700000000000',
      lastUsedAt: '1763793700000000000',
      pinned: true,
    };
    assert.deepEqual(store.images.putImage(again, [`${BUSYBOX}:latest`]), []);
    assert.deepEqual(store.images.getImage(img.id), { ...again, createdAt: img.createdAt });
    assert.deepEqual(store.images.namesOf(img.id), [`${BUSYBOX}:1.36`, `${BUSYBOX}:latest`]);
  });

  it('moves a tag to the newly pulled image and reports the image left without names', () => {
    const old = image('old', ['base', 'old']);
    const other = image('other', ['x']);
    const fresh = image('new', ['base', 'new']);
    const tag = `${BUSYBOX}:latest`;
    store.images.putImage(old, [tag]);
    store.images.putImage(other, [`${BUSYBOX}:other`, `${BUSYBOX}@${other.manifestDigest}`]);

    // other keeps its digest name, so only old is reported.
    assert.deepEqual(store.images.putImage(fresh, [tag, `${BUSYBOX}:other`]), [old.id]);
    assert.equal(store.images.findImageByName(tag)?.id, fresh.id);
    assert.deepEqual(store.images.namesOf(old.id), []);
    assert.deepEqual(store.images.namesOf(other.id), [`${BUSYBOX}@${other.manifestDigest}`]);
    assert.ok(store.images.getImage(old.id), 'the repository does not delete it by itself');
  });

  it('removeName says whether the image lost its last name', () => {
    const img = image('busybox', ['base']);
    store.images.putImage(img, [`${BUSYBOX}:a`, `${BUSYBOX}:b`]);
    assert.deepEqual(store.images.removeName(`${BUSYBOX}:a`), { imageId: img.id, orphaned: false });
    assert.deepEqual(store.images.removeName(`${BUSYBOX}:b`), { imageId: img.id, orphaned: true });
    assert.equal(store.images.removeName(`${BUSYBOX}:b`), undefined);
  });

  it('deleteImage returns the layers and blobs no other image uses, and cascades to names', () => {
    const a = image('a', ['shared', 'only-a']);
    const b = image('b', ['shared', 'only-b']);
    store.images.putImage(a, [`${BUSYBOX}:a`, `${BUSYBOX}@${a.manifestDigest}`]);
    store.images.putImage(b, [`${BUSYBOX}:b`]);
    const [shared, onlyA] = a.layers;
    assert.ok(shared && onlyA);

    const deleted = store.images.deleteImage(a.id);
    assert.ok(deleted);
    assert.deepEqual(deleted.image, a);
    assert.deepEqual(
      deleted.unusedLayers.map((l) => l.diffId),
      [onlyA.diffId],
    );
    assert.deepEqual(deleted.unusedBlobs.sort(), [a.id, a.manifestDigest, onlyA.digest].sort());
    assert.equal(store.images.getImage(a.id), undefined);
    assert.equal(store.images.findImageByName(`${BUSYBOX}:a`), undefined);
    assert.equal(store.images.findImageByName(`${BUSYBOX}@${a.manifestDigest}`), undefined);
    assert.equal(store.images.getLayer(onlyA.diffId), undefined);
    assert.ok(store.images.getLayer(shared.diffId));
    assert.equal(store.images.deleteImage(a.id), undefined, 'idempotent');

    const last = store.images.deleteImage(b.id);
    assert.deepEqual(last?.unusedLayers.map((l) => l.diffId).sort(), b.layers.map((l) => l.diffId).sort());
    assert.deepEqual(store.images.listLayers(), []);
  });

  it('tracks layer rows: putLayer, markLayerUnpacked, and rows created by putImage', () => {
    const diffId = digestOf('diff l');
    const fresh = store.images.putLayer({
      diffId,
      blobDigest: digestOf('blob l'),
      size: 42,
      createdAt: '1763793600000000000',
    });
    assert.deepEqual(fresh, {
      diffId,
      blobDigest: digestOf('blob l'),
      size: 42,
      unpacked: false,
      createdAt: '1763793600000000000',
    });
    store.images.markLayerUnpacked(diffId);
    // A second put (another image with the same layer) leaves the row as it is.
    const again = store.images.putLayer({ ...fresh, blobDigest: digestOf('other blob'), size: 1 });
    assert.deepEqual(again, { ...fresh, unpacked: true });
    assert.throws(() => store.images.markLayerUnpacked(digestOf('unknown')), NotFoundError);

    assert.deepEqual(store.images.listUnreferencedLayers(), [again]);
    const img = image('i', ['l', 'm']);
    store.images.putImage(img, []);
    assert.equal(store.images.getLayer(diffId)?.unpacked, true, 'putImage keeps existing rows');
    assert.deepEqual(store.images.getLayer(digestOf('diff m')), {
      diffId: digestOf('diff m'),
      blobDigest: digestOf('blob m'),
      size: 100,
      unpacked: false,
      createdAt: img.createdAt,
    });
    assert.deepEqual(store.images.listUnreferencedLayers(), []);
    assert.equal(store.images.deleteLayer(diffId), false, 'in use');

    const orphan = digestOf('orphan');
    store.images.putLayer({ diffId: orphan, blobDigest: digestOf('ob'), size: 1, createdAt: '1' });
    assert.deepEqual(
      store.images.listUnreferencedLayers().map((l) => l.diffId),
      [orphan],
    );
    assert.equal(store.images.deleteLayer(orphan), true);
  });

  it('putPulledImage records the image with every layer unpacked, in one go', () => {
    const shared = image('shared', ['base']);
    store.images.putImage(shared, []);
    assert.equal(store.images.getLayer(digestOf('diff base'))?.unpacked, false);
    const pulled = image('pulled', ['base', 'top']);
    assert.deepEqual(store.images.putPulledImage(pulled, [`${BUSYBOX}:latest`]), []);
    assert.equal(store.images.getLayer(digestOf('diff base'))?.unpacked, true);
    assert.equal(store.images.getLayer(digestOf('diff top'))?.unpacked, true);
    assert.deepEqual(store.images.findImageByName(`${BUSYBOX}:latest`), pulled);
  });

  it('answers reads from memory that every write keeps current', () => {
    const a = image('a', ['l']);
    const b = image('b', ['m'], { createdAt: '1763793600000000001' });
    assert.deepEqual(store.images.listImages(), []);
    store.images.putImage(a, [`${BUSYBOX}:a`, `${BUSYBOX}:shared`]);
    assert.deepEqual(store.images.imageNames(a.id).repoTags, [`${BUSYBOX}:a`, `${BUSYBOX}:shared`]);
    store.images.putImage(b, [`${BUSYBOX}:shared`]);
    assert.equal(store.images.findImageByName(`${BUSYBOX}:shared`)?.id, b.id);
    assert.deepEqual(store.images.imageNames(a.id).repoTags, [`${BUSYBOX}:a`]);
    assert.deepEqual(
      store.images.listImages().map((i) => [i.id, i.repoTags]),
      [
        [a.id, [`${BUSYBOX}:a`]],
        [b.id, [`${BUSYBOX}:shared`]],
      ],
    );
    store.images.removeName(`${BUSYBOX}:a`);
    assert.equal(store.images.findImageByName(`${BUSYBOX}:a`), undefined);
    assert.deepEqual(store.images.namesOf(a.id), []);
    store.images.setPinned(b.id, true);
    assert.equal(store.images.getImage(b.id)?.pinned, true);
    store.images.deleteImage(a.id);
    assert.equal(store.images.getImage(a.id), undefined);
    assert.deepEqual(store.images.findImagesByIdPrefix(a.id.slice(7, 19)), []);
    assert.deepEqual(store.images.findImagesByIdPrefix(b.id.slice(7, 19)), [{ ...b, pinned: true }]);
    // A write that fails leaves reads as the database is.
    assert.throws(() => store.images.putImage(image('bad', [], { createdAt: '01' }), [`${BUSYBOX}:x`]));
    assert.equal(store.images.findImageByName(`${BUSYBOX}:x`), undefined);
    assert.deepEqual(
      store.images.listImages().map((i) => i.id),
      [b.id],
    );
  });

  it('touches, pins, and lists the blobs it refers to', () => {
    const img = image('i', ['l']);
    store.images.putImage(img, [`${BUSYBOX}@${digestOf('index')}`]);
    assert.equal(store.images.touchImage(img.id, '1763793999000000000'), true);
    assert.equal(store.images.touchImage(digestOf('nope'), '1'), false);
    assert.equal(store.images.setPinned(img.id, true), true);
    const got = store.images.getImage(img.id);
    assert.equal(got?.lastUsedAt, '1763793999000000000');
    assert.equal(got?.pinned, true);
    assert.deepEqual(
      [...store.images.referencedBlobs()].sort(),
      [img.id, img.manifestDigest, digestOf('blob l'), digestOf('index')].sort(),
    );
  });

  it('refuses rows the schema forbids', () => {
    assert.throws(() => store.images.putImage(image('bad', [], { id: 'sha256:../x' }), []), /CHECK/);
    assert.throws(() => store.images.putImage(image('bad', [], { createdAt: '01' }), []), /CHECK/);
    assert.throws(() => store.images.putImage(image('bad', ['l'], {}), ['']), /CHECK/);
    // The failed transaction left nothing, not even the layer row.
    assert.deepEqual(store.images.listImages(), []);
    assert.deepEqual(store.images.listLayers(), []);
  });

  it('keeps everything across a reopen', () => {
    const img = image('busybox', ['base', 'top'], { pinned: true });
    store.images.putImage(img, [`${BUSYBOX}:latest`]);
    store.images.markLayerUnpacked(digestOf('diff base'));
    store.close();
    store = Store.open(path);
    assert.deepEqual(store.images.findImageByName(`${BUSYBOX}:latest`), img);
    assert.equal(store.images.getLayer(digestOf('diff base'))?.unpacked, true);
    assert.equal(store.images.getLayer(digestOf('diff top'))?.unpacked, false);
  });
});

describe('migration 2', () => {
  let dir: string;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-migrate2-'));
  });

  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('adds the image tables to a version 1 database and keeps its sandboxes', () => {
    const path = join(dir, 'berth.db');
    const row = sandbox({
      id: 'a1b2c3d4e5f6',
      state: 'READY',
      step: 'ready',
      networkState: 'READY',
      cniResults: cniResults(),
      ip: '10.88.0.2',
      additionalIps: ['fd00::2'],
      pid: 4242,
    });
    const v1 = new Database(path);
    migrate(v1, migrations.slice(0, 1));
    // Version 1 predates the infra column (migration 4), which defaults to the infra every pod then
    // ran, the spec version (migration 5), which defaults to the shape berth then wrote, and the
    // pod cgroup and resources (migration 6), none for the pods of then, and the infra's start time
    // and the reason (migration 8), neither recorded then.
    const {
      infra: _infra,
      spec_version: _version,
      pod_cgroup: _cgroup,
      resources_json: _asked,
      infra_start_time: _started,
      reason: _reason,
      ...v1Record
    } = sandboxMapping.toRecord(row);
    insertRow(v1, 'sandboxes', v1Record);
    assert.equal(v1.pragma('user_version', { simple: true }), 1);
    v1.close();

    const store = Store.open(path);
    try {
      assert.deepEqual(store.sandboxes.list(), [row]);
      const img = image('after', ['l']);
      store.images.putImage(img, [`${BUSYBOX}:latest`]);
      assert.deepEqual(store.images.getImage(img.id), img);
    } finally {
      store.close();
    }
    const db = new Database(path, { readonly: true });
    assert.equal(db.pragma('user_version', { simple: true }), migrations.length);
    const tables = db
      .prepare<[], { name: string; strict: number }>(
        "SELECT name, strict FROM pragma_table_list WHERE schema = 'main' AND name NOT LIKE 'sqlite_%' ORDER BY name",
      )
      .all();
    assert.deepEqual(tables, [
      { name: 'containers', strict: 1 },
      { name: 'image_names', strict: 1 },
      { name: 'images', strict: 1 },
      { name: 'layers', strict: 1 },
      { name: 'sandboxes', strict: 1 },
    ]);
    db.close();
  });
});
