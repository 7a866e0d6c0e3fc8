/**
 * Container request and response shapes as @grpc/proto-loader hands them over (keepCase, int64 as
 * decimal strings, enums as their names, defaults filled in, unset messages null, repeated fields as
 * arrays, maps as records). Requests list every field berth reads; responses the fields it writes.
 */
import type { WireInt64Value, WireMap, WireNamespaceOption } from './wire.js';

// --- Shared -------------------------------------------------------------------

export interface WireUInt64Value {
  value: string;
}

export interface WireContainerMetadata {
  name: string;
  attempt: number;
}

export interface WireImageSpec {
  image: string;
  annotations: WireMap;
  user_specified_image: string;
  runtime_handler: string;
  image_ref: string;
}

export interface WireIdMapping {
  host_id: number;
  container_id: number;
  length: number;
}

export interface WireMount {
  container_path: string;
  host_path: string;
  readonly: boolean;
  selinux_relabel: boolean;
  /** MountPropagation name: PROPAGATION_PRIVATE, PROPAGATION_HOST_TO_CONTAINER, PROPAGATION_BIDIRECTIONAL. */
  propagation: string;
  uidMappings: WireIdMapping[];
  gidMappings: WireIdMapping[];
  recursive_read_only: boolean;
  /** Set for image volumes (a mount of another image's rootfs). */
  image: WireImageSpec | null;
  image_sub_path: string;
}

export interface WireDevice {
  container_path: string;
  host_path: string;
  permissions: string;
}

export interface WireHugepageLimit {
  page_size: string;
  /** uint64 */
  limit: string;
}

/** Every int64 is a decimal string; zero means "not set". */
export interface WireLinuxContainerResources {
  cpu_period: string;
  cpu_quota: string;
  cpu_shares: string;
  memory_limit_in_bytes: string;
  oom_score_adj: string;
  cpuset_cpus: string;
  cpuset_mems: string;
  hugepage_limits: WireHugepageLimit[];
  unified: WireMap;
  memory_swap_limit_in_bytes: string;
}

// --- CreateContainer ----------------------------------------------------------

export interface WireKeyValue {
  key: string;
  /** Declared `bytes` in our proto (wire-equal to upstream's string), so it arrives as a Buffer. */
  value: Buffer;
}

export interface WireCapability {
  add_capabilities: string[];
  drop_capabilities: string[];
  add_ambient_capabilities: string[];
}

export interface WireUserNamespace {
  mode: string;
  uids: WireIdMapping[];
  gids: WireIdMapping[];
}

export interface WireContainerNamespaceOption extends WireNamespaceOption {
  userns_options: WireUserNamespace | null;
}

export interface WireSecurityProfile {
  /** RuntimeDefault, Unconfined or Localhost. */
  profile_type: string;
  localhost_ref: string;
}

export interface WireLinuxContainerSecurityContext {
  capabilities: WireCapability | null;
  privileged: boolean;
  namespace_options: WireContainerNamespaceOption | null;
  run_as_user: WireInt64Value | null;
  run_as_group: WireInt64Value | null;
  run_as_username: string;
  readonly_rootfs: boolean;
  /** int64 */
  supplemental_groups: string[];
  /** Merge or Strict. */
  supplemental_groups_policy: string;
  no_new_privs: boolean;
  masked_paths: string[];
  readonly_paths: string[];
  seccomp: WireSecurityProfile | null;
  apparmor: WireSecurityProfile | null;
  /** Deprecated string forms, still sent by older kubelets. */
  apparmor_profile: string;
  seccomp_profile_path: string;
}

export interface WireLinuxContainerConfig {
  resources: WireLinuxContainerResources | null;
  security_context: WireLinuxContainerSecurityContext | null;
}

export interface WireCdiDevice {
  name: string;
}

