import { rm } from 'node:fs/promises';
import { PassThrough, Readable } from 'node:stream';
import { readVerified, type ContentStore } from '../imagestore/content.js';
import { StoreFlush } from '../imagestore/durability.js';
import type { LayerStore } from '../imagestore/layers.js';
import type { ImageLayerRef } from '../imagestore/types.js';
import type { Logger } from '../log.js';
import type { RegistryClient, RegistryCredentials } from '../registry/client.js';
import { MEDIA_TYPES, type Descriptor } from '../registry/manifest.js';
import { selectPlatform } from '../registry/platform.js';
import { TransferWatch } from '../registry/progress.js';
import { formatReference, type ImageReference } from '../registry/reference.js';
import { RefusedEntryError, detectCompression, unpackLayer } from '../unpack/index.js';
import { checkConfigSize, checkImageConfig, checkIndex, checkManifest } from './validate.js';
import { ImageFormatError } from './errors.js';
import { inPool } from '../kit/pool.js';
import { allSettledOrThrow } from '../kit/settle.js';
import { SingleFlight } from '../kit/single-flight.js';
import type { ImageConfig } from '../model/image.js';

/** An image whose bytes are all verified, stored, unpacked and on disk, ready to be recorded. */
export interface PulledImage {
  id: string;
  manifestDigest: string;
  manifestMediaType: string;
  config: ImageConfig;
  layers: ImageLayerRef[];
  size: number;
}

export interface PullerDeps {
  registry: RegistryClient;
  content: ContentStore;
  layers: LayerStore;
  logger: Logger;
  /** Layers fetched at once per pull; registries and disks both prefer a few streams to many. */
  layerConcurrency?: number;
  /** A pull whose downloads all received nothing for this long is cancelled; 0 or unset: never. */
  progressTimeoutMs?: number;
}

/**
 * How far a download may run ahead of its unpack. Lockstep (a small buffer) makes each chunk wait
 * for a disk write on both sides in turn; this lets the two overlap, for a bounded amount of memory.
 */
const TAP_BUFFER_BYTES = 1024 * 1024;

const INDEX_TYPES = new Set<string>([MEDIA_TYPES.ociIndex, MEDIA_TYPES.dockerManifestList]);
const MANIFEST_TYPES = new Set<string>([MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerManifest]);

/**
 * Fetches an image into the content store and unpacks its layers once each, each layer while it
 * downloads. Every blob is checked against its digest and size before use; an interrupted pull
 * leaves only temporary files, or published ones that no row refers to, which start-up recovery
 * deletes. A pull ends with one flush to disk for everything it (or a pull it relied on) wrote.
 */
export class Puller {
  private readonly layerFlights = new SingleFlight<void>();
  private readonly flush = new StoreFlush();

  constructor(private readonly deps: PullerDeps) {}

