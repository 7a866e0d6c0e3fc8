/**
 * Content-addressed blobs (manifests, configs, layer tarballs) under `<root>/blobs/sha256/<hex>`.
 * A blob only appears under its digest after its bytes were checked against that digest and
 * size; until then it is `<root>/ingest/<random>.partial`, which a crash leaves behind for
 * cleanupTemporary() at start-up. Publishing does not sync: the writer flushes once for all its
 * blobs (StoreFlush) before a database row refers to them, and start-up recovery deletes blobs
 * no row refers to, so a power loss before that flush leaves nothing recorded half-written.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, rm, stat, unlink, type FileHandle } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

import { InvalidArgumentError, NotFoundError } from '../errors.js';
import { digestHex, isDigestHex } from './digest.js';
import { DigestMismatchError, SizeMismatchError } from './errors.js';
import { diskUsage, isErrno } from './fsutil.js';
import { LayerStore } from './layers.js';
import type { DiskUsage, ExpectedBlob } from './types.js';
import { PRIVATE_DIR } from '../file-modes.js';

export class ContentStore {
  readonly rootDir: string;
  private readonly blobsDir: string;
  private readonly ingestDir: string;

  constructor(rootDir: string) {
    this.rootDir = resolve(rootDir);
    this.blobsDir = join(this.rootDir, 'blobs', 'sha256');
    this.ingestDir = join(this.rootDir, 'ingest');
  }

  /** Where the blob is (or would be). Throws InvalidDigestError for anything but sha256:<hex>. */
  path(digest: string): string {
    return join(this.blobsDir, digestHex(digest));
  }

  async has(digest: string): Promise<boolean> {
    try {
      return (await stat(this.path(digest))).isFile();
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return false;
      throw err;
    }
  }

  /** The whole blob; meant for manifests and configs. Throws NotFoundError. */
  async readBuffer(digest: string): Promise<Buffer> {
    try {
      return await readFile(this.path(digest));
    } catch (err) {
      if (isErrno(err, 'ENOENT')) throw new NotFoundError('blob', digest);
      throw err;
    }
  }

  /** A stream of the blob; its file is closed when the stream ends or is destroyed. Throws NotFoundError. */
  async openRead(digest: string): Promise<Readable> {
    let handle: FileHandle;
    try {
      handle = await open(this.path(digest), 'r');
    } catch (err) {
      if (isErrno(err, 'ENOENT')) throw new NotFoundError('blob', digest);
      throw err;
    }
    return handle.createReadStream();
  }

  /**
   * Streams `source` into the store, hashing and counting as it writes, and publishes the blob
   * only if it is exactly `expected`. Reading stops as soon as the source runs past the
   * expected size, so a misbehaving registry cannot fill the disk.
   *
   * A blob already present is not rewritten: `source` is destroyed unread and this returns. On
   * any failure (SizeMismatchError, DigestMismatchError, the source's own error, a disk error)
   * the partial file is deleted, nothing is published, and the error is thrown.
   *
   * `tap`, when given, gets a copy of the bytes as they are accepted (a layer is unpacked while
   * it downloads) and is ended once they are all checked; it is destroyed with the error on
   * failure, so whoever reads it uses the result only once this resolves. A tap
   * its reader destroyed gets nothing more, and the ingest goes on: whether the bytes match their
   * digest is what tells a corrupt download from a bad layer. When the blob is already present,
   * the tap gets the stored copy.
   */
  async ingest(expected: ExpectedBlob, source: Readable, tap?: Writable): Promise<void> {
    let final: string;
    try {
      final = this.path(expected.digest);
      checkSize(expected);
    } catch (err) {
      source.destroy();
      tap?.destroy(err instanceof Error ? err : undefined);
      throw err;
    }
    if (await this.has(expected.digest)) {
      source.destroy();
      if (tap) await pipeline(await this.openRead(expected.digest), tap);
      return;
    }
    const partial = join(this.ingestDir, `${randomBytes(8).toString('hex')}.partial`);
    let file: FileHandle | undefined;
    try {
      await mkdir(this.ingestDir, { recursive: true, mode: PRIVATE_DIR });
      file = await open(partial, 'wx', 0o644);
      for await (const bytes of verifiedBytes(expected, source)) {
        await writeAll(file, bytes);
        if (tap) await writeTo(tap, bytes);
      }
      if (tap && !tap.destroyed) tap.end();
      await file.close();
      file = undefined;
      // A concurrent ingest of the same blob may have won meanwhile; its copy stays untouched.
      if (await this.has(expected.digest)) {
        await rm(partial, { force: true });
        return;
      }
      await mkdir(this.blobsDir, { recursive: true, mode: PRIVATE_DIR });
      await rename(partial, final);
    } catch (err) {
      source.destroy();
      tap?.destroy(err instanceof Error ? err : undefined);
      // A handle whose write failed may fail to close too; the partial file is removed either way.
      await file?.close().catch(() => undefined);
      await rm(partial, { force: true });
      throw err;
    }
  }

  /** For small blobs held in memory (manifests, configs); same checks and guarantees as ingest. */
  async writeBuffer(digest: string, bytes: Uint8Array): Promise<void> {
    await this.ingest({ digest, size: bytes.length }, Readable.from([bytes]));
  }

  /** Returns whether a blob was deleted; deleting an absent one is not an error. */
  async delete(digest: string): Promise<boolean> {
    try {
      await unlink(this.path(digest));
      return true;
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return false;
      throw err;
    }
  }

  /** Digests of every stored blob, for garbage collection against the database. */
  async list(): Promise<string[]> {
    let names: string[];
    try {
      names = await readdir(this.blobsDir);
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return [];
      throw err;
    }
    return names.filter(isDigestHex).map((hex) => `sha256:${hex}`);
  }

  /**
   * Deletes what interrupted pulls and layer unpacks/removals leave behind: `ingest/*` and
   * `layers/*.tmp-*`. Both kinds are only ever temporary, so this is safe at start-up, before
   * any pull runs; returns the paths removed, for the log.
   */
  async cleanupTemporary(): Promise<string[]> {
    let partials: string[];
    try {
      partials = (await readdir(this.ingestDir)).map((name) => join(this.ingestDir, name));
    } catch (err) {
      if (!isErrno(err, 'ENOENT')) throw err;
      partials = [];
    }
    for (const path of partials) await rm(path, { recursive: true, force: true });
    const layerTemps = await new LayerStore(this.rootDir).cleanupTemporary();
    return [...partials, ...layerTemps];
  }

  /** Space used by blobs and unpacked layers (the image filesystem of CRI ImageFsInfo). */
  async usage(): Promise<DiskUsage> {
    return diskUsage([join(this.rootDir, 'blobs'), new LayerStore(this.rootDir).layersDir]);
  }
}