export interface WireContainerConfig {
  metadata: WireContainerMetadata | null;
  image: WireImageSpec | null;
  command: string[];
  args: string[];
  working_dir: string;
  envs: WireKeyValue[];
  mounts: WireMount[];
  devices: WireDevice[];
  labels: WireMap;
  annotations: WireMap;
  log_path: string;
  stdin: boolean;
  stdin_once: boolean;
  tty: boolean;
  linux: WireLinuxContainerConfig | null;
  CDI_devices: WireCdiDevice[];
  /** Signal name; RUNTIME_DEFAULT when unset. */
  stop_signal: string;
}

export interface CreateContainerRequest {
  pod_sandbox_id: string;
  config: WireContainerConfig | null;
}

// --- Lifecycle, status, exec --------------------------------------------------

export interface ContainerIdRequest {
  container_id: string;
}

export interface StopContainerRequest extends ContainerIdRequest {
  /** int64 seconds */
  timeout: string;
}

export interface ContainerStatusRequest extends ContainerIdRequest {
  verbose: boolean;
}

export interface UpdateContainerResourcesRequest extends ContainerIdRequest {
  linux: WireLinuxContainerResources | null;
}

export interface ExecSyncRequest extends ContainerIdRequest {
  cmd: string[];
  /** int64 seconds; 0 means no timeout. */
  timeout: string;
}

export interface ExecSyncResponse {
  stdout: Buffer;
  stderr: Buffer;
  exit_code: number;
}

export interface StreamFlags {
  tty: boolean;
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
}

export interface ExecRequest extends ContainerIdRequest, StreamFlags {
  cmd: string[];
}

export type AttachRequest = ContainerIdRequest & StreamFlags;

export interface PortForwardRequest {
  pod_sandbox_id: string;
  port: number[];
}

export interface StreamUrlResponse {
  url: string;
}

export interface ListContainersRequest {
  filter: {
    id: string;
    state: { state: string } | null;
    pod_sandbox_id: string;
    label_selector: WireMap;
  } | null;
}

export interface ListContainerStatsRequest {
  filter: {
    id: string;
    pod_sandbox_id: string;
    label_selector: WireMap;
  } | null;
}

// --- Responses ----------------------------------------------------------------

/** Output image specs carry only the reference; the rest take their proto defaults. */
export interface WireImageSpecOut {
  image: string;
  user_specified_image: string;
}

export interface WireContainer {
  id: string;
  pod_sandbox_id: string;
  metadata: WireContainerMetadata;
  image: WireImageSpecOut;
  image_ref: string;
  state: string;
  created_at: string;
  labels: WireMap;
  annotations: WireMap;
  image_id: string;
}

export interface WireMountOut {
  container_path: string;
  host_path: string;
  readonly: boolean;
  selinux_relabel: boolean;
  propagation: string;
  recursive_read_only: boolean;
}

export interface WireContainerStatus {
  id: string;
  metadata: WireContainerMetadata;
  state: string;
  created_at: string;
  started_at: string;
  finished_at: string;
  exit_code: number;
  image: WireImageSpecOut;
  image_ref: string;
  reason: string;
  message: string;
  labels: WireMap;
  annotations: WireMap;
  mounts: WireMountOut[];
  log_path: string;
  resources: { linux: WireLinuxContainerResources };
  image_id: string;
  user: { linux: { uid: string; gid: string; supplemental_groups: string[] } };
}

export interface ContainerStatusResponse {
  status: WireContainerStatus;
  info: WireMap;
}

export interface WireContainerStats {
  attributes: {
    id: string;
    metadata: WireContainerMetadata;
    labels: WireMap;
    annotations: WireMap;
  };
  cpu: { timestamp: string; usage_core_nano_seconds: WireUInt64Value } | null;
  memory: {
    timestamp: string;
    working_set_bytes: WireUInt64Value;
    usage_bytes: WireUInt64Value;
    rss_bytes: WireUInt64Value;
    page_faults: WireUInt64Value;
    major_page_faults: WireUInt64Value;
  } | null;
  writable_layer: {
    timestamp: string;
    fs_id: { mountpoint: string };
    used_bytes: WireUInt64Value;
    inodes_used: WireUInt64Value;
  } | null;
}
