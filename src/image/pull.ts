import { rm } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { BerthError } from '../errors.js';
import type { ContentStore } from '../imagestore/content.js';
import type { LayerStore } from '../imagestore/layers.js';
import type { ImageLayerRef } from '../imagestore/types.js';
import type { ImageRepo } from '../store/images.js';
import { nowNanos } from '../time.js';
import type { Logger } from '../log.js';
import type { RegistryClient, RegistryCredentials } from '../registry/client.js';
import { MEDIA_TYPES, type Descriptor, type ImageIndex, type ImageManifest } from '../registry/manifest.js';
import { selectPlatform } from '../registry/platform.js';
import type { ImageReference } from '../registry/reference.js';
import { detectCompression, unpackLayer } from '../unpack/index.js';
import { SingleFlight } from './singleflight.js';
import type { ImageConfig } from '../model/image.js';

/** An image whose bytes are all verified, stored and unpacked, ready to be recorded. */
export interface PulledImage {
  id: string;
  manifestDigest: string;
  manifestMediaType: string;
  config: ImageConfig;
  layers: ImageLayerRef[];
  size: number;
}

export class ImageFormatError extends BerthError {
  override name = 'ImageFormatError';
}

export interface PullerDeps {
  registry: RegistryClient;
  content: ContentStore;
  layers: LayerStore;
  repo: ImageRepo;
  logger: Logger;
  /** Layers fetched at once per pull; registries and disks both prefer a few streams to many. */
  layerConcurrency?: number;
}

const INDEX_TYPES = new Set<string>([MEDIA_TYPES.ociIndex, MEDIA_TYPES.dockerManifestList]);
const MANIFEST_TYPES = new Set<string>([MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerManifest]);

/**
 * Fetches an image into the content store and unpacks its layers once each. Every blob is checked
 * against its digest and size before use; an interrupted pull leaves only temporary files.
 */
export class Puller {
  private readonly layerFlights = new SingleFlight<void>();

  constructor(private readonly deps: PullerDeps) {}

