/**
 * The pod sandbox as berthd keeps it. SandboxSpec is the validated, normalised form of the CRI
 * PodSandboxConfig (src/cri builds it from a request); it is stored with the sandbox so that later
 * CreateContainer calls (and restarts) see exactly what the pod was started with.
 */
import type { CniAttachment, CniNetworkList, CniResult } from '../cni/index.js';
import type { ContainerResources } from './resources.js';
import type { IdMapping } from '../oci/userns.js';
import type { NamespaceModes } from '../oci/container-input.js';
import { INITIAL_SANDBOX_STATES, type NetworkState, type SandboxState } from './sandbox-lifecycle.js';

export type Protocol = 'TCP' | 'UDP' | 'SCTP';

export interface PodMetadata {
  name: string;
  uid: string;
  namespace: string;
  attempt: number;
}

export interface PortMapping {
  protocol: Protocol;
  containerPort: number;
  hostPort: number;
  hostIp: string;
}

export interface DnsConfig {
  servers: string[];
  searches: string[];
  options: string[];
}

export interface NamespaceOptions extends NamespaceModes {
  /** The container whose pid namespace a TARGET pid mode joins. */
  targetId: string;
}

/**
 * The pod's own user namespace (kubelet's hostUsers: false), made by berth with these mappings:
 * one of each kind, mapping container id 0 (see cri/userns.ts).
 */
export interface PodUserNamespaceSpec {
  uids: IdMapping[];
  gids: IdMapping[];
}

export interface SandboxSecurity {
  runAsUser: number | null;
  runAsGroup: number | null;
  supplementalGroups: number[];
  privileged: boolean;
  readonlyRootfs: boolean;
}

export interface SandboxSpec {
  metadata: PodMetadata;
  hostname: string;
  logDirectory: string;
  dnsConfig: DnsConfig | null;
  portMappings: PortMapping[];
  labels: Record<string, string>;
  annotations: Record<string, string>;
  runtimeHandler: string;
  cgroupParent: string;
  sysctls: Record<string, string>;
  namespaces: NamespaceOptions;
  /** null: the host's user namespace (mode NODE, or no options). */
  userNamespace: PodUserNamespaceSpec | null;
  security: SandboxSecurity;
}

/** What is stored before the first ADD, so that DEL can run with the same input after any crash. */
export interface StoredNetworking {
  attachment: CniAttachment;
  /** In ADD order: loopback first, then the default network. */
  networks: CniNetworkList[];
  /**
   * Per network, how many plugins of its chain have had their ADD started, each counted before it
   * runs (a chain runs in order, so these are its first ones). Only they need a DEL: a plugin that
   * never ran holds nothing, and its binary may be gone. Absent in records from before berth kept
   * it: their DEL runs the whole chain.
   */
  addsStarted?: number[];
}

/**
 * What a pod asked for its cgroup as a whole (LinuxPodSandboxConfig.resources and .overhead, or
 * the last UpdatePodSandboxResources); null where a message was not sent.
 */
export interface PodResources {
  resources: ContainerResources | null;
  overhead: ContainerResources | null;
}

/**
 * One pod sandbox. Its record is written before RunPodSandbox does anything and so doubles as the
 * journal that start-up repair reads; its states change only by the transitions of
 * sandbox-lifecycle.ts.
 */
export interface Sandbox {
  id: string;
  /** The metadata's key fields, unique together: kubelet's retry of a RunPodSandbox finds the pod by them. */
  name: string;
  namespace: string;
  uid: string;
  attempt: number;
  state: SandboxState;
  /**
   * 'reserve' while RunPodSandbox runs (its steps are not journaled one by one: start-up repair
   * undoes all of them), 'ready' once ready, 'failed at <step>' when a failed run left it.
   */
  step: string;
  spec: SandboxSpec;
  runtimeHandler: string;
  hostNetwork: boolean;
  /** The SandboxKey: path of the pinned netns file. Null for host-network pods. */
  netnsPath: string | null;
  networkState: NetworkState;
  /** The CNI input of the ADDs, kept so DEL works after a restart; null before networkAdding. */
  cniConfig: StoredNetworking | null;
  /** The CNI results of the ADDs (loopback and default network); null before networkUp. */
  cniResults: CniResult[] | null;
  ip: string;
  additionalIps: string[];
  /** Nanoseconds since the epoch, as a decimal string: int64 ns does not fit a JS number. */
  createdAt: string;
  /** Host pid of the infra process, 0 when none is running (always 0 without one). */
  pid: number;
  /**
   * Whether the pod runs an infra process, decided before the first step. Without one, the pod's
   * ipc and uts namespaces are pinned as files in the sandbox dir (see src/sandbox/namespaces.ts).
   */
  infra: boolean;
  /**
   * The infra's start time (/proc/<pid>/stat field 22) as read when runc created it: with `pid`,
   * the one process its containers may join (src/sandbox/infra.ts). 0 when none runs, and for a
   * stored pod from before berth recorded it until start-up has read it.
   */
  infraStartTime: number;
  /**
   * Why the pod went NOTREADY without a StopPodSandbox: what berth found gone (its infra exited,
   * its pins were unmounted). '' otherwise.
   */
  reason: string;
  cgroupParent: string;
  /**
   * The cgroup berth made for a pod kubelet gave no cgroup_parent, as a cgroup parent (the
   * driver's form): its infra and containers go in it, and the pod's limits are set on it. '' for
   * a pod with a cgroup_parent, and for pods from before berth made pod cgroups, whose containers
   * sit side by side in berth's shared parent.
   */
  podCgroup: string;
  /** What the pod asked for its cgroup; null: never asked (also pods from before berth kept it). */
  resources: PodResources | null;
  /** Per-sandbox directory: OCI bundle, resolv.conf, hostname. */
  sandboxDir: string;
}

/** The cgroup parent of the pod's infra and containers: kubelet's, else berth's pod cgroup. */
export function podCgroupParent(sandbox: Pick<Sandbox, 'cgroupParent' | 'podCgroup'>): string {
  return sandbox.cgroupParent || sandbox.podCgroup;
}

/** What RunPodSandbox decides before its first step. */
export interface NewSandbox {
  id: string;
  spec: SandboxSpec;
  hostNetwork: boolean;
  netnsPath: string | null;
  sandboxDir: string;
  createdAt: string;
  infra: boolean;
  podCgroup: string;
  resources: PodResources | null;
}

/** The journal entry RunPodSandbox records before its first step: nothing done yet. */
export function newSandbox(input: NewSandbox): Sandbox {
  const { metadata } = input.spec;
  return {
    id: input.id,
    name: metadata.name,
    namespace: metadata.namespace,
    uid: metadata.uid,
    attempt: metadata.attempt,
    ...INITIAL_SANDBOX_STATES,
    step: 'reserve',
    spec: input.spec,
    runtimeHandler: input.spec.runtimeHandler,
    hostNetwork: input.hostNetwork,
    netnsPath: input.netnsPath,
    cniConfig: null,
    cniResults: null,
    ip: '',
    additionalIps: [],
    createdAt: input.createdAt,
    pid: 0,
    cgroupParent: input.spec.cgroupParent,
    podCgroup: input.podCgroup,
    resources: input.resources,
    sandboxDir: input.sandboxDir,
    infra: input.infra,
    infraStartTime: 0,
    reason: '',
  };
}
