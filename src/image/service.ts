import { createHash } from 'node:crypto';
import { FailedPreconditionError } from '../errors.js';
import type { ContentStore } from '../imagestore/content.js';
import type { LayerStore } from '../imagestore/layers.js';
import type { ImageNames, ImageRecord } from '../imagestore/types.js';
import type { Logger } from '../log.js';
import type { RegistryCredentials } from '../registry/client.js';
import type { ImageRepo } from '../store/images.js';
import type { PullSettings } from './puller-factory.js';
import type { Puller } from './pull.js';
import { formatReference, isDigest, parseReference, repoDigest, repoTag } from '../registry/reference.js';
import { SingleFlight } from '../kit/single-flight.js';
import { imageUser } from './user.js';
import { nowNanos } from '../time.js';
import { isObject } from '../store/columns.js';

/** What ImageStatus and ListImages report; src/cri maps it to the wire form. */
export interface ImageView {
  id: string;
  repoTags: string[];
  repoDigests: string[];
  size: number;
  uid: number | null;
  username: string;
  pinned: boolean;
}

export interface ImageFsUsage {
  mountpoint: string;
  bytes: number;
  inodes: number;
  timestampNs: string;
}

export interface ImageServiceDeps {
  repo: ImageRepo;
  content: ContentStore;
  layers: LayerStore;
  registry: PullSettings;
  rootDir: string;
  logger: Logger;
  /** Ids of the containers whose rootfs is made from the image; they keep it from being removed. */
  usedBy?: (imageId: string) => string[];
  /** Told of each pull's end, once per pull however many callers share it (berthd's metrics). */
  onPullDone?: (done: PullDone) => void;
}

/** `bytes`: the pulled image's size (its config and compressed layers), whether fetched or already held. */
export type PullDone =
  { ok: true; bytes: number; seconds: number } | { ok: false; error: unknown; seconds: number };

export class ImageService {
  private readonly pulls = new SingleFlight<string>();
  /** Manifest annotations by image id (manifestAnnotations); an entry goes with its image. */
  private readonly annotations = new Map<string, Record<string, string>>();
  private puller: Promise<Puller> | undefined;

  constructor(private readonly deps: ImageServiceDeps) {}

  /** Returns the image id (config digest). Concurrent pulls of one reference share the work. */
  async pull(image: string, auth?: RegistryCredentials, signal?: AbortSignal): Promise<string> {
    const ref = parseReference(image, 'image.image');
    // Callers share a pull only when they bring the same credentials: otherwise one with a wrong
    // password would be handed the image another's right one fetched (and a bad token would fail
    // a good pull).
    return this.pulls.run(
      `${formatReference(ref)}\0${credentialsKey(auth)}`,
      async (shared) => {
        const started = Date.now();
        const puller = await this.loadPuller();
        const seconds = (): number => (Date.now() - started) / 1000;
        const pulled = await puller.pull(ref, auth, shared).catch((error: unknown): never => {
          this.deps.onPullDone?.({ ok: false, error, seconds: seconds() });
          throw error;
        });
        const now = nowNanos();
        const record: ImageRecord = {
          id: pulled.id,
          manifestDigest: pulled.manifestDigest,
          manifestMediaType: pulled.manifestMediaType,
          config: pulled.config,
          size: pulled.size,
          layers: pulled.layers,
          createdAt: now,
          lastUsedAt: now,
          pinned: false,
        };
        const tag = repoTag(ref);
        const names = [...(tag ? [tag] : []), repoDigest(ref, pulled.manifestDigest)];
        const orphaned = this.deps.repo.putPulledImage(record, names);
        for (const id of orphaned) await this.deleteImage(id);
        this.deps.logger.info(
          { image: formatReference(ref), id: pulled.id, ms: Date.now() - started },
          'image pulled',
        );
        this.deps.onPullDone?.({ ok: true, bytes: pulled.size, seconds: seconds() });
        return pulled.id;
      },
      signal,
    );
  }

  /** Null when the image is unknown: kubelet expects an empty status, not an error. */
  status(image: string): ImageView | null {
    const record = this.find(image);
    return record ? this.view(record) : null;
  }

  verboseInfo(image: string): Record<string, string> {
    const record = this.find(image);
    if (!record) return {};
    return {
      info: JSON.stringify({
        manifestDigest: record.manifestDigest,
        layers: record.layers,
        imageSpec: record.config,
      }),
    };
  }

  list(filter?: string): ImageView[] {
    if (filter) {
      const record = this.find(filter);
      return record ? [this.view(record)] : [];
    }
    // One query for every image's names, not one per image.
    return this.deps.repo.listImages().map((record) => this.view(record, record));
  }

  /**
   * By tag: that tag goes, and the image with it once no tag is left. By id or digest: the image.
   * Unknown images are fine: RemoveImage is idempotent.
   */
  async remove(image: string): Promise<void> {
    const record = this.find(image);
    if (!record) return;
    const { repo } = this.deps;
    const name = this.nameFor(image);
    const byTag = name !== null && !isDigestName(name) && repo.imageNames(record.id).repoTags.includes(name);
    if (byTag && repo.imageNames(record.id).repoTags.length > 1) {
      repo.removeName(name);
      return;
    }
    // Containers' overlays stack on the image's layers: deleting them would pull the floor out.
    const users = this.deps.usedBy?.(record.id) ?? [];
    if (users.length > 0) {
      throw new FailedPreconditionError(
        `image ${record.id} is in use by container ${users.join(', ')}: remove the container first`,
      );
    }
    if (byTag) repo.removeName(name);
    await this.deleteImage(record.id);
  }

