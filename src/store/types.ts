/**
 * The shapes the store reads and writes besides the model's own records (src/model): images, and
 * the legacy sandbox and container rows. The SQLite column layout lives in state/; src/store maps
 * between the two so nothing else touches SQL.
 */
import type { Container } from '../model/container.js';
import type { Sandbox } from '../model/sandbox.js';

export type { NetworkState, SandboxState } from '../model/sandbox-lifecycle.js';
export type { ContainerState } from '../model/container-lifecycle.js';

/** A sandbox's fields that are plain columns: all but the JSON ones. */
export type SandboxColumns = Omit<Sandbox, 'spec' | 'cniConfig' | 'cniResults'>;

/**
 * Legacy: a Sandbox with its JSON columns as text, for the row API that goes once its callers use
 * SandboxRepo.
 */
export interface SandboxRow extends SandboxColumns {
  /** The SandboxSpec (src/model/sandbox.ts), JSON. */
  configJson: string;
  /** JSON: the CNI network lists and attachment used for ADD (StoredNetworking), kept so DEL works after a restart. */
  cniConfigJson: string | null;
  /** JSON: the CNI results of the ADDs (loopback and default network). */
  cniResultJson: string | null;
}

/** Fields to change in a sandbox row; the id is the row's identity and never changes. */
export type SandboxPatch = Partial<Omit<SandboxRow, 'id'>>;

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
  /** The image config blob as pulled (JSON). */
  configJson: string;
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

/** A container's fields that are plain columns: all but the JSON ones. */
export type ContainerColumns = Omit<Container, 'spec' | 'user'>;

/**
 * Legacy: a Container with its JSON columns as text, for the row API that goes once its callers
 * use ContainerRepo.
 */
export interface ContainerRow extends ContainerColumns {
  /** The ContainerSpec (src/model/container.ts), JSON. */
  configJson: string;
  /** The user the process runs as, JSON {uid, gid, additionalGids}; {} until it is resolved. */
  userJson: string;
}

export type ContainerPatch = Partial<Omit<ContainerRow, 'id' | 'sandboxId' | 'name' | 'attempt'>>;
