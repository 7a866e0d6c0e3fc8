/** What the container service reports and filters by; the stored container itself is src/model/container.ts. */
import type { Container, ContainerMetadata, ContainerMount, ContainerResources } from '../model/container.js';
import type { CpuUsageView, IoUsageView, MemoryUsageView, SwapUsageView } from './usage.js';

export type ContainerStateName =
  'CONTAINER_CREATED' | 'CONTAINER_RUNNING' | 'CONTAINER_EXITED' | 'CONTAINER_UNKNOWN';

/** The fields ContainerStatus and ListContainers report as the record has them. */
type RecordedFields =
  | 'id'
  | 'imageId'
  | 'createdAt'
  | 'startedAt'
  | 'finishedAt'
  | 'exitCode'
  | 'reason'
  | 'message'
  | 'logPath'
  | 'pid';

/** What ContainerStatus and ListContainers report; src/cri maps it to the wire form. */
export interface ContainerView extends Pick<Container, RecordedFields> {
  podSandboxId: string;
  metadata: ContainerMetadata;
  /** A readable name: the user-specified image, else the image's first tag, else spec.image. */
  image: string;
  userSpecifiedImage: string;
  /** The image's repo digest when it has one, else its id (what containerd reports). */
  imageRef: string;
  state: ContainerStateName;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  mounts: ContainerMount[];
  resources: ContainerResources;
  /** The user the process runs as. */
  user: { uid: number; gid: number; supplementalGroups: number[] };
}

export interface ContainerVerboseInfo {
  pid: number;
  sandboxId: string;
  bundleDir: string;
  rootfs: string;
  /** The OCI runtime spec the container was created with. */
  runtimeSpec: unknown;
}

export interface ContainerFilter {
  /** Exact id or unique prefix. */
  id?: string;
  state?: ContainerStateName;
  /** Exact id or unique prefix of the pod sandbox. */
  podSandboxId?: string;
  labelSelector?: Record<string, string>;
}

export interface ContainerStatsView {
  id: string;
  podSandboxId: string;
  metadata: ContainerMetadata;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  /** All timestamps in ns since the epoch, decimal strings. */
  cpu: CpuUsageView | null;
  memory: MemoryUsageView | null;
  swap: SwapUsageView | null;
  io: IoUsageView | null;
  writableLayer: { timestamp: string; mountpoint: string; usedBytes: string; inodesUsed: string } | null;
}

/** The writable layers of all containers together, and the filesystem they are on. */
export interface WritableLayersUsage {
  timestampNs: string;
  mountpoint: string;
  bytes: bigint;
  inodes: bigint;
}
