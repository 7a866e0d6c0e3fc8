/**
 * The image records the store reads and writes; sandboxes and containers are the model's own
 * (src/model). The SQLite column layout lives in state/; src/store maps between the two so nothing
 * else touches SQL.
 */
import type { ImageConfig } from '../model/image.js';

/** One layer of an image, in manifest order (base first). */
export interface ImageLayerRef {
  /** Digest of the blob as the registry serves it (usually compressed). */
  digest: string;
  /** Digest of the uncompressed tar: the key of the unpacked layer, shared across images. */
  diffId: string;
  /** Size of the blob in bytes. */
  size: number;
  mediaType: string;
}

export interface ImageRecord {
  /** The config digest, "sha256:<hex>": what CRI calls the image id. */
  id: string;
  manifestDigest: string;
  manifestMediaType: string;
  /** The image config blob as pulled, parsed. */
  config: ImageConfig;
  /** Sum of the compressed layer sizes plus the config size, as CRI reports it. */
  size: number;
  layers: ImageLayerRef[];
  /** Nanoseconds since the epoch, decimal string (see Sandbox.createdAt in src/model). */
  createdAt: string;
  lastUsedAt: string;
  /** Exempt from kubelet's image garbage collection. */
  pinned: boolean;
}

/** A repo tag (`docker.io/library/busybox:latest`) or a repo digest (`...busybox@sha256:<hex>`). */
export type ImageNameKind = 'tag' | 'digest';

/** An image's names by kind, each list sorted. */
export interface ImageNames {
  repoTags: string[];
  repoDigests: string[];
}

export type ImageWithNames = ImageRecord & ImageNames;

/** What deleteImage removed and what it left without any user, for the caller to delete on disk. */
export interface DeletedImage {
  image: ImageRecord;
  /** Layer rows deleted with the image because no other image uses them; their dirs are now garbage. */
  unusedLayers: LayerRecord[];
  /** Blobs (manifest, config, layers) no remaining image refers to. */
  unusedBlobs: string[];
}

/** What removeName changed. */
export interface RemovedName {
  imageId: string;
  /** The image has no name left. */
  orphaned: boolean;
}

/** An unpacked (or being unpacked) layer, shared by every image whose diff_ids contain it. */
export interface LayerRecord {
  diffId: string;
  /** The blob it is (being) unpacked from. */
  blobDigest: string;
  /** Size of that blob in bytes. */
  size: number;
  /** Its directory under layers/ is complete; false while a pull is unpacking it. */
  unpacked: boolean;
  createdAt: string;
}

export type NewLayer = Omit<LayerRecord, 'unpacked'>;
