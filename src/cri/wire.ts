/**
 * The request and response shapes as @grpc/proto-loader hands them over (keepCase, longs and enums
 * as strings, defaults filled in, unset messages null). Only the fields berth reads or writes.
 */
export type WireMap = Record<string, string>;

export interface WirePodSandboxMetadata {
  name: string;
  uid: string;
  namespace: string;
  attempt: number;
}

export interface WireDnsConfig {
  servers: string[];
  searches: string[];
  options: string[];
}

export interface WirePortMapping {
  protocol: string;
  container_port: number;
  host_port: number;
  host_ip: string;
}

export interface WireNamespaceOption {
  network: string;
  pid: string;
  ipc: string;
  target_id: string;
}

export interface WireInt64Value {
  value: string;
}

export interface WireLinuxSandboxSecurityContext {
  namespace_options: WireNamespaceOption | null;
  run_as_user: WireInt64Value | null;
  run_as_group: WireInt64Value | null;
  readonly_rootfs: boolean;
  supplemental_groups: string[];
  privileged: boolean;
}

export interface WireLinuxPodSandboxConfig {
  cgroup_parent: string;
  security_context: WireLinuxSandboxSecurityContext | null;
  sysctls: WireMap;
}

export interface WirePodSandboxConfig {
  metadata: WirePodSandboxMetadata | null;
  hostname: string;
  log_directory: string;
  dns_config: WireDnsConfig | null;
  port_mappings: WirePortMapping[];
  labels: WireMap;
  annotations: WireMap;
  linux: WireLinuxPodSandboxConfig | null;
}

export interface RunPodSandboxRequest {
  config: WirePodSandboxConfig | null;
  runtime_handler: string;
}

export interface PodSandboxIdRequest {
  pod_sandbox_id: string;
}

export interface PodSandboxStatusRequest extends PodSandboxIdRequest {
  verbose: boolean;
}

export interface ListPodSandboxRequest {
  filter: {
    id: string;
    state: { state: string } | null;
    label_selector: WireMap;
  } | null;
}

export interface VersionRequest {
  version: string;
}

export interface StatusRequest {
  verbose: boolean;
}
