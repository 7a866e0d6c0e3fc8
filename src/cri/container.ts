import { DeadlineExceededError, InvalidArgumentError } from '../errors.js';
import type { ContainerService } from '../container/service.js';
import type { ContainerFilter, ContainerStateName, ContainerView } from '../container/types.js';
import type {
  ContainerMount,
  ContainerNamespaces,
  ContainerResources,
  ContainerSecurity,
  ContainerSpec,
  DeviceMapping,
  SecurityProfile,
} from '../model/container.js';
import type { KeyValue } from '../oci/container.js';
import { MAX_ENV_BYTES, MAX_ENV_ENTRIES } from '../oci/environment.js';
import type { MountPropagation } from '../oci/mounts.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import type { UnaryHandlers } from './handler.js';
import { jsonInfo, type Received, type Sent } from './messages.js';
import { toWireStats } from './stats.js';
import {
  boundedMap,
  int64Id,
  namespaceMode,
  oneOf,
  requireId,
  requireSafeName,
  requireString,
} from './validate.js';
import {
  absolutePath,
  capabilityName,
  cpuset,
  devicePermissions,
  hugepageSize,
  int64InRange,
  noNul,
  profileName,
  relativeLogPath,
  seconds,
  unifiedKey,
  userName,
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
    userSpecifiedImage: config.image?.user_specified_image ?? '',
    ...toArgv(config.command, config.args),
    workingDir: config.working_dir ? absolutePath('config.working_dir', config.working_dir, true) : '',
    envs: toEnvs(config.envs),
    mounts: config.mounts.map((m, i) => toMount(`config.mounts[${i}]`, m)),
    devices: config.devices.map((d, i) => toDevice(`config.devices[${i}]`, d)),
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

/** The kernel's MAX_ARG_STRLEN: no single argument may be longer for execve. */
const MAX_ARG_BYTES = 128 * 1024;
/** A program is named by a path: PATH_MAX. */
const MAX_PROGRAM_BYTES = 4095;
/** All arguments together, well inside what execve takes with the environment. */
const MAX_ARGV_BYTES = 1024 * 1024;

function toArgv(command: string[], args: string[]): { command: string[]; args: string[] } {
  let total = 0;
  const check = (field: string, s: string, max: number): string => {
    const bytes = Buffer.byteLength(s);
    if (bytes > max) throw new InvalidArgumentError(field, `is ${bytes} bytes long; at most ${max}`);
    total += bytes;
    if (total > MAX_ARGV_BYTES) {
      throw new InvalidArgumentError(
        'config.command',
        `command and args hold more than ${MAX_ARGV_BYTES} bytes`,
      );
    }
    return noNul(field, s);
  };
  return {
    command: command.map((s, i) =>
      check(`config.command[${i}]`, s, i === 0 ? MAX_PROGRAM_BYTES : MAX_ARG_BYTES),
    ),
    args: args.map((s, i) =>
      check(`config.args[${i}]`, s, i === 0 && command.length === 0 ? MAX_PROGRAM_BYTES : MAX_ARG_BYTES),
    ),
  };
}

function toEnvs(envs: Received<'KeyValue'>[]): KeyValue[] {
  // Checked before any entry is looked at: 100,000 entries took 11 s to refuse one by one.
  if (envs.length > MAX_ENV_ENTRIES) {
    throw new InvalidArgumentError('config.envs', `has ${envs.length} entries; at most ${MAX_ENV_ENTRIES}`);
  }
  let bytes = 0;
  return envs.map((kv, i) => {
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
    hugepageLimits: r.hugepage_limits.map((h, i) => ({
      pageSize: hugepageSize(`${field}.hugepage_limits[${i}].page_size`, h.page_size),
      limit: int64InRange(`${field}.hugepage_limits[${i}].limit`, h.limit, 0, MAX),
    })),
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
  for (const [key, value] of Object.entries(unified)) {
    unifiedKey(`${field}["${key}"]`, key);
    noNul(`${field}["${key}"]`, value);
  }
  return unified;
}

// --- Security context -----------------------------------------------------------------------------

const SECURITY = 'config.linux.security_context';

function toSecurity(sc: Received<'LinuxContainerSecurityContext'> | null): ContainerSecurity {
  const caps = sc?.capabilities ?? null;
  const capList = (name: string, list: string[] | undefined): string[] =>
    (list ?? []).map((c, i) => capabilityName(`${SECURITY}.capabilities.${name}[${i}]`, c));

  const runAsUser = sc?.run_as_user ? int64Id(`${SECURITY}.run_as_user.value`, sc.run_as_user.value) : null;
  const runAsUsername = userName(`${SECURITY}.run_as_username`, sc?.run_as_username ?? '');
  if (runAsUser !== null && runAsUsername) {
    throw new InvalidArgumentError(
      `${SECURITY}.run_as_username`,
      'must not be set together with run_as_user',
    );
  }
  // The CRI: "run_as_group should only be specified when run_as_user or run_as_username is
  // specified; otherwise, the runtime MUST error."
  if (sc?.run_as_group && runAsUser === null && !runAsUsername) {
    throw new InvalidArgumentError(`${SECURITY}.run_as_group`, 'requires run_as_user or run_as_username');
  }
  const runAsGroup = sc?.run_as_group
    ? int64Id(`${SECURITY}.run_as_group.value`, sc.run_as_group.value)
    : null;
  // Strict would drop the image's groups; applying Merge instead would grant groups the pod refused.
  if (sc?.supplemental_groups_policy === 'Strict') {
    throw new InvalidArgumentError(
      `${SECURITY}.supplemental_groups_policy`,
      'Strict is not supported by berth (RuntimeFeatures.supplemental_groups_policy is false)',
    );
  }

  return {
    addCapabilities: capList('add_capabilities', caps?.add_capabilities),
    dropCapabilities: capList('drop_capabilities', caps?.drop_capabilities),
    addAmbientCapabilities: capList('add_ambient_capabilities', caps?.add_ambient_capabilities),
    privileged: sc?.privileged ?? false,
    namespaces: toNamespaces(sc?.namespace_options ?? null),
    runAsUser,
    runAsUsername,
    runAsGroup,
    readonlyRootfs: sc?.readonly_rootfs ?? false,
    supplementalGroups: (sc?.supplemental_groups ?? []).map((g, i) =>
      int64Id(`${SECURITY}.supplemental_groups[${i}]`, g),
    ),
    noNewPrivs: sc?.no_new_privs ?? false,
    maskedPaths: pathList(`${SECURITY}.masked_paths`, sc?.masked_paths ?? []),
    readonlyPaths: pathList(`${SECURITY}.readonly_paths`, sc?.readonly_paths ?? []),
    seccomp: toProfile('seccomp', sc?.seccomp ?? null, sc?.seccomp_profile_path ?? ''),
    apparmor: toProfile('apparmor', sc?.apparmor ?? null, sc?.apparmor_profile ?? ''),
  };
}

/**
 * proto3 cannot tell an empty repeated field from an absent one, so [] means "the runtime's
 * defaults" (null), as in containerd; the domain clears them for privileged containers.
 */
function pathList(field: string, paths: string[]): string[] | null {
  if (paths.length === 0) return null;
  return paths.map((p, i) => absolutePath(`${field}[${i}]`, p, true));
}

function toNamespaces(options: Received<'NamespaceOption'> | null): ContainerNamespaces {
  const base = `${SECURITY}.namespace_options`;
  const mode = (name: 'network' | 'pid' | 'ipc') => {
    const m = namespaceMode(`${base}.${name}`, options?.[name] ?? '');
    // kubelet only targets another container's pid namespace (ephemeral debug containers).
    if (m === 'TARGET' && name !== 'pid') {
      throw new InvalidArgumentError(`${base}.${name}`, 'TARGET is only valid for the pid namespace');
    }
    return m;
  };
  const pid = mode('pid');
  const userns = options?.userns_options ?? null;
  // NODE is the host's user namespace; anything else asks for a user namespace berth cannot make.
  if (userns && userns.mode !== 'NODE') {
    throw new InvalidArgumentError(
      `${base}.userns_options.mode`,
      'user namespaces are not supported by berth',
    );
  }
  return {
    network: mode('network'),
    pid,
    ipc: mode('ipc'),
    targetId: pid === 'TARGET' ? requireSafeName(`${base}.target_id`, options?.target_id) : '',
  };
}

type ProfileKind = 'seccomp' | 'apparmor';

const LOCALHOST_PREFIX = 'localhost/';

/**
 * The SecurityProfile message wins over the deprecated string when both are sent. With neither:
 * seccomp is Unconfined (the CRI: "Default: '', which is identical with unconfined"; containerd
 * applies no filter; kubelet always sends one, RuntimeDefault when SeccompDefault is on) and
 * AppArmor is RuntimeDefault (the CRI: runtime/default is "equivalent to not specifying a profile";
 * containerd applies its default profile when the host has AppArmor).
 */
function toProfile(
  kind: ProfileKind,
  profile: Received<'SecurityProfile'> | null,
  legacy: string,
): SecurityProfile {
  if (profile) return fromSecurityProfile(kind, `${SECURITY}.${kind}`, profile);
  const legacyField = kind === 'seccomp' ? 'seccomp_profile_path' : 'apparmor_profile';
  const fromLegacy = fromLegacyProfile(kind, `${SECURITY}.${legacyField}`, legacy);
  if (fromLegacy) return fromLegacy;
  return kind === 'seccomp' ? { kind: 'Unconfined' } : { kind: 'RuntimeDefault' };
}

function fromSecurityProfile(
  kind: ProfileKind,
  field: string,
  profile: Received<'SecurityProfile'>,
): SecurityProfile {
  const type = profile.profile_type || 'RuntimeDefault';
  switch (type) {
    case 'RuntimeDefault':
    case 'Unconfined':
      if (profile.localhost_ref) {
        throw new InvalidArgumentError(
          `${field}.localhost_ref`,
          'must only be set with profile_type Localhost',
        );
      }
      return { kind: type };
    case 'Localhost':
      return { kind: 'Localhost', path: localhostRef(kind, `${field}.localhost_ref`, profile.localhost_ref) };
    default:
      throw new InvalidArgumentError(`${field}.profile_type`, `unknown profile type "${type}"`);
  }
}

/** The deprecated strings: "", "unconfined", "runtime/default", "docker/default", "localhost/<ref>". */
function fromLegacyProfile(kind: ProfileKind, field: string, value: string): SecurityProfile | null {
  if (!value) return null;
  if (value === 'unconfined') return { kind: 'Unconfined' };
  if (value === 'runtime/default' || value === 'docker/default') return { kind: 'RuntimeDefault' };
  if (value.startsWith(LOCALHOST_PREFIX))
    return { kind: 'Localhost', path: localhostRef(kind, field, value) };
  throw new InvalidArgumentError(
    field,
    `unknown profile "${value}" (expected runtime/default, unconfined or localhost/<profile>)`,
  );
}

/**
 * Seccomp: an absolute path to a JSON profile on the host (kubelet resolves it under its seccomp
 * root). AppArmor: the name of a loaded profile. Either may still carry the old "localhost/" prefix.
 */
function localhostRef(kind: ProfileKind, field: string, ref: string): string {
  const value = ref.startsWith(LOCALHOST_PREFIX) ? ref.slice(LOCALHOST_PREFIX.length) : ref;
  return kind === 'seccomp' ? absolutePath(field, value, false) : profileName(field, value);
}

// --- Exec -----------------------------------------------------------------------------------------

export function toCmd(cmd: string[]): string[] {
  if (cmd.length === 0) throw new InvalidArgumentError('cmd', 'is required');
  requireString('cmd[0]', cmd[0]);
  return cmd.map((arg, i) => noNul(`cmd[${i}]`, arg));
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

function commonFilter(
  id: string,
  podSandboxId: string,
  labelSelector: Record<string, string>,
): ContainerFilter {
  return {
    ...(id ? { id } : {}),
    ...(podSandboxId ? { podSandboxId } : {}),
    ...(Object.keys(labelSelector).length > 0 ? { labelSelector } : {}),
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
