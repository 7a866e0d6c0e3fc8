import { DeadlineExceededError, InvalidArgumentError } from '../errors.js';
import type { ContainerService } from '../container/service.js';
import type { ContainerFilter, ContainerStateName, ContainerView } from '../container/types.js';
import type { ContainerMount, ContainerResources, ContainerSpec, DeviceMapping } from '../model/container.js';
import type { KeyValue } from '../oci/container-input.js';
import { MAX_ENV_BYTES, MAX_ENV_ENTRIES } from '../oci/environment.js';
import type { MountPropagation } from '../oci/mounts.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import type { UnaryHandlers } from './handler.js';
import { jsonInfo, type Received, type Sent } from './messages.js';
import { toSecurity } from './container-security.js';
import { toWireStats } from './stats.js';
import {
  boundedList,
  boundedMap,
  oneOf,
  requireId,
  requireSafeName,
  requireString,
  selectorFilter,
} from './validate.js';
import {
  absolutePath,
  argv,
  cpuset,
  devicePermissions,
  hugepageSize,
  imageReference,
  int64InRange,
  noNul,
  relativeLogPath,
  seconds,
  unifiedKey,
} from './validate-container.js';
export function containerHandlers({ lifecycle, exec, stats, views }: ContainerService) {
  return {
    CreateContainer: async (req) => {
      const spec = toContainerSpec(req);
      return { container_id: await lifecycle.create(req.pod_sandbox_id, spec) };
    },
    StartContainer: async (req) => {
      await lifecycle.start(requireId('container_id', req.container_id));
      return {};
    },
    StopContainer: async (req) => {
      const id = requireId('container_id', req.container_id);
      await lifecycle.stop(id, seconds('timeout', req.timeout));
      return {};
    },
    RemoveContainer: async (req) => {
      await lifecycle.remove(requireId('container_id', req.container_id));
      return {};
    },
    ListContainers: async (req) => ({
      containers: views.list(toListFilter(req)).map(toWireContainer),
    }),
    ContainerStatus: async (req) => {
      const { view, info } = await views.status(requireId('container_id', req.container_id), req.verbose);
      return {
        status: toWireContainerStatus(view),
        info: jsonInfo('info', req.verbose ? info : undefined),
      };
    },
    UpdateContainerResources: async (req) => {
      const id = requireId('container_id', req.container_id);
      // Windows resources are ignored; without Linux ones there is nothing berth could apply.
      if (!req.linux) throw new InvalidArgumentError('linux', 'is required');
      await lifecycle.updateResources(id, toResources('linux', req.linux));
      return {};
    },
    ReopenContainerLog: async (req) => {
      await lifecycle.reopenLog(requireId('container_id', req.container_id));
      return {};
    },
    ExecSync: async (req, { signal }) => {
      const id = requireId('container_id', req.container_id);
      const cmd = toCmd(req.cmd);
      const timeout = seconds('timeout', req.timeout);
      const result = await exec.execSync(id, cmd, timeout, signal);
      // kubelet turns DEADLINE_EXCEEDED, and only that code, into a probe TimeoutError, which the
      // prober counts as a failed probe. An exit code (e.g. 124) would pass for the command's own
      // failure, and any other error code makes the prober discard the result altogether. containerd
      // answers a timed-out ExecSync the same way ("timeout Ns exceeded: context deadline exceeded").
      if (result.timedOut) {
        throw new DeadlineExceededError(
          `timeout ${timeout}s exceeded: command ${JSON.stringify(cmd)} timed out and was killed`,
        );
      }
      return { stdout: result.stdout, stderr: result.stderr, exit_code: result.exitCode };
    },
    ContainerStats: async (req) => ({
      stats: toWireStats(await stats.stats(requireId('container_id', req.container_id))),
    }),
    ListContainerStats: async (req) => ({
      stats: (await stats.listStats(toStatsFilter(req))).map(toWireStats),
    }),
  } satisfies UnaryHandlers<RuntimeServiceHandlers>;
}

// --- CreateContainer ------------------------------------------------------------------------------

export function toContainerSpec(req: Received<'CreateContainerRequest'>): ContainerSpec {
  requireId('pod_sandbox_id', req.pod_sandbox_id);
  const config = req.config;
  if (!config) throw new InvalidArgumentError('config', 'is required');
  const md = config.metadata;
  if (!md) throw new InvalidArgumentError('config.metadata', 'is required');
  const name = requireSafeName('config.metadata.name', md.name);
  const image = requireString('config.image.image', config.image?.image);
  // Unsupported features are refused rather than dropped: a pod that asked for them would
  // otherwise run without an isolation or a device it relies on.
  if (config.CDI_devices.length > 0) {
    throw new InvalidArgumentError('config.CDI_devices', 'CDI devices are not supported by berth');
  }
  return {
    metadata: { name, attempt: md.attempt },
    image,
    userSpecifiedImage: imageReference(
      'config.image.user_specified_image',
      config.image?.user_specified_image ?? '',
    ),
    ...toArgv(config.command, config.args),
    workingDir: config.working_dir ? absolutePath('config.working_dir', config.working_dir, true) : '',
    envs: toEnvs(config.envs),
    mounts: boundedList('config.mounts', config.mounts, MAX_MOUNTS).map((m, i) =>
      toMount(`config.mounts[${i}]`, m),
    ),
    devices: boundedList('config.devices', config.devices, MAX_DEVICES).map((d, i) =>
      toDevice(`config.devices[${i}]`, d),
    ),
    labels: boundedMap('config.labels', config.labels),
    annotations: boundedMap('config.annotations', config.annotations),
    logPath: relativeLogPath('config.log_path', config.log_path),
    stdin: config.stdin,
    stdinOnce: config.stdin_once,
    tty: config.tty,
    resources: toResources('config.linux.resources', config.linux?.resources ?? null),
    security: toSecurity(config.linux?.security_context ?? null),
  };
}

