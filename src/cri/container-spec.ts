/** What a client asks a container to be and to run, from the wire to the domain, validated. */
import { parseQualifiedName } from '../cdi/names.js';
import { InvalidArgumentError } from '../errors.js';
import type {
  ContainerMount,
  ContainerResources,
  ContainerSpec,
  DeviceMapping,
  ImageVolumeSource,
} from '../model/container.js';
import type { KeyValue } from '../oci/container-input.js';
import { MAX_ENV_BYTES, MAX_ENV_ENTRIES } from '../oci/environment.js';
import { recursiveReadOnlyProblem, type MountPropagation } from '../oci/mounts.js';
import type { Received } from './messages.js';
import { toSecurity } from './container-security.js';
import { toMountIdmap } from './userns.js';
import { boundedList, boundedMap, requireId, requireSafeName, requireString } from './validate.js';
import {
  absolutePath,
  argv,
  cpuset,
  devicePermissions,
  hugepageSize,
  imageReference,
  imageSubPath,
  int64InRange,
  noNul,
  relativeLogPath,
  unifiedKey,
} from './validate-container.js';

// --- CreateContainer ------------------------------------------------------------------------------

export function toContainerSpec(req: Received<'CreateContainerRequest'>): ContainerSpec {
  requireId('pod_sandbox_id', req.pod_sandbox_id);
  const config = req.config;
  if (!config) throw new InvalidArgumentError('config', 'is required');
  const md = config.metadata;
  if (!md) throw new InvalidArgumentError('config.metadata', 'is required');
  const name = requireSafeName('config.metadata.name', md.name);
  const image = requireString('config.image.image', config.image?.image);
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
    cdiDevices: toCdiDevices(config.CDI_devices, config.annotations),
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
  const propagation = PROPAGATIONS[m.propagation || 'PROPAGATION_PRIVATE'];
  if (!propagation) {
    throw new InvalidArgumentError(`${field}.propagation`, `unknown mount propagation "${m.propagation}"`);
  }
  const idmap = toMountIdmap(field, m.uidMappings, m.gidMappings);
  if (idmap !== null && propagation !== 'PRIVATE') {
    // A mount propagated in later would come through as it is on disk, not idmapped.
    throw new InvalidArgumentError(`${field}.propagation`, 'an idmapped mount requires PROPAGATION_PRIVATE');
  }
  const rro = { readonly: m.readonly, recursiveReadOnly: m.recursive_read_only, propagation };
  const rroProblem = recursiveReadOnlyProblem(rro);
  if (rroProblem !== null) throw new InvalidArgumentError(`${field}.recursive_read_only`, rroProblem);
  const image = m.image?.image ? toImageVolume(field, m) : null;
  return {
    containerPath: absolutePath(`${field}.container_path`, m.container_path, true),
    hostPath: image ? '' : absolutePath(`${field}.host_path`, m.host_path, false),
    readonly: m.readonly,
    recursiveReadOnly: m.recursive_read_only,
    selinuxRelabel: m.selinux_relabel,
    propagation,
    idmap,
    image,
  };
}

/** An image volume (KEP-4639): read-only, private, of an image kubelet pulled, with no host path. */
function toImageVolume(field: string, m: Received<'Mount'>): ImageVolumeSource {
  if (m.host_path) {
    throw new InvalidArgumentError(
      `${field}.host_path`,
      'an image volume takes its files from the image: no host path',
    );
  }
  if (!m.readonly)
    throw new InvalidArgumentError(`${field}.readonly`, 'an image volume is read-only: must be true');
  if ((m.propagation || 'PROPAGATION_PRIVATE') !== 'PROPAGATION_PRIVATE') {
    throw new InvalidArgumentError(`${field}.propagation`, 'an image volume has no host mounts to propagate');
  }
  return {
    reference: imageReference(`${field}.image.image`, m.image?.image ?? ''),
    id: '',
    subPath: imageSubPath(`${field}.image_sub_path`, m.image_sub_path),
  };
}

/** Device plugins older than the CRI field name CDI devices in annotations of this prefix. */
const CDI_ANNOTATION_PREFIX = 'cdi.k8s.io/';
/** More than a node has devices. */
const MAX_CDI_DEVICES = 256;

/** The CRI field's devices, then the annotations' (comma-separated), each once. */
function toCdiDevices(devices: Received<'CDIDevice'>[], annotations: Record<string, string>): string[] {
  const named: [string, string][] = boundedList('config.CDI_devices', devices, MAX_CDI_DEVICES).map(
    (d, i) => [`config.CDI_devices[${i}].name`, d.name],
  );
  for (const key of Object.keys(annotations).sort()) {
    if (!key.startsWith(CDI_ANNOTATION_PREFIX)) continue;
    const value = annotations[key] ?? '';
    for (const name of value.split(','))
      named.push([`config.annotations[${JSON.stringify(key)}]`, name.trim()]);
  }
  const names = new Set<string>();
  for (const [field, name] of named) {
    const parsed = parseQualifiedName(name);
    if (typeof parsed === 'string') throw new InvalidArgumentError(field, parsed);
    names.add(name);
  }
  if (names.size > MAX_CDI_DEVICES) {
    throw new InvalidArgumentError('config.CDI_devices', `more than ${MAX_CDI_DEVICES} CDI devices`);
  }
  return [...names];
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
