/**
 * A container as berthd keeps it. ContainerSpec is the validated, normalised form of the CRI
 * ContainerConfig (src/cri builds it from a request); it is stored with the container so that
 * Status, restarts and UpdateContainerResources see exactly what the container was created with.
 */
import { INITIAL_CONTAINER_STATE, type ContainerState } from './container-lifecycle.js';
import type { NamespaceMode } from './sandbox.js';

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

/** The user the container's process runs as, resolved against the image's files. */
export interface ContainerUser {
  uid: number;
  gid: number;
  /** Supplementary groups, the primary gid first. */
  additionalGids: number[];
}

/** How a container ended, as CRI reports it. */
export interface ContainerExit {
  exitCode: number;
  /** 'Completed', 'Error', 'OOMKilled', 'Unknown', 'CreateError', 'StartError'. */
  reason: string;
  message: string;
  /** Nanoseconds since the epoch, decimal string. */
  finishedAt: string;
}

/**
 * One container. Its record is written before CreateContainer does anything and so doubles as the
 * journal that start-up repair reads; its state changes only by the transitions of
 * container-lifecycle.ts.
 */
export interface Container {
  id: string;
  /** With name and attempt, unique: CRI names a container by its metadata within its pod. */
  sandboxId: string;
  name: string;
  attempt: number;
  state: ContainerState;
  /** Name of the last CreateContainer step begun; for repair logs after a crash. */
  step: string;
  spec: ContainerSpec;
  /** The image as the request named it. */
  imageName: string;
  /** The image id (config digest) the rootfs was made from. */
  imageId: string;
  /** Nanoseconds since the epoch, decimal strings (int64 ns does not fit a JS number); '0' = not yet. */
  createdAt: string;
  startedAt: string;
  finishedAt: string;
  exitCode: number;
  /** A ContainerExit's reason once exited, else ''. */
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
  /** Null until CreateContainer has resolved it (userResolved). */
  user: ContainerUser | null;
}

/** What CreateContainer decides before its first step. */
export interface NewContainer {
  id: string;
  sandboxId: string;
  spec: ContainerSpec;
  imageId: string;
  createdAt: string;
  logPath: string;
  bundleDir: string;
  cgroupsPath: string;
}

/** The journal entry CreateContainer records before its first step: nothing done yet. */
export function newContainer(input: NewContainer): Container {
  return {
    id: input.id,
    sandboxId: input.sandboxId,
    name: input.spec.metadata.name,
    attempt: input.spec.metadata.attempt,
    state: INITIAL_CONTAINER_STATE,
    step: 'reserve',
    spec: input.spec,
    imageName: input.spec.image,
    imageId: input.imageId,
    createdAt: input.createdAt,
    startedAt: '0',
    finishedAt: '0',
    exitCode: 0,
    reason: '',
    message: '',
    pid: 0,
    monitorPid: 0,
    logPath: input.logPath,
    bundleDir: input.bundleDir,
    cgroupsPath: input.cgroupsPath,
    user: null,
  };
}