/**
 * The whole blob in memory, with ingest's checks (size, digest) and nothing stored: for a small
 * blob needed at once (an image config), stored afterwards with writeBuffer.
 */
export async function readVerified(expected: ExpectedBlob, source: Readable): Promise<Buffer> {
  try {
    digestHex(expected.digest);
    checkSize(expected);
  } catch (err) {
    source.destroy();
    throw err;
  }
  const chunks: Uint8Array[] = [];
  for await (const bytes of verifiedBytes(expected, source)) chunks.push(bytes);
  return Buffer.concat(chunks);
}

function checkSize(expected: ExpectedBlob): void {
  if (!Number.isSafeInteger(expected.size) || expected.size < 0) {
    throw new InvalidArgumentError('size', `${expected.size} is not a byte count`);
  }
}

/**
 * The bytes of `source` as they arrive, checked against `expected`: more than its size fails at
 * once (a misbehaving registry cannot fill the disk), fewer or another digest after the last
 * chunk. Stopping early destroys the source.
 */
async function* verifiedBytes(expected: ExpectedBlob, source: Readable): AsyncGenerator<Uint8Array, void> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of source as AsyncIterable<unknown>) {
    const bytes = toBytes(chunk);
    size += bytes.length;
    if (size > expected.size) throw new SizeMismatchError(expected.digest, expected.size, size, true);
    hash.update(bytes);
    yield bytes;
  }
  if (size !== expected.size) throw new SizeMismatchError(expected.digest, expected.size, size, false);
  const actual = `sha256:${hash.digest('hex')}`;
  if (actual !== expected.digest) throw new DigestMismatchError(expected.digest, actual);
}

function toBytes(chunk: unknown): Uint8Array {
  if (chunk instanceof Uint8Array) return chunk;
  // E.g. strings from a source with setEncoding(): the text no longer tells which bytes were hashed.
  throw new TypeError(`ingest: the source yielded a ${typeof chunk}, not bytes`);
}

/**
 * Waits for the tap's reader when its buffer is full, so the download goes at the pace of the
 * slower of disk and unpacker instead of piling up in memory. A destroyed tap is skipped.
 */
async function writeTo(tap: Writable, bytes: Uint8Array): Promise<void> {
  if (tap.destroyed || tap.write(bytes)) return;
  await new Promise<void>((resolve) => {
    const done = (): void => {
      tap.off('drain', done);
      tap.off('close', done);
      resolve();
    };
    tap.on('drain', done);
    tap.on('close', done);
  });
}

/** FileHandle.write may write less than asked (e.g. near a full disk); the rest must follow. */
async function writeAll(file: FileHandle, bytes: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < bytes.length) {
    const { bytesWritten } = await file.write(bytes, offset, bytes.length - offset);
    offset += bytesWritten;
  }
}