function toArgv(command: string[], args: string[]): { command: string[]; args: string[] } {
  argv([
    ['config.command', command],
    ['config.args', args],
  ]);
  return { command, args };
}

function toEnvs(envs: Received<'KeyValue'>[]): KeyValue[] {
  // Counted before any entry is looked at: 100,000 entries took 11 s to refuse one by one.
  let bytes = 0;
  return boundedList('config.envs', envs, MAX_ENV_ENTRIES).map((kv, i) => {
    const env = toEnv(`config.envs[${i}]`, kv);
    bytes += Buffer.byteLength(env.key) + Buffer.byteLength(env.value) + 2;
    if (bytes > MAX_ENV_BYTES) {
      throw new InvalidArgumentError('config.envs', `holds more than ${MAX_ENV_BYTES / 1024} KiB`);
    }
    return env;
  });
}

function toEnv(field: string, kv: Received<'KeyValue'>): KeyValue {
  const key = requireString(`${field}.key`, kv.key);
  if (key.includes('=')) throw new InvalidArgumentError(`${field}.key`, `"${key}" must not contain "="`);
  noNul(`${field}.key`, key);
  return { key, value: noNul(`${field}.value`, Buffer.from(kv.value).toString('utf8')) };
}

const PROPAGATIONS: Record<string, MountPropagation> = {
  PROPAGATION_PRIVATE: 'PRIVATE',
  PROPAGATION_HOST_TO_CONTAINER: 'HOST_TO_CONTAINER',
  PROPAGATION_BIDIRECTIONAL: 'BIDIRECTIONAL',
};

function toMount(field: string, m: Received<'Mount'>): ContainerMount {
  if (m.image?.image) {
    throw new InvalidArgumentError(`${field}.image`, 'image volumes are not supported by berth');
  }
  if (m.uidMappings.length > 0 || m.gidMappings.length > 0) {
    throw new InvalidArgumentError(`${field}.uidMappings`, 'id-mapped mounts are not supported by berth');
  }
  const propagation = PROPAGATIONS[m.propagation || 'PROPAGATION_PRIVATE'];
  if (!propagation) {
    throw new InvalidArgumentError(`${field}.propagation`, `unknown mount propagation "${m.propagation}"`);
  }
  // The CRI's rule for recursive_read_only: it needs readonly set too, and private propagation
  // (a submount propagated in later could not be made read-only).
  if (m.recursive_read_only && !m.readonly) {
    throw new InvalidArgumentError(`${field}.recursive_read_only`, 'requires readonly to be set');
  }
  if (m.recursive_read_only && propagation !== 'PRIVATE') {
    throw new InvalidArgumentError(`${field}.recursive_read_only`, 'requires PROPAGATION_PRIVATE');
  }
  return {
    containerPath: absolutePath(`${field}.container_path`, m.container_path, true),
    hostPath: absolutePath(`${field}.host_path`, m.host_path, false),
    readonly: m.readonly,
    recursiveReadOnly: m.recursive_read_only,
    selinuxRelabel: m.selinux_relabel,
    propagation,
  };
}

function toDevice(field: string, d: Received<'Device'>): DeviceMapping {
  return {
    containerPath: absolutePath(`${field}.container_path`, d.container_path, false),
    hostPath: absolutePath(`${field}.host_path`, d.host_path, false),
    permissions: devicePermissions(`${field}.permissions`, d.permissions),
  };
}

/**
 * More than any pod has: kubelet adds a few mounts of its own (hosts, termination log, service
 * account) to the pod's volumes, and device plugins hand out a few devices.
 */
const MAX_MOUNTS = 1024;
const MAX_DEVICES = 1024;
/** A CPU has a few huge page sizes. */
const MAX_HUGEPAGE_LIMITS = 64;

// --- Resources ------------------------------------------------------------------------------------

const MAX = Number.MAX_SAFE_INTEGER;