  /** `signal` aborts the downloads: every caller waiting for this pull went away. */
  async pull(
    ref: ImageReference,
    auth: RegistryCredentials | undefined,
    signal?: AbortSignal,
  ): Promise<PulledImage> {
    const { registry } = this.deps;
    // Lives as long as the downloads it tracks: one another pull still shares keeps its watch.
    const watch = new TransferWatch({
      image: formatReference(ref),
      stallTimeoutMs: this.deps.progressTimeoutMs ?? 0,
      logger: this.deps.logger,
    });
    const top = await registry.fetchManifest(ref, auth, { ...(signal ? { signal } : {}) });
    // Small blobs are stored while the pull goes on; the flush waits for them.
    const writes: Promise<void>[] = [];
    const keep = (digest: string, bytes: Buffer): void => {
      const written = this.storeSmallBlob(digest, bytes);
      // Awaited below; until then a failure must not count as unhandled.
      written.catch(() => undefined);
      writes.push(written);
    };
    keep(top.digest, top.bytes);

    let manifestBytes = top.bytes;
    let manifestMediaType = top.mediaType;
    if (INDEX_TYPES.has(manifestMediaType)) {
      const chosen = selectPlatform(checkIndex(parseJson<unknown>(top.bytes, 'image index')));
      const child = await registry.fetchManifestByDigest(ref, chosen.digest, auth, {
        preferEndpoint: top.endpoint,
        ...(signal ? { signal } : {}),
      });
      // Not stored: only the index is recorded (its digest is what kubelet pulls by), and a blob no
      // row refers to would be swept as garbage at the next start.
      manifestBytes = child.bytes;
      manifestMediaType = child.mediaType;
    }
    if (!MANIFEST_TYPES.has(manifestMediaType)) {
      throw new ImageFormatError(`unsupported manifest media type "${manifestMediaType}"`);
    }
    const manifest = checkManifest(parseJson<unknown>(manifestBytes, 'image manifest'));

    // Everything else comes from the endpoint that answered, so a mirror serves a whole image.
    const via = top.endpoint;
    const configBytes = await this.fetchConfig(ref, manifest.config, via, keep, watch, auth, signal);
    const config = checkImageConfig(parseJson<unknown>(configBytes, 'image config'), manifest.config.digest);
    const diffIds = config.rootfs?.diff_ids ?? [];
    if (diffIds.length !== manifest.layers.length) {
      throw new ImageFormatError(
        `manifest has ${manifest.layers.length} layers but config lists ${diffIds.length}`,
      );
    }

    const layers: ImageLayerRef[] = manifest.layers.map((layer, i) => ({
      digest: layer.digest,
      diffId: diffIds[i] as string,
      size: layer.size,
      mediaType: layer.mediaType,
    }));
    await inPool(layers, this.deps.layerConcurrency ?? 3, (layer) =>
      this.ensureLayer(ref, layer, via, watch, auth, signal),
    );
    // The caller records the image next: everything it relies on must be on disk first.
    await Promise.all(writes);
    await this.flush.flush();

    const size = manifest.config.size + manifest.layers.reduce((sum, l) => sum + l.size, 0);
    return {
      id: manifest.config.digest,
      // Kubelet and crictl show the digest the user can pull by: the index's when there is one.
      manifestDigest: top.digest,
      manifestMediaType,
      config,
      layers,
      size,
    };
  }

  /** The config's bytes, verified; a downloaded one is handed to `keep` to be stored. */
  private async fetchConfig(
    ref: ImageReference,
    desc: Descriptor,
    via: string,
    keep: (digest: string, bytes: Buffer) => void,
    watch: TransferWatch,
    auth?: RegistryCredentials,
    signal?: AbortSignal,
  ): Promise<Buffer> {
    const { registry, content } = this.deps;
    checkConfigSize(desc);
    if (await content.has(desc.digest)) return content.readBuffer(desc.digest);
    const blob = await registry.fetchBlob(ref, desc, auth, {
      preferEndpoint: via,
      ...(signal ? { signal } : {}),
    });
    const bytes = await readVerified(
      { digest: desc.digest, size: desc.size },
      watch.track(blob.stream, desc),
    );
    keep(desc.digest, bytes);
    return bytes;
  }

  private async storeSmallBlob(digest: string, bytes: Buffer): Promise<void> {
    const { content } = this.deps;
    if (await content.has(digest)) return;
    this.flush.noteWrite(content.rootDir);
    await content.writeBuffer(digest, bytes);
  }

