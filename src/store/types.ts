/**
 * Rows as the daemon sees them. The SQLite column layout lives in state/; src/store maps
 * between the two so nothing else touches SQL.
 */

/** CREATING doubles as a journal entry: a row left in CREATING after a crash is rolled back at start. */
export type SandboxState = 'CREATING' | 'READY' | 'NOTREADY';

/**
 * Where the pod's CNI attachment stands. ADDING is written before the first ADD so that a crash
 * mid-ADD still leads to a DEL; TORN_DOWN only after every DEL succeeded.
 */
export type NetworkState = 'NONE' | 'ADDING' | 'READY' | 'TORN_DOWN';

export interface SandboxRow {
  id: string;
  name: string;
  namespace: string;
  uid: string;
  attempt: number;
  state: SandboxState;
  /** Name of the last RunPodSandbox step begun; for repair logs after a crash. */
  step: string;
  /** The PodSandboxConfig as received, JSON (proto-loader object form, keepCase). */
  configJson: string;
  runtimeHandler: string;
  hostNetwork: boolean;
  /** The SandboxKey: path of the pinned netns file. Null for host-network pods. */
  netnsPath: string | null;
  networkState: NetworkState;
  /** JSON: the CNI network lists and attachment used for ADD, kept so DEL works after a restart. */
  cniConfigJson: string | null;
  /** JSON: the CNI results of the ADDs (loopback and default network). */
  cniResultJson: string | null;
  ip: string;
  additionalIps: string[];
  /** Nanoseconds since the epoch, as a decimal string: int64 ns does not fit a JS number. */
  createdAt: string;
  /** Host pid of the infra process, 0 when none is running. */
  pid: number;
  cgroupParent: string;
  /** Per-sandbox directory: OCI bundle, resolv.conf, hostname. */
  sandboxDir: string;
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
  /** Nanoseconds since the epoch, decimal string (see SandboxRow.createdAt). */
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

/**
 * CREATING doubles as a journal entry (rolled back at start-up); CREATED, RUNNING and EXITED are
 * CRI's states. The state is what berth last learned: a RUNNING row whose exit file appeared while
 * berthd was down becomes EXITED at start-up.
 */
export type ContainerState = 'CREATING' | 'CREATED' | 'RUNNING' | 'EXITED';

export interface ContainerRow {
  id: string;
  sandboxId: string;
  name: string;
  attempt: number;
  state: ContainerState;
  /** Name of the last CreateContainer step begun; for repair logs after a crash. */
  step: string;
  /** The validated ContainerSpec (src/container/types.ts), JSON. */
  configJson: string;
  /** The image as the request named it. */
  imageName: string;
  /** The image id (config digest) the rootfs was made from. */
  imageId: string;
  /** Nanoseconds since the epoch, decimal strings (see SandboxRow.createdAt); '0' = not yet. */
  createdAt: string;
  startedAt: string;
  finishedAt: string;
  exitCode: number;
  /** 'Completed', 'Error', 'OOMKilled', 'Unknown' once exited, else ''. */
  reason: string;
  message: string;
  /** Host pid of the container's init; 0 when none. */
  pid: number;
  /** Host pid of its conmon; 0 when none. */
  monitorPid: number;
  /** Absolute path of the CRI log file, '' when the container has none. */
  logPath: string;
  /** OCI bundle: config.json, conmon's pid files and ctl fifo. */
  bundleDir: string;
  /** runc's cgroupsPath, for stats and updates. */
  cgroupsPath: string;
  /** The user the process runs as, JSON {uid, gid, additionalGids}. */
  userJson: string;
}

export type ContainerPatch = Partial<Omit<ContainerRow, 'id' | 'sandboxId' | 'name' | 'attempt'>>;