/** No limits at all: every number 0, no cpusets, hugepages or unified entries. */
export function emptyResources(): ContainerResources {
  return {
    cpuPeriod: 0,
    cpuQuota: 0,
    cpuShares: 0,
    memoryLimitBytes: 0,
    oomScoreAdj: 0,
    cpusetCpus: '',
    cpusetMems: '',
    hugepageLimits: [],
    unified: {},
    memorySwapLimitBytes: 0,
  };
}

/** Ranges are the kernel's (CFS period 1ms..1s, quota at least 1ms, shares up to 262144). */
export function toResources(
  field: string,
  r: Received<'LinuxContainerResources'> | null,
): ContainerResources {
  if (!r) return emptyResources();
  const cpuPeriod = int64InRange(`${field}.cpu_period`, r.cpu_period, 0, 1_000_000);
  if (cpuPeriod > 0 && cpuPeriod < 1000) {
    throw new InvalidArgumentError(`${field}.cpu_period`, `${cpuPeriod} is below the minimum of 1000`);
  }
  // -1 is "no limit", which kubelet sends when a resize removes a limit. The kernel's ceiling is
  // 2^44-1 µs (its bandwidth fixed point).
  const cpuQuota = int64InRange(`${field}.cpu_quota`, r.cpu_quota, -1, MAX_CPU_QUOTA);
  if (cpuQuota > 0 && cpuQuota < 1000) {
    throw new InvalidArgumentError(`${field}.cpu_quota`, `${cpuQuota} is below the minimum of 1000`);
  }
  return {
    cpuPeriod,
    cpuQuota,
    cpuShares: cpuShares(`${field}.cpu_shares`, r.cpu_shares),
    memoryLimitBytes: memoryLimit(`${field}.memory_limit_in_bytes`, r.memory_limit_in_bytes),
    oomScoreAdj: int64InRange(`${field}.oom_score_adj`, r.oom_score_adj, -1000, 1000),
    cpusetCpus: cpuset(`${field}.cpuset_cpus`, r.cpuset_cpus),
    cpusetMems: cpuset(`${field}.cpuset_mems`, r.cpuset_mems),
    hugepageLimits: boundedList(`${field}.hugepage_limits`, r.hugepage_limits, MAX_HUGEPAGE_LIMITS).map(
      (h, i) => ({
        pageSize: hugepageSize(`${field}.hugepage_limits[${i}].page_size`, h.page_size),
        limit: int64InRange(`${field}.hugepage_limits[${i}].limit`, h.limit, 0, MAX),
      }),
    ),
    unified: toUnified(`${field}.unified`, r.unified),
    // -1 is unlimited swap, as kubelet sends it for UnlimitedSwap on cgroup v1.
    memorySwapLimitBytes: swapLimit(field, r),
  };
}

const MAX_CPU_QUOTA = 2 ** 44 - 1;

/** cgroup v1 takes 2 shares at least, which is also what kubelet sends for the smallest request. */
function cpuShares(field: string, value: string): number {
  const shares = int64InRange(field, value, 0, 262_144);
  if (shares === 1) throw new InvalidArgumentError(field, '1 is below the minimum of 2; 0 means the default');
  return shares;
}

/** The memory+swap limit includes memory: set below the memory limit, the kernel refuses it. */
function swapLimit(field: string, r: Received<'LinuxContainerResources'>): number {
  const swap = int64InRange(`${field}.memory_swap_limit_in_bytes`, r.memory_swap_limit_in_bytes, -1, MAX);
  const memory = Number(r.memory_limit_in_bytes);
  if (swap > 0 && memory > 0 && swap < memory) {
    throw new InvalidArgumentError(
      `${field}.memory_swap_limit_in_bytes`,
      `${swap} is below memory_limit_in_bytes (${memory}): it is memory and swap together`,
    );
  }
  return swap;
}

/**
 * Docker's floor for a memory limit: runc's own init runs in the container's cgroup and needs a
 * few MiB, so a smaller limit fails the container in ways that name nothing, or, set on a running
 * one, is refused by the kernel as below what it uses.
 */
const MIN_MEMORY_LIMIT = 6 * 1024 * 1024;

function memoryLimit(field: string, value: string): number {
  const bytes = int64InRange(field, value, 0, MAX);
  if (bytes > 0 && bytes < MIN_MEMORY_LIMIT) {
    throw new InvalidArgumentError(
      field,
      `${bytes} is below the minimum of ${MIN_MEMORY_LIMIT} bytes (6 MiB); 0 means no limit`,
    );
  }
  return bytes;
}

function toUnified(field: string, unified: Record<string, string>): Record<string, string> {
  for (const [key, value] of Object.entries(boundedMap(field, unified))) {
    unifiedKey(`${field}["${key}"]`, key);
    noNul(`${field}["${key}"]`, value);
  }
  return unified;
}

// --- Exec -----------------------------------------------------------------------------------------

export function toCmd(cmd: string[]): string[] {
  if (cmd.length === 0) throw new InvalidArgumentError('cmd', 'is required');
  requireString('cmd[0]', cmd[0]);
  argv([['cmd', cmd]]);
  return cmd;
}

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
