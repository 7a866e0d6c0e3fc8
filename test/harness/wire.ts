/**
 * CRI runtime messages as the test client (test/harness/client.ts) decodes them: snake_case
 * names, int64 as decimal strings, enums as their names, absent messages as null. Only the fields
 * the tests read.
 */

/** runtime.v1.Mount in a ContainerStatus. */
export interface WireMountStatus {
  container_path: string;
  host_path: string;
  readonly: boolean;
  selinux_relabel: boolean;
  propagation: string;
}

/** runtime.v1.ContainerStatus. */
export interface WireContainerStatus {
  id: string;
  metadata: { name: string; attempt: number };
  state: string;
  created_at: string;
  started_at: string;
  finished_at: string;
  exit_code: number;
  reason: string;
  message: string;
  image: { image: string; user_specified_image: string } | null;
  image_ref: string;
  image_id: string;
  log_path: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  mounts: WireMountStatus[];
  resources: {
    linux: {
      cpu_period: string;
      cpu_quota: string;
      cpu_shares: string;
      memory_limit_in_bytes: string;
    } | null;
  } | null;
  user: { linux: { uid: string; gid: string; supplemental_groups: string[] } | null } | null;
}

/** runtime.v1.Container, an item of ListContainers. */
export interface WireContainer {
  id: string;
  pod_sandbox_id: string;
  metadata: { name: string; attempt: number };
  state: string;
  image_id: string;
  image_ref: string;
  labels: Record<string, string>;
}

/** runtime.v1.ExecSyncResponse: the output as the bytes the process wrote. */
export interface ExecResponse {
  stdout: Buffer;
  stderr: Buffer;
  exit_code: number;
}
