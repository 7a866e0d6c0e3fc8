/**
 * A container as berthd keeps it. ContainerSpec is the validated, normalised form of the CRI
 * ContainerConfig (src/cri builds it from a request); it is stored with the container so that
 * Status, restarts and UpdateContainerResources see exactly what the container was created with.
 */
import type {
  ContainerConfigInput,
  ContainerSecurityInput,
  SecurityProfile,
} from '../oci/container-input.js';
import type { BindMount } from '../oci/mounts.js';
import type { ResolvedUser, UserRequest } from '../oci/user.js';
import type { IdMappings } from '../oci/userns.js';
import { INITIAL_CONTAINER_STATE, type ContainerState } from './container-lifecycle.js';
import type { ContainerResources } from './resources.js';
import type { NamespaceOptions, PodUserNamespaceSpec } from './sandbox.js';

export interface ContainerMetadata {
  name: string;
  attempt: number;
}

export interface ContainerMount extends BindMount {
  selinuxRelabel: boolean;
  /**
   * kubelet's uidMappings and gidMappings: the mount is bound idmapped with them before runc sees
   * it (src/container/volumes.ts). Null for a plain bind.
   */
  idmap: IdMappings | null;
  /** An image volume: the image's layers, read-only, in place of a host path (which is then ''). */
  image: ImageVolumeSource | null;
}

export interface ImageVolumeSource {
  /** As the request named it: kubelet sends the image_ref its pull returned. */
  reference: string;
  /** The image it named when the container was created; '' until CreateContainer resolves it. */
  id: string;
  /** Relative to the image's root; '' for all of it. */
  subPath: string;
}

export interface DeviceMapping {
  containerPath: string;
  hostPath: string;
  /** cgroup permissions: some of "r", "w", "m"; "" means "rwm". */
  permissions: string;
}

export type { ContainerResources };

/** CRI has one NamespaceOption message for pods and containers. */
export type ContainerNamespaces = NamespaceOptions;

/**
 * The user namespace a CreateContainer asks for: its pod's mappings (or null, the host's), or
 * 'unset' for none said, which means the pod's. Checked against the pod at create, not stored: a
 * container always runs in its pod's user namespace.
 */
export type ContainerUserNamespace = { asked: PodUserNamespaceSpec | null } | 'unset';

/** Capability names come normalised: upper case without the CAP_ prefix, or "ALL". */
export interface ContainerSecurity extends ContainerSecurityInput, UserRequest {
  namespaces: ContainerNamespaces;
  seccomp: SecurityProfile;
  apparmor: SecurityProfile;
}

/** ContainerConfigInput is the part the OCI spec reads as it is; mounts and devices are resolved first. */
export interface ContainerSpec extends ContainerConfigInput {
  metadata: ContainerMetadata;
  /** The image as the request named it (kubelet sends the image id here). */
  image: string;
  /** The image as the pod spec names it (kubelet's user_specified_image), '' when not sent. */
  userSpecifiedImage: string;
  mounts: ContainerMount[];
  devices: DeviceMapping[];
  /** Qualified CDI device names (vendor.com/class=name), from the CRI field and the annotations. */
  cdiDevices: string[];
  labels: Record<string, string>;
  /** Relative to the sandbox's log_directory; '' means no log file. */
  logPath: string;
  stdin: boolean;
  stdinOnce: boolean;
  resources: ContainerResources;
  security: ContainerSecurity;
}

/** The user the container's process runs as, resolved against the image's files. */
export type ContainerUser = ResolvedUser;

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
  /**
   * Created from a checkpoint archive: its rootfs and spec are the checkpointed container's, and
   * StartContainer restores the checkpointed process instead of starting the image's command.
   */
  restore: boolean;
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
  /** See Container.restore; false when absent. */
  restore?: boolean;
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
    restore: input.restore ?? false,
  };
}