  /** `signal` aborts the downloads: every caller waiting for this pull went away. */
  async pull(
    ref: ImageReference,
    auth: RegistryCredentials | undefined,
    signal?: AbortSignal,
  ): Promise<PulledImage> {
    const { registry, content } = this.deps;
    const top = await registry.fetchManifest(ref, auth, { ...(signal ? { signal } : {}) });
    await content.writeBuffer(top.digest, top.bytes);

    let manifestBytes = top.bytes;
    let manifestMediaType = mediaTypeOf(top.bytes, top.mediaType);
    if (INDEX_TYPES.has(manifestMediaType)) {
      const chosen = selectPlatform(parseJson<ImageIndex>(top.bytes, 'image index'));
      const child = await registry.fetchManifestByDigest(ref, chosen.digest, auth, {
        preferEndpoint: top.endpoint,
        ...(signal ? { signal } : {}),
      });
      // Not stored: only the index is recorded (its digest is what kubelet pulls by), and a blob no
      // row refers to would be swept as garbage at the next start.
      manifestBytes = child.bytes;
      manifestMediaType = mediaTypeOf(child.bytes, child.mediaType);
    }
    if (!MANIFEST_TYPES.has(manifestMediaType)) {
      throw new ImageFormatError(`unsupported manifest media type "${manifestMediaType}"`);
    }
    const manifest = parseJson<ImageManifest>(manifestBytes, 'image manifest');
    if (!manifest.config?.digest || !Array.isArray(manifest.layers)) {
      throw new ImageFormatError('image manifest lacks a config or layers');
    }

    // Everything else comes from the endpoint that answered, so a mirror serves a whole image.
    const via = top.endpoint;
    const configBytes = await this.fetchSmallBlob(ref, manifest.config, via, auth, signal);
    const config = parseJson<ImageConfig>(configBytes, 'image config');
    // The store reads the config back as an object; anything else would make the image unreadable.
    if (typeof config !== 'object' || config === null || Array.isArray(config)) {
      throw new ImageFormatError('image config is not a JSON object');
    }
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
    await this.forEachLimited(layers, (layer) => this.ensureLayer(ref, layer, via, auth, signal));

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

  private async fetchSmallBlob(
    ref: ImageReference,
    desc: Descriptor,
    via: string,
    auth?: RegistryCredentials,
    signal?: AbortSignal,
  ): Promise<Buffer> {
    const { registry, content } = this.deps;
    if (!(await content.has(desc.digest))) {
      const blob = await registry.fetchBlob(ref, desc, auth, {
        preferEndpoint: via,
        ...(signal ? { signal } : {}),
      });
      await content.ingest({ digest: desc.digest, size: desc.size }, blob.stream);
    }
    return content.readBuffer(desc.digest);
  }

  /** Downloads (unless the blob is here) and unpacks (unless the layer is) one layer, once. */
  private ensureLayer(
    ref: ImageReference,
    layer: ImageLayerRef,
    via: string,
    auth?: RegistryCredentials,
    signal?: AbortSignal,
  ): Promise<void> {
    return this.layerFlights.run(
      layer.diffId,
      async (shared) => {
        const { registry, content, layers, repo, logger } = this.deps;
        if (repo.getLayer(layer.diffId)?.unpacked && (await layers.has(layer.diffId))) return;
        if (!(await content.has(layer.digest))) {
          const started = Date.now();
          const blob = await registry.fetchBlob(ref, layer, auth, { preferEndpoint: via, signal: shared });
          await content.ingest({ digest: layer.digest, size: layer.size }, blob.stream);
          const level = layer.size > 50 * 1024 * 1024 ? 'info' : 'debug';
          logger[level](
            { layer: layer.digest, bytes: layer.size, ms: Date.now() - started },
            'layer downloaded',
          );
        }
        repo.putLayer({
          diffId: layer.diffId,
          blobDigest: layer.digest,
          size: layer.size,
          createdAt: nowNanos(),
        });
        shared.throwIfAborted();
        await this.unpack(layer);
        repo.markLayerUnpacked(layer.diffId);
      },
      signal,
    );
  }

  private async unpack(layer: ImageLayerRef): Promise<void> {
    const { content, layers, logger } = this.deps;
    const started = Date.now();
    const tmp = await layers.tmpLayerDir(layer.diffId);
    try {
      const head = await readHead(await content.openRead(layer.digest));
      const compression = detectCompression(layer.mediaType, head);
      const result = await unpackLayer(await content.openRead(layer.digest), compression, tmp, { logger });
      if (result.diffId !== layer.diffId) {
        throw new ImageFormatError(
          `layer ${layer.digest} unpacks to ${result.diffId}, config says ${layer.diffId}`,
        );
      }
      await layers.commitLayer(tmp, layer.diffId);
    } catch (err) {
      await rm(tmp, { recursive: true, force: true });
      throw err;
    }
    logger.debug({ layer: layer.diffId, ms: Date.now() - started }, 'layer unpacked');
  }

  private async forEachLimited<T>(items: T[], work: (item: T) => Promise<void>): Promise<void> {
    const limit = this.deps.layerConcurrency ?? 3;
    let next = 0;
    const failures: unknown[] = [];
    const worker = async (): Promise<void> => {
      while (next < items.length && failures.length === 0) {
        const item = items[next++] as T;
        await work(item).catch((err: unknown) => failures.push(err));
      }
    };
    await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
    if (failures.length > 0) throw failures[0];
  }
}

function parseJson<T>(bytes: Buffer, what: string): T {
  try {
    return JSON.parse(bytes.toString('utf8')) as T;
  } catch (err) {
    throw new ImageFormatError(`${what} is not valid JSON: ${(err as Error).message}`);
  }
}

/** Registries sometimes answer with a generic Content-Type; the document's own mediaType decides. */
function mediaTypeOf(bytes: Buffer, header: string): string {
  const doc = parseJson<{ mediaType?: string; manifests?: unknown; config?: unknown }>(bytes, 'manifest');
  if (doc.mediaType) return doc.mediaType;
  if (Array.isArray(doc.manifests)) return MEDIA_TYPES.ociIndex;
  if (doc.config) return MEDIA_TYPES.ociManifest;
  return header;
}

async function readHead(stream: Readable, bytes = 8): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of stream) {
    chunks.push(chunk as Buffer);
    length += (chunk as Buffer).length;
    if (length >= bytes) break;
  }
  stream.destroy();
  return Buffer.concat(chunks).subarray(0, bytes);
}