  /**
   * Unpacks one layer (unless it is committed already), once however many pulls want it: while
   * downloading it when its blob is not here, else from the stored blob.
   */
  private ensureLayer(
    ref: ImageReference,
    layer: ImageLayerRef,
    via: string,
    watch: TransferWatch,
    auth?: RegistryCredentials,
    signal?: AbortSignal,
  ): Promise<void> {
    return this.layerFlights.run(
      layer.diffId,
      async (shared) => {
        const { registry, content, layers, logger } = this.deps;
        // A committed layer is whole, recorded as unpacked or not yet: this pull flushes (covering
        // whoever committed it) before it records the layer.
        if (await layers.has(layer.diffId)) return;
        const started = Date.now();
        const tmp = await layers.tmpLayerDir(layer.diffId);
        let downloaded = false;
        try {
          if (await content.has(layer.digest)) {
            await this.unpack(layer, await content.openRead(layer.digest), tmp);
          } else {
            downloaded = true;
            const blob = await registry.fetchBlob(ref, layer, auth, { preferEndpoint: via, signal: shared });
            this.flush.noteWrite(content.rootDir);
            await this.ingestAndUnpack(layer, watch.track(blob.stream, layer), tmp);
          }
          shared.throwIfAborted();
          this.flush.noteWrite(layers.layersDir);
          await layers.commitLayer(tmp, layer.diffId);
        } catch (err) {
          await rm(tmp, { recursive: true, force: true });
          throw err;
        }
        const level = layer.size > 50 * 1024 * 1024 ? 'info' : 'debug';
        const what = downloaded ? 'layer downloaded' : 'layer unpacked';
        logger[level]({ layer: layer.digest, bytes: layer.size, ms: Date.now() - started }, what);
      },
      signal,
    );
  }

  /**
   * Stores the blob and unpacks it into `tmp` from the same bytes as they arrive. The tree is
   * only good once both succeeded: the digest is known only at the end of the blob. A failed
   * download stops the unpack; a failed unpack lets the download finish, since a corrupt blob
   * (which the digest names) is the likelier cause of a broken stream than the layer itself.
   */
  private async ingestAndUnpack(layer: ImageLayerRef, download: Readable, tmp: string): Promise<void> {
    const tap = new PassThrough({ highWaterMark: TAP_BUFFER_BYTES });
    // The ingest's failure is named first: it names the blob.
    await allSettledOrThrow([
      this.deps.content.ingest({ digest: layer.digest, size: layer.size }, download, tap),
      this.unpack(layer, tap, tmp),
    ]);
  }

  private async unpack(layer: ImageLayerRef, blob: Readable, tmp: string): Promise<void> {
    const { head, bytes } = await peek(blob, 8);
    const compression = detectCompression(layer.mediaType, head);
    const result = await unpackLayer(bytes, compression, tmp, { logger: this.deps.logger }).catch(
      (err: unknown): never => {
        if (err instanceof RefusedEntryError) {
          throw new ImageFormatError(`layer ${layer.digest}: ${err.message}`, { cause: err });
        }
        throw err;
      },
    );
    if (result.diffId !== layer.diffId) {
      throw new ImageFormatError(
        `layer ${layer.digest} unpacks to ${result.diffId}, config says ${layer.diffId}`,
      );
    }
  }
}

function parseJson<T>(bytes: Buffer, what: string): T {
  try {
    return JSON.parse(bytes.toString('utf8')) as T;
  } catch (err) {
    throw new ImageFormatError(`${what} is not valid JSON: ${(err as Error).message}`);
  }
}

/**
 * The first `n` bytes of `stream` (fewer if it is shorter), and a stream of all its bytes, those
 * included: compression is told by magic bytes before the decompressor is chosen. Destroying the
 * returned stream destroys `stream`.
 */
async function peek(stream: Readable, n: number): Promise<{ head: Buffer; bytes: Readable }> {
  const chunks: AsyncIterator<Buffer> = stream[Symbol.asyncIterator]();
  const first: Buffer[] = [];
  let length = 0;
  let ended = false;
  while (length < n && !ended) {
    const next = await chunks.next();
    if (next.done) ended = true;
    else {
      first.push(next.value);
      length += next.value.length;
    }
  }
  async function* all(): AsyncGenerator<Buffer, void, undefined> {
    try {
      yield* first;
      if (ended) return;
      for (let next = await chunks.next(); !next.done; next = await chunks.next()) yield next.value;
    } finally {
      await chunks.return?.();
    }
  }
  return { head: Buffer.concat(first).subarray(0, n), bytes: Readable.from(all(), { objectMode: false }) };
}
