/**
 * Content-addressed blobs (manifests, configs, layer tarballs) under `<root>/blobs/sha256/<hex>`.
 * A blob only appears under its digest after its bytes were checked against that digest and
 * size and flushed to disk; until then it is `<root>/ingest/<random>.partial`, which a crash
 * leaves behind for cleanupTemporary() at start-up.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, rm, stat, unlink, type FileHandle } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { Readable } from 'node:stream';

import { InvalidArgumentError, NotFoundError } from '../errors.js';
import { digestHex, isDigestHex } from './digest.js';
import { DigestMismatchError, SizeMismatchError } from './errors.js';
import { diskUsage, fsyncDir, isErrno } from './fsutil.js';
import { LayerStore } from './layers.js';
import type { DiskUsage, ExpectedBlob } from './types.js';

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
   */
  async ingest(expected: ExpectedBlob, source: Readable): Promise<void> {
    let final: string;
    try {
      final = this.path(expected.digest);
      if (!Number.isSafeInteger(expected.size) || expected.size < 0) {
        throw new InvalidArgumentError('size', `${expected.size} is not a byte count`);
      }
    } catch (err) {
      source.destroy();
      throw err;
    }
    if (await this.has(expected.digest)) {
      source.destroy();
      return;
    }
    const partial = join(this.ingestDir, `${randomBytes(8).toString('hex')}.partial`);
    let file: FileHandle | undefined;
    try {
      await mkdir(this.ingestDir, { recursive: true, mode: 0o700 });
      file = await open(partial, 'wx', 0o644);
      const hash = createHash('sha256');
      let size = 0;
      // for-await gives backpressure for free and destroys the source if we throw mid-way.
      for await (const chunk of source as AsyncIterable<unknown>) {
        const bytes = toBytes(chunk);
        size += bytes.length;
        if (size > expected.size) throw new SizeMismatchError(expected.digest, expected.size, size, true);
        hash.update(bytes);
        await writeAll(file, bytes);
      }
      if (size !== expected.size) throw new SizeMismatchError(expected.digest, expected.size, size, false);
      const actual = `sha256:${hash.digest('hex')}`;
      if (actual !== expected.digest) throw new DigestMismatchError(expected.digest, actual);
      await file.sync();
      await file.close();
      file = undefined;
      // A concurrent ingest of the same blob may have won meanwhile; its copy stays untouched.
      if (await this.has(expected.digest)) {
        await rm(partial, { force: true });
        return;
      }
      await mkdir(this.blobsDir, { recursive: true, mode: 0o711 });
      await rename(partial, final);
      await fsyncDir(this.blobsDir);
    } catch (err) {
      source.destroy();
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

function toBytes(chunk: unknown): Uint8Array {
  if (chunk instanceof Uint8Array) return chunk;
  // E.g. strings from a source with setEncoding(): the text no longer tells which bytes were hashed.
  throw new TypeError(`ingest: the source yielded a ${typeof chunk}, not bytes`);
}

/** FileHandle.write may write less than asked (e.g. near a full disk); the rest must follow. */
async function writeAll(file: FileHandle, bytes: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < bytes.length) {
    const { bytesWritten } = await file.write(bytes, offset, bytes.length - offset);
    offset += bytesWritten;
  }
}
