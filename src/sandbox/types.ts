/**
 * The pod sandbox as the domain sees it: a validated, normalised form of the CRI PodSandboxConfig.
 * src/cri builds it from a request; it is stored as JSON with the sandbox row so that later
 * CreateContainer calls (and restarts) see exactly what the pod was started with.
 */
export type NamespaceMode = 'POD' | 'CONTAINER' | 'NODE' | 'TARGET';
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

export interface NamespaceOptions {
  network: NamespaceMode;
  pid: NamespaceMode;
  ipc: NamespaceMode;
  targetId: string;
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
  security: SandboxSecurity;
}

export type SandboxStateName = 'SANDBOX_READY' | 'SANDBOX_NOTREADY';

/** What PodSandboxStatus and ListPodSandbox report; src/cri maps it to the wire form. */
export interface SandboxView {
  id: string;
  metadata: PodMetadata;
  state: SandboxStateName;
  createdAt: string;
  ip: string;
  additionalIps: string[];
  namespaces: NamespaceOptions;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  runtimeHandler: string;
}

export interface SandboxVerboseInfo {
  sandboxKey: string | null;
  pid: number;
  hostNetwork: boolean;
  networkState: string;
  cniResult: unknown;
  sandboxDir: string;
  cgroupParent: string;
}

export interface SandboxFilter {
  id?: string;
  state?: SandboxStateName;
  labelSelector?: Record<string, string>;
}