  /** The image a container names (reference, id or unique id prefix), with what its status reports. */
  resolve(image: string): { record: ImageRecord; repoDigests: string[] } | undefined {
    const record = this.find(image);
    return record ? { record, repoDigests: this.deps.repo.imageNames(record.id).repoDigests } : undefined;
  }

  /**
   * The annotations of the image's manifest, {} when it has none: a checkpoint image is marked
   * there. Read from the stored manifest once per image; an image's manifest never changes.
   */
  async manifestAnnotations(record: ImageRecord): Promise<Record<string, string>> {
    let annotations = this.annotations.get(record.id);
    if (annotations === undefined) {
      // The manifest was checked when pulled; one unreadable now marks nothing, as none would.
      const manifest: unknown = await this.deps.content
        .readBuffer(record.manifestDigest)
        .then((bytes): unknown => JSON.parse(bytes.toString('utf8')))
        .catch(() => null);
      const found = isObject(manifest) && isObject(manifest.annotations) ? manifest.annotations : {};
      annotations = Object.fromEntries(
        Object.entries(found).filter((entry): entry is [string, string] => typeof entry[1] === 'string'),
      );
      this.annotations.set(record.id, annotations);
    }
    return annotations;
  }

  /**
   * What a container's status says of its image: its first tag (a readable name) and its repo
   * digest, or its id when it has none (or is gone), as image_ref.
   */
  nameOf(imageId: string): { firstTag: string | undefined; ref: string } {
    const names = this.deps.repo.imageNames(imageId);
    return { firstTag: names.repoTags[0], ref: names.repoDigests[0] ?? imageId };
  }

  async fsInfo(): Promise<ImageFsUsage> {
    const usage = await this.deps.content.usage();
    return {
      mountpoint: this.deps.rootDir,
      bytes: usage.bytes,
      inodes: usage.inodes,
      timestampNs: nowNanos(),
    };
  }

  /**
   * The registry client, decompressors and tar unpacker are loaded on the first pull, not at
   * start-up: a node that has its images never pays for them in memory.
   */
  private loadPuller(): Promise<Puller> {
    if (!this.puller) {
      const { content, layers, logger, registry } = this.deps;
      this.puller = import('./puller-factory.js').then(({ createPuller }) =>
        createPuller({ ...registry, content, layers, logger }),
      );
      // A failed load (a broken install) is tried again by the next pull.
      this.puller.catch(() => (this.puller = undefined));
    }
    return this.puller;
  }

  private async deleteImage(id: string): Promise<void> {
    this.annotations.delete(id);
    const deleted = this.deps.repo.deleteImage(id);
    if (!deleted) return;
    // The rows went first: a crash here leaves unreferenced files, which start-up sweeps.
    for (const layer of deleted.unusedLayers) await this.deps.layers.removeLayer(layer.diffId);
    for (const blob of deleted.unusedBlobs) await this.deps.content.delete(blob);
    this.deps.logger.info({ id }, 'image removed');
  }

  /** An image id (full, without "sha256:", or a unique prefix), a tag, or a digest reference. */
  private find(image: string): ImageRecord | undefined {
    const { repo } = this.deps;
    const asId = image.startsWith('sha256:') ? image : `sha256:${image}`;
    const byId = repo.getImage(asId);
    if (byId) return byId;
    const name = this.nameFor(image);
    const byName = name ? repo.findImageByName(name) : undefined;
    if (byName) return byName;
    if (/^[0-9a-f]{6,64}$/.test(image)) {
      const matches = repo.findImagesByIdPrefix(`sha256:${image}`);
      if (matches.length === 1) return matches[0];
    }
    return undefined;
  }

  private nameFor(image: string): string | null {
    try {
      const ref = parseReference(image);
      return ref.digest ? repoDigest(ref, ref.digest) : repoTag(ref);
    } catch {
      return null;
    }
  }

  private view(record: ImageRecord, names: ImageNames = this.deps.repo.imageNames(record.id)): ImageView {
    const user = imageUser(record.config.config?.User);
    return {
      id: record.id,
      repoTags: names.repoTags,
      repoDigests: names.repoDigests,
      size: record.size,
      uid: user.uid,
      username: user.username,
      pinned: record.pinned,
    };
  }
}

function isDigestName(name: string): boolean {
  const at = name.lastIndexOf('@');
  return at >= 0 && isDigest(name.slice(at + 1));
}

function credentialsKey(auth: RegistryCredentials | undefined): string {
  if (!auth) return '';
  const { username, password, auth: basic, identityToken, registryToken } = auth;
  return createHash('sha256')
    .update(JSON.stringify([username, password, basic, identityToken, registryToken]))
    .digest('hex');
}
