/** ListContainers, ContainerStatus and ListContainerStats: their filters in, containers out. */
import type { ContainerFilter, ContainerStateName, ContainerView } from '../container/types.js';
import type { ContainerResources } from '../model/container.js';
import type { IdMapping } from '../oci/userns.js';
import type { Received, Sent } from './messages.js';
import { oneOf, selectorFilter } from './validate.js';

// --- Filters --------------------------------------------------------------------------------------

const CONTAINER_STATES: readonly ContainerStateName[] = [
  'CONTAINER_CREATED',
  'CONTAINER_RUNNING',
  'CONTAINER_EXITED',
  'CONTAINER_UNKNOWN',
];

export function toListFilter(req: Received<'ListContainersRequest'>): ContainerFilter {
  const f = req.filter;
  if (!f) return {};
  const state = f.state
    ? oneOf('filter.state.state', f.state.state, CONTAINER_STATES, 'container state')
    : undefined;
  return {
    ...commonFilter(f.id, f.pod_sandbox_id, f.label_selector),
    ...(state ? { state } : {}),
  };
}

export function toStatsFilter(req: Received<'ListContainerStatsRequest'>): ContainerFilter {
  const f = req.filter;
  return f ? commonFilter(f.id, f.pod_sandbox_id, f.label_selector) : {};
}

function commonFilter(id: string, podSandboxId: string, selector: Record<string, string>): ContainerFilter {
  return {
    ...(id ? { id } : {}),
    ...(podSandboxId ? { podSandboxId } : {}),
    ...selectorFilter(selector),
  };
}

// --- Views to the wire ----------------------------------------------------------------------------

export function toWireContainer(view: ContainerView) {
  return {
    id: view.id,
    pod_sandbox_id: view.podSandboxId,
    metadata: { name: view.metadata.name, attempt: view.metadata.attempt },
    image: { image: view.image, user_specified_image: view.userSpecifiedImage },
    // The id, not the repo digest: kubelets before 1.30 match this against ListImages ids to know
    // which images are in use (ContainerStatus keeps the digest, which pod status shows).
    image_ref: view.imageId,
    state: view.state,
    created_at: view.createdAt,
    labels: view.labels,
    annotations: view.annotations,
    image_id: view.imageId,
  } satisfies Sent<'Container'>;
}

export function toWireContainerStatus(view: ContainerView) {
  return {
    id: view.id,
    metadata: { name: view.metadata.name, attempt: view.metadata.attempt },
    state: view.state,
    created_at: view.createdAt,
    started_at: view.startedAt,
    finished_at: view.finishedAt,
    exit_code: view.exitCode,
    image: { image: view.image, user_specified_image: view.userSpecifiedImage },
    image_ref: view.imageRef,
    reason: view.reason,
    message: view.message,
    labels: view.labels,
    annotations: view.annotations,
    mounts: view.mounts.map((m) => ({
      container_path: m.containerPath,
      host_path: m.hostPath,
      readonly: m.readonly,
      selinux_relabel: m.selinuxRelabel,
      propagation: `PROPAGATION_${m.propagation}`,
      recursive_read_only: m.recursiveReadOnly,
      uidMappings: (m.idmap?.uids ?? []).map(wireMapping),
      gidMappings: (m.idmap?.gids ?? []).map(wireMapping),
      // kubelet finds its image volumes in the status by the image they name.
      image: m.image ? { image: m.image.reference } : null,
      image_sub_path: m.image?.subPath ?? '',
    })),
    log_path: view.logPath,
    resources: { linux: toWireResources(view.resources) },
    image_id: view.imageId,
    user: {
      linux: {
        uid: String(view.user.uid),
        gid: String(view.user.gid),
        supplemental_groups: view.user.supplementalGroups.map(String),
      },
    },
  } satisfies Sent<'ContainerStatus'>;
}

export function toWireResources(r: ContainerResources) {
  return {
    cpu_period: String(r.cpuPeriod),
    cpu_quota: String(r.cpuQuota),
    cpu_shares: String(r.cpuShares),
    memory_limit_in_bytes: String(r.memoryLimitBytes),
    oom_score_adj: String(r.oomScoreAdj),
    cpuset_cpus: r.cpusetCpus,
    cpuset_mems: r.cpusetMems,
    hugepage_limits: r.hugepageLimits.map((h) => ({ page_size: h.pageSize, limit: String(h.limit) })),
    unified: r.unified,
    memory_swap_limit_in_bytes: String(r.memorySwapLimitBytes),
  } satisfies Sent<'LinuxContainerResources'>;
}

function wireMapping(m: IdMapping): { container_id: number; host_id: number; length: number } {
  return { container_id: m.containerId, host_id: m.hostId, length: m.length };
}
