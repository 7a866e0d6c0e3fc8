/**
 * A container as the domain sees it: a validated, normalised form of the CRI ContainerConfig.
 * src/cri builds it from a request; it is stored as JSON with the container row so that Status,
 * restarts and UpdateContainerResources see exactly what the container was created with.
 */
import type { NamespaceMode } from '../sandbox/types.js';

export interface ContainerMetadata {
  name: string;
  attempt: number;
}

export interface KeyValue {
  key: string;
  value: string;
}

/** CRI MountPropagation: PRIVATE, HOST_TO_CONTAINER (rslave), BIDIRECTIONAL (rshared). */
export type MountPropagation = 'PRIVATE' | 'HOST_TO_CONTAINER' | 'BIDIRECTIONAL';

export interface ContainerMount {
  /** Absolute, inside the container. */
  containerPath: string;
  /** Absolute, on the host. A symlink is resolved when the spec is built. */
  hostPath: string;
  readonly: boolean;
  /** Read-only all the way down (submounts too); needs readonly and PRIVATE propagation. */
  recursiveReadOnly: boolean;
  selinuxRelabel: boolean;
  propagation: MountPropagation;
}

export interface DeviceMapping {
  containerPath: string;
  hostPath: string;
  /** cgroup permissions: some of "r", "w", "m"; "" means "rwm". */
  permissions: string;
}

/** Seccomp and AppArmor profiles as CRI's SecurityProfile names them. */
export type SecurityProfile =
  | { kind: 'RuntimeDefault' }
  | { kind: 'Unconfined' }
  /** `path` is absolute on the host (seccomp: a JSON profile file; AppArmor: a loaded profile name). */
  | { kind: 'Localhost'; path: string };

export interface HugepageLimit {
  /** e.g. "2MB", "1GB" as kubelet sends it. */
  pageSize: string;
  limit: number;
}

/** Zero means "not set" for every number, as in CRI's LinuxContainerResources. */
export interface ContainerResources {
  cpuPeriod: number;
  cpuQuota: number;
  cpuShares: number;
  memoryLimitBytes: number;
  /** Before clamping to what this host allows. */
  oomScoreAdj: number;
  cpusetCpus: string;
  cpusetMems: string;
  hugepageLimits: HugepageLimit[];
  /** cgroup v2 files and values. */
  unified: Record<string, string>;
  memorySwapLimitBytes: number;
}

export interface ContainerNamespaces {
  network: NamespaceMode;
  pid: NamespaceMode;
  ipc: NamespaceMode;
  /** The container whose pid namespace a TARGET pid mode joins. */
  targetId: string;
}

export interface ContainerSecurity {
  /** Capability names without the CAP_ prefix, upper case, or "ALL". */
  addCapabilities: string[];
  dropCapabilities: string[];
  addAmbientCapabilities: string[];
  privileged: boolean;
  namespaces: ContainerNamespaces;
  runAsUser: number | null;
  /** '' when not set. Exclusive with runAsUser. */
  runAsUsername: string;
  /** Only valid together with runAsUser or runAsUsername (CRI rejects it alone). */
  runAsGroup: number | null;
  readonlyRootfs: boolean;
  supplementalGroups: number[];
  noNewPrivs: boolean;
  /** null: the runtime's defaults; [] (with privileged or procMount Unmasked): none. */
  maskedPaths: string[] | null;
  readonlyPaths: string[] | null;
  seccomp: SecurityProfile;
  apparmor: SecurityProfile;
}

export interface ContainerSpec {
  metadata: ContainerMetadata;
  /** The image as the request named it (kubelet sends the image id here). */
  image: string;
  /** The image as the pod spec names it (kubelet's user_specified_image), '' when not sent. */
  userSpecifiedImage: string;
  /** Overrides the image's Entrypoint when non-empty. */
  command: string[];
  /** Overrides the image's Cmd when non-empty. */
  args: string[];
  workingDir: string;
  envs: KeyValue[];
  mounts: ContainerMount[];
  devices: DeviceMapping[];
  labels: Record<string, string>;
  annotations: Record<string, string>;
  /** Relative to the sandbox's log_directory; '' means no log file. */
  logPath: string;
  stdin: boolean;
  stdinOnce: boolean;
  tty: boolean;
  resources: ContainerResources;
  security: ContainerSecurity;
}

export type ContainerStateName =
  'CONTAINER_CREATED' | 'CONTAINER_RUNNING' | 'CONTAINER_EXITED' | 'CONTAINER_UNKNOWN';

/** What ContainerStatus and ListContainers report; src/cri maps it to the wire form. */
export interface ContainerView {
  id: string;
  podSandboxId: string;
  metadata: ContainerMetadata;
  /** A readable name: the user-specified image, else the image's first tag, else spec.image. */
  image: string;
  userSpecifiedImage: string;
  /** The image's repo digest when it has one, else its id (what containerd reports). */
  imageRef: string;
  /** The image id (config digest). */
  imageId: string;
  state: ContainerStateName;
  /** Nanoseconds since the epoch as decimal strings; '0' when it has not happened. */
  createdAt: string;
  startedAt: string;
  finishedAt: string;
  exitCode: number;
  /** 'Completed', 'Error', 'OOMKilled', or '' while not exited. */
  reason: string;
  message: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  mounts: ContainerMount[];
  /** Absolute path of the CRI log file, '' when none. */
  logPath: string;
  resources: ContainerResources;
  /** The user the process runs as. */
  user: { uid: number; gid: number; supplementalGroups: number[] };
  /** Where the container's processes live (for cgroup stats). */
  pid: number;
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

export interface ExecSyncResult {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number;
  /** The command did not finish within the request's timeout and was killed. */
  timedOut: boolean;
}

export interface ContainerStatsView {
  id: string;
  podSandboxId: string;
  metadata: ContainerMetadata;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  /** All timestamps in ns since the epoch, decimal strings. */
  cpu: { timestamp: string; usageCoreNanoSeconds: string } | null;
  memory: {
    timestamp: string;
    workingSetBytes: string;
    usageBytes: string;
    rssBytes: string;
    pageFaults: string;
    majorPageFaults: string;
  } | null;
  writableLayer: { timestamp: string; mountpoint: string; usedBytes: string; inodesUsed: string } | null;
}
