/**
 * The subset of the OCI runtime spec (config.json, spec 1.0.x) that berth writes. Field names
 * follow the JSON of the spec exactly, so a Spec is serialised with JSON.stringify as is.
 */

export const OCI_VERSION = '1.0.2';

export interface Spec {
  ociVersion: string;
  process?: Process;
  root?: Root;
  hostname?: string;
  mounts?: Mount[];
  linux?: Linux;
  hooks?: Hooks;
  annotations?: Record<string, string>;
}

/** OCI hooks by the point they run at; berth adds only those a CDI device asks for. */
export type Hooks = Partial<
  Record<
    'prestart' | 'createRuntime' | 'createContainer' | 'startContainer' | 'poststart' | 'poststop',
    Hook[]
  >
>;

export interface Hook {
  path: string;
  args?: string[];
  env?: string[];
  timeout?: number;
}

export interface Process {
  terminal?: boolean;
  user: User;
  args: string[];
  env?: string[];
  cwd: string;
  capabilities?: LinuxCapabilities;
  rlimits?: POSIXRlimit[];
  noNewPrivileges?: boolean;
  apparmorProfile?: string;
  oomScoreAdj?: number;
  selinuxLabel?: string;
}

export interface User {
  uid: number;
  gid: number;
  umask?: number;
  additionalGids?: number[];
}

export interface Root {
  path: string;
  readonly?: boolean;
}

export interface Mount {
  destination: string;
  type?: string;
  source?: string;
  options?: string[];
}

export interface POSIXRlimit {
  type: string;
  hard: number;
  soft: number;
}

/** Capability names carry the CAP_ prefix, e.g. CAP_CHOWN. */
export interface LinuxCapabilities {
  bounding?: string[];
  effective?: string[];
  inheritable?: string[];
  permitted?: string[];
  ambient?: string[];
}

export type LinuxNamespaceType = 'pid' | 'network' | 'mount' | 'ipc' | 'uts' | 'user' | 'cgroup';

/** Without `path` the runtime creates a new namespace; with it, the process joins that one. */
export interface LinuxNamespace {
  type: LinuxNamespaceType;
  path?: string;
}

/** `size` ids from `containerID` in the container's user namespace are `hostID` on outside. */
export interface LinuxIDMapping {
  containerID: number;
  hostID: number;
  size: number;
}

export interface Linux {
  namespaces?: LinuxNamespace[];
  uidMappings?: LinuxIDMapping[];
  gidMappings?: LinuxIDMapping[];
  resources?: LinuxResources;
  cgroupsPath?: string;
  /** The spec's key is singular: `sysctl`. */
  sysctl?: Record<string, string>;
  devices?: LinuxDevice[];
  maskedPaths?: string[];
  readonlyPaths?: string[];
  seccomp?: Seccomp;
  mountLabel?: string;
  /** Propagation of the container's root mount: 'rslave', 'rshared', 'rprivate'... */
  rootfsPropagation?: string;
}

export interface LinuxDevice {
  path: string;
  type: string;
  major: number;
  minor: number;
  fileMode?: number;
  uid?: number;
  gid?: number;
}

export interface LinuxResources {
  devices?: LinuxDeviceCgroup[];
  memory?: LinuxMemory;
  cpu?: LinuxCPU;
  pids?: LinuxPids;
  hugepageLimits?: LinuxHugepageLimit[];
  unified?: Record<string, string>;
}

export interface LinuxDeviceCgroup {
  allow: boolean;
  type?: string;
  major?: number;
  minor?: number;
  access?: string;
}

export interface LinuxMemory {
  limit?: number;
  reservation?: number;
  swap?: number;
  swappiness?: number;
}

export interface LinuxCPU {
  shares?: number;
  quota?: number;
  period?: number;
  cpus?: string;
  mems?: string;
}

export interface LinuxPids {
  limit: number;
}

export interface LinuxHugepageLimit {
  pageSize: string;
  limit: number;
}

export interface Seccomp {
  defaultAction: string;
  /** The errno of an SCMP_ACT_ERRNO default action (EPERM when unset). */
  defaultErrnoRet?: number;
  architectures?: string[];
  flags?: string[];
  syscalls?: LinuxSyscall[];
}

export interface LinuxSyscall {
  names: string[];
  action: string;
  errnoRet?: number;
  args?: LinuxSeccompArg[];
}

export interface LinuxSeccompArg {
  index: number;
  value: number;
  valueTwo?: number;
  op: string;
}
