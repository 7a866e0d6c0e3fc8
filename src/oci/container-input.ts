/**
 * What the OCI spec of a CRI container is built from: the validated container config, the pod's
 * config, the image's config and what src/container/prepare.ts resolved on the host. Plain inputs
 * of oci/'s own, so oci/ knows nothing of pods or of the CRI wire.
 */
import type { PodUserNamespace } from './userns.js';
import type { CapabilityRequest, ContainerCapabilities } from './capabilities.js';
import type { SourcedMount } from './mounts.js';
import type { LinuxDevice, LinuxDeviceCgroup, Seccomp } from './spec.js';
import type { ResolvedUser } from './user.js';

/** Seccomp and AppArmor profiles as CRI's SecurityProfile names them. */
export type SecurityProfile =
  | { kind: 'RuntimeDefault' }
  | { kind: 'Unconfined' }
  /** `path` is absolute on the host (seccomp: a JSON profile file; AppArmor: a loaded profile name). */
  | { kind: 'Localhost'; path: string };

/** CRI namespace modes: the pod's, the container's own, the host's, or another container's. */
export type NamespaceMode = 'POD' | 'CONTAINER' | 'NODE' | 'TARGET';

/** The namespaces CRI lets a pod or a container choose a mode for. */
export interface NamespaceModes {
  network: NamespaceMode;
  pid: NamespaceMode;
  ipc: NamespaceMode;
}

export interface KeyValue {
  key: string;
  value: string;
}

export interface HugepageLimit {
  /** e.g. "2MB", "1GB" as kubelet sends it. */
  pageSize: string;
  limit: number;
}

/** CRI LinuxContainerResources as cgroup limits. Zero means "not set" for every number. */
export interface ResourceLimits {
  cpuPeriod: number;
  cpuQuota: number;
  cpuShares: number;
  memoryLimitBytes: number;
  cpusetCpus: string;
  cpusetMems: string;
  hugepageLimits: HugepageLimit[];
  /** cgroup v2 files and values. */
  unified: Record<string, string>;
  memorySwapLimitBytes: number;
}

/** What the spec reads of the container's security context. */
export interface ContainerSecurityInput extends CapabilityRequest {
  noNewPrivs: boolean;
  readonlyRootfs: boolean;
  /** null: the runtime's defaults; [] (with privileged or procMount Unmasked): none. */
  maskedPaths: string[] | null;
  readonlyPaths: string[] | null;
  /** A TARGET pid mode's target comes as ContainerSpecInput.targetPid. */
  namespaces: NamespaceModes;
}

/** What the spec reads of the container's validated CRI config (its mounts come resolved). */
export interface ContainerConfigInput {
  metadata: { name: string };
  /** Overrides the image's Entrypoint when non-empty. */
  command: string[];
  /** Overrides the image's Cmd when non-empty. */
  args: string[];
  workingDir: string;
  envs: KeyValue[];
  annotations: Record<string, string>;
  tty: boolean;
  resources: ResourceLimits;
  security: ContainerSecurityInput;
}

/** What the spec reads of the pod's config. */
export interface PodConfigInput {
  hostname: string;
  metadata: { name: string; uid: string; namespace: string };
}

/** What the spec reads of the image config's runtime part (`config` in its JSON). */
export interface ImageConfigInput {
  Env?: string[];
  Entrypoint?: string[] | null;
  Cmd?: string[] | null;
  WorkingDir?: string;
}

export interface SandboxFiles {
  resolvConf: string;
  hostname: string;
  hosts: string;
  /**
   * The pod's /dev/shm as a host path (a tmpfs the sandbox mounts and shares with its infra).
   * Without one, each container gets a /dev/shm of its own: the infra's cannot be bind mounted
   * from its mount namespace (the kernel refuses binds across mount namespaces with EINVAL).
   */
  shm?: string;
}

/**
 * Paths of the pod's namespaces: an infra process's /proc/<pid>/ns/* entries, or files the
 * namespaces are pinned on.
 */
export interface PodNamespacePaths {
  /** The pinned netns (SandboxKey); null: the host's network. */
  network: string | null;
  /** null: the host's. */
  ipc: string | null;
  /** null: the host's. */
  uts: string | null;
  /** The pid namespace the pod shares; null: none, and a container of pid mode POD gets its own. */
  pid: string | null;
  /** The pod's own user namespace, pinned, with its mappings; null: the host's. Absent: null. */
  user?: PodUserNamespace | null;
}

export interface ContainerSpecInput {
  containerId: string;
  sandboxId: string;
  /** The validated CRI config. */
  spec: ContainerConfigInput;
  /** The pod's config. */
  sandbox: PodConfigInput;
  /** `name`: the image as requested, for the annotation. */
  image: { name: string; config: ImageConfigInput };
  rootfsPath: string;
  user: ResolvedUser;
  /** The pod's namespaces, which the container joins by path as its namespace modes say. */
  podNamespaces: PodNamespacePaths;
  /** For pid mode TARGET: the target container's process. */
  targetPid: number | null;
  /** Host paths of the pod's files. '' leaves the image's own file in place. */
  sandboxFiles: SandboxFiles;
  cgroupsPath: string;
  /**
   * A cgroup namespace of its own (cgroup v2): the container sees its cgroup as the root of
   * /sys/fs/cgroup, reads its own limits there, and nothing of the host's tree. Ignored for
   * privileged containers, which see the host's, as on v1.
   */
  cgroupNamespace: boolean;
  /** Already clamped by the caller. */
  oomScoreAdj: number;
  /** The resolved profile; null = unconfined. Ignored for privileged containers. */
  seccomp: Seccomp | null;
  /** null = none. Ignored for privileged containers. */
  apparmorProfile: string | null;
  /** The configured devices, or all host devices when privileged. */
  devices: LinuxDevice[];
  /** Cgroup allow rules for the configured devices (unused when privileged: all are allowed). */
  deviceRules: LinuxDeviceCgroup[];
  /** CRI mounts with host paths and their host propagation looked up (src/container/mount-sources.ts). */
  mounts: readonly SourcedMount[];
  /**
   * containerCapabilities() of src/oci/capabilities.ts, with what privileged and "ALL" mean taken
   * from allCapabilities(): what this kernel knows and berth itself holds. Required: a capability
   * the daemon lacks would fail the create, so every capability berth can name is not a safe
   * default. Worked out by the caller, which builds the seccomp profile from the same set.
   */
  capabilities: ContainerCapabilities;
}
