/**
 * The OCI runtime spec of a CRI container: pure, from the validated ContainerSpec, the pod's
 * config and what src/container/prepare.ts resolved on the host (user, mounts, devices, profiles).
 *
 * The container joins its pod's namespaces by path, as the CRI namespace modes say: the pinned
 * network namespace, and the ipc, uts and pid namespaces the pod has (an infra process's
 * /proc/<pid>/ns/* entries, or pinned files), and the pod's pinned user namespace where it has one
 * (the others are owned by it). It always gets its own mount namespace.
 */
import { posix } from 'node:path';
import { InvalidArgumentError } from '../errors.js';
import { DEFAULT_MASKED_PATHS, DEFAULT_READONLY_PATHS, infraMounts } from './infra.js';
import { joinUserNamespace, mappingsOf, type IdMapping } from './userns.js';
import {
  recursiveReadOnlyProblem,
  requireSourcePropagation,
  type BindMount,
  type MountPropagation,
  type SourcedMount,
} from './mounts.js';
import {
  OCI_VERSION,
  type Linux,
  type LinuxCapabilities,
  type LinuxDeviceCgroup,
  type LinuxNamespace,
  type LinuxResources,
  type Mount,
  type Spec,
} from './spec.js';
import type {
  ContainerConfigInput,
  ContainerSpecInput,
  ImageConfigInput,
  ResourceLimits,
} from './container-input.js';

const DEFAULT_PATH = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Char devices every container may use: null, zero, full, random, urandom, tty, console, ptmx, pts. */
const STANDARD_DEVICE_RULES: readonly LinuxDeviceCgroup[] = [
  [1, 3],
  [1, 5],
  [1, 7],
  [1, 8],
  [1, 9],
  [5, 0],
  [5, 1],
  [5, 2],
].map(([major, minor]): LinuxDeviceCgroup => ({ allow: true, type: 'c', major, minor, access: 'rwm' }));
const PTS_RULE: LinuxDeviceCgroup = { allow: true, type: 'c', major: 136, access: 'rwm' };

export function buildContainerSpec(input: ContainerSpecInput): Spec {
  const { spec } = input;
  const sec = spec.security;
  const privileged = sec.privileged;
  const hostname = input.sandbox.hostname;
  const capabilities = processCapabilities(input);

  const out: Spec = {
    ociVersion: OCI_VERSION,
    process: {
      terminal: spec.tty,
      user: { uid: input.user.uid, gid: input.user.gid, additionalGids: [...input.user.additionalGids] },
      args: processArgs(spec, input.image.config),
      env: processEnv(spec, input.image.config, hostname),
      cwd: processCwd(spec, input.image.config),
      capabilities,
      noNewPrivileges: sec.noNewPrivs,
      oomScoreAdj: input.oomScoreAdj,
      ...(!privileged && input.apparmorProfile !== null ? { apparmorProfile: input.apparmorProfile } : {}),
    },
    root: { path: input.rootfsPath, readonly: sec.readonlyRootfs },
    mounts: containerMounts(input),
    linux: {
      namespaces: containerNamespaces(input),
      ...userNamespaceMappings(input),
      cgroupsPath: input.cgroupsPath,
      resources: { ...linuxResources(spec.resources), devices: deviceRules(input) },
      devices: input.devices.map((d) => ({ ...d })),
      ...(privileged
        ? {}
        : {
            maskedPaths: [...(sec.maskedPaths ?? DEFAULT_MASKED_PATHS)],
            readonlyPaths: [...(sec.readonlyPaths ?? DEFAULT_READONLY_PATHS)],
          }),
      ...(!privileged && input.seccomp !== null ? { seccomp: input.seccomp } : {}),
      ...rootfsPropagation(input.mounts),
    },
    annotations: containerAnnotations(input),
  };
  // No spec.hostname: the uts namespace is always the pod's (which has the pod's hostname) or
  // the host's, never a new one. runc 1.1 accepts a hostname with a joined uts namespace and would
  // set it again there, or on the host itself for a host network pod.
  return out;
}

/** kubelet's rules ("Define a command and arguments for a container"). */
export function processArgs(spec: ContainerConfigInput, image: ImageConfigInput): string[] {
  const entrypoint = image.Entrypoint ?? [];
  const cmd = image.Cmd ?? [];
  let args: string[];
  if (spec.command.length > 0) args = [...spec.command, ...spec.args];
  else if (spec.args.length > 0) args = [...entrypoint, ...spec.args];
  else args = [...entrypoint, ...cmd];
  if (args.length === 0) {
    throw new InvalidArgumentError(
      'config.command',
      'no command: neither the config nor the image gives one',
    );
  }
  return args;
}

/**
 * The image's environment overlaid by the config's: a key set by both keeps the image's position
 * with the config's value; new keys follow in config order. HOSTNAME (the pod's) and a default
 * PATH go in front when neither the image nor the config sets them.
 */
export function processEnv(spec: ContainerConfigInput, image: ImageConfigInput, hostname: string): string[] {
  const merged = new Map<string, string>();
  for (const entry of image.Env ?? []) merged.set(envKey(entry), entry);
  for (const { key, value } of spec.envs) merged.set(key, `${key}=${value}`);
  const defaults: string[] = [];
  if (!merged.has('HOSTNAME') && hostname !== '') defaults.push(`HOSTNAME=${hostname}`);
  if (!merged.has('PATH')) defaults.push(DEFAULT_PATH);
  return [...defaults, ...merged.values()];
}

function envKey(entry: string): string {
  const eq = entry.indexOf('=');
  return eq < 0 ? entry : entry.slice(0, eq);
}

/** The process's cwd as runc is told it; prepare.ts makes sure the rootfs has it as a directory. */
export function processCwd(spec: ContainerConfigInput, image: ImageConfigInput): string {
  const dir = spec.workingDir || image.WorkingDir || '/';
  // The OCI spec wants an absolute cwd; Docker treats a relative WorkingDir as below "/".
  return posix.normalize(dir.startsWith('/') ? dir : `/${dir}`);
}

/**
 * bounding = effective = permitted = the set. Ambient capabilities must also be inheritable, or
 * the kernel refuses to raise them; otherwise the inheritable set stays empty, so a setuid binary
 * cannot regain what was dropped.
 */
function processCapabilities(input: ContainerSpecInput): LinuxCapabilities {
  const { set, ambient } = input.capabilities;
  return { bounding: set, effective: [...set], permitted: [...set], inheritable: [...ambient], ambient };
}

function isHostNetwork(input: ContainerSpecInput): boolean {
  return input.podNamespaces.network === null || input.spec.security.namespaces.network === 'NODE';
}

function joinsUts(input: ContainerSpecInput): boolean {
  return !isHostNetwork(input);
}

export function containerNamespaces(input: ContainerSpecInput): LinuxNamespace[] {
  const ns = input.spec.security.namespaces;
  const pod = input.podNamespaces;
  const out: LinuxNamespace[] = [];
  switch (ns.pid) {
    case 'POD':
      out.push(pod.pid === null ? { type: 'pid' } : { type: 'pid', path: pod.pid });
      break;
    case 'CONTAINER':
      out.push({ type: 'pid' });
      break;
    case 'TARGET':
      if (input.targetPid === null) {
        throw new InvalidArgumentError(
          'config.linux.security_context.namespace_options.target_id',
          'pid mode TARGET without a running target container',
        );
      }
      out.push({ type: 'pid', path: `/proc/${input.targetPid}/ns/pid` });
      break;
    case 'NODE':
      break;
  }
  if (ns.ipc !== 'NODE' && pod.ipc !== null) out.push({ type: 'ipc', path: pod.ipc });
  if (joinsUts(input) && pod.uts !== null) out.push({ type: 'uts', path: pod.uts });
  out.push({ type: 'mount' });
  // runc mounts a new cgroup2 filesystem at /sys/fs/cgroup, which shows the root of the
  // namespace it is mounted in: without one of its own, the host's whole tree.
  if (input.cgroupNamespace && !input.spec.security.privileged) out.push({ type: 'cgroup' });
  if (!isHostNetwork(input) && pod.network !== null) out.push({ type: 'network', path: pod.network });
  if (pod.user) out.push(joinUserNamespace(pod.user).namespace);
  return out;
}

/** A container of its pod's user namespace joins it by path; runc 1.1 wants the mappings too. */
function userNamespaceMappings(input: ContainerSpecInput): Pick<Linux, 'uidMappings' | 'gidMappings'> {
  const user = input.podNamespaces.user;
  return user ? mappingsOf(joinUserNamespace(user)) : {};
}

/** The group devpts gives new terminals (`tty`), as the standard mounts set it. */
const TTY_GID = 5;

function isMapped(mappings: readonly IdMapping[], id: number): boolean {
  return mappings.some((m) => id >= m.containerId && id < m.containerId + m.length);
}

/**
 * In order: the standard filesystems, the pod's files, then the CRI mounts, parents before
 * children. A CRI mount replaces any standard mount or pod file at the same destination (kubelet
 * mounts its own /etc/hosts, for one).
 */
export function containerMounts(input: ContainerSpecInput): Mount[] {
  const { spec } = input;
  const sec = spec.security;
  const fromCri = criMounts(input.mounts);
  const taken = new Set(fromCri.map((m) => m.destination));
  const defaults: Mount[] = [];
  const userns = input.podNamespaces.user ?? null;
  for (const m of infraMounts()) {
    if (m.destination === '/dev/shm') continue;
    if (m.type === 'devpts' && userns !== null && !isMapped(userns.gids, TTY_GID)) {
      // The kernel refuses a devpts gid= the namespace does not map (EINVAL, which failed the
      // create as UNKNOWN for a pod mapping fewer than 6 gids); as runc does for rootless
      // containers, new terminals then take the opener's group.
      defaults.push({ ...m, options: (m.options ?? []).filter((o) => o !== `gid=${TTY_GID}`) });
    } else if (m.destination === '/sys' && sec.privileged) {
      defaults.push({ ...m, options: (m.options ?? []).filter((o) => o !== 'ro') });
    } else {
      defaults.push(m);
    }
  }
  defaults.push({
    destination: '/sys/fs/cgroup',
    type: 'cgroup',
    source: 'cgroup',
    options: ['nosuid', 'noexec', 'nodev', 'relatime', sec.privileged ? 'rw' : 'ro'],
  });
  defaults.push(shmMount(input));
  // The pod's files follow the root's writability, as in containerd: a read-only container
  // cannot rewrite its pod's resolv.conf behind the other containers' backs.
  const fileMode = sec.readonlyRootfs ? 'ro' : 'rw';
  const files: Array<[string, string]> = [
    ['/etc/hostname', input.sandboxFiles.hostname],
    ['/etc/resolv.conf', input.sandboxFiles.resolvConf],
    ['/etc/hosts', input.sandboxFiles.hosts],
  ];
  for (const [destination, source] of files) {
    if (source === '') continue;
    defaults.push({ destination, type: 'bind', source, options: ['rbind', 'rprivate', fileMode] });
  }
  return [...defaults.filter((m) => !taken.has(m.destination)), ...fromCri];
}

/**
 * Host ipc: the host's /dev/shm. Pod ipc: the pod's shared shm when the sandbox provides one, else
 * a private tmpfs (System V shm is shared through the joined ipc namespace either way).
 */
function shmMount(input: ContainerSpecInput): Mount {
  const opts = ['rbind', 'rprivate', 'nosuid', 'nodev', 'noexec'];
  if (input.spec.security.namespaces.ipc === 'NODE') {
    return {
      destination: '/dev/shm',
      type: 'bind',
      source: '/dev/shm',
      options: ['rbind', 'rprivate', 'rw'],
    };
  }
  if (input.sandboxFiles.shm) {
    return {
      destination: '/dev/shm',
      type: 'bind',
      source: input.sandboxFiles.shm,
      options: [...opts, 'rw'],
    };
  }
  const own = infraMounts().find((m) => m.destination === '/dev/shm');
  return (
    own ?? {
      destination: '/dev/shm',
      type: 'tmpfs',
      source: 'shm',
      options: ['nosuid', 'noexec', 'nodev', 'mode=1777'],
    }
  );
}

const PROPAGATION_OPTION: Readonly<Record<MountPropagation, string>> = {
  PRIVATE: 'rprivate',
  HOST_TO_CONTAINER: 'rslave',
  BIDIRECTIONAL: 'rshared',
};

/** Bind mounts sorted by depth (stable), so a mount never hides one inside it. */
export function criMounts(mounts: readonly SourcedMount[]): Mount[] {
  const out = mounts.map((m, i): { depth: number; i: number; mount: Mount } => {
    requireSourcePropagation(m, i);
    const destination = cleanPath(m.containerPath);
    const options = ['rbind', PROPAGATION_OPTION[m.propagation], m.readonly ? 'ro' : 'rw'];
    // runc applies these to the bind itself: a single-layer volume is the layer's dir, on no mount
    // of berth's own that could carry them.
    if (m.image) options.push('nosuid', 'nodev');
    if (m.recursiveReadOnly) {
      // Checked here too, for callers that did not come through the CRI edge.
      const problem = recursiveReadOnlyProblem(m);
      if (problem !== null)
        throw new InvalidArgumentError(`config.mounts[${i}].recursive_read_only`, problem);
      options.push('rro');
    }
    return {
      depth: destination.split('/').filter((c) => c !== '').length,
      i,
      mount: { destination, type: 'bind', source: m.hostPath, options },
    };
  });
  return out.sort((a, b) => a.depth - b.depth || a.i - b.i).map((x) => x.mount);
}

function cleanPath(p: string): string {
  const n = posix.normalize(p);
  return n.length > 1 ? n.replace(/\/+$/, '') : n;
}

/**
 * The root mount must itself propagate for mounts inside it to: rshared for a BIDIRECTIONAL mount,
 * rslave for HOST_TO_CONTAINER. Otherwise unset, which runc takes as rslave.
 */
function rootfsPropagation(mounts: readonly BindMount[]): { rootfsPropagation?: string } {
  if (mounts.some((m) => m.propagation === 'BIDIRECTIONAL')) return { rootfsPropagation: 'rshared' };
  if (mounts.some((m) => m.propagation === 'HOST_TO_CONTAINER')) return { rootfsPropagation: 'rslave' };
  return {};
}

function deviceRules(input: ContainerSpecInput): LinuxDeviceCgroup[] {
  if (input.spec.security.privileged) return [{ allow: true, access: 'rwm' }];
  return [
    { allow: false, access: 'rwm' },
    ...STANDARD_DEVICE_RULES.map((r) => ({ ...r })),
    { ...PTS_RULE },
    ...input.deviceRules.map((r) => ({ ...r })),
  ];
}

/**
 * The cgroup limits of CRI resources (without devices), also what `runc update` is given. Zero
 * means unset. Without an explicit swap limit, swap is capped at the memory limit, i.e. no swap,
 * as kubelet expects of a container with a memory limit.
 */
export function linuxResources(r: ResourceLimits): LinuxResources {
  const out: LinuxResources = {};
  const cpu: NonNullable<LinuxResources['cpu']> = {};
  if (r.cpuShares > 0) cpu.shares = r.cpuShares;
  if (r.cpuQuota !== 0) cpu.quota = r.cpuQuota;
  if (r.cpuPeriod > 0) cpu.period = r.cpuPeriod;
  if (r.cpusetCpus !== '') cpu.cpus = r.cpusetCpus;
  if (r.cpusetMems !== '') cpu.mems = r.cpusetMems;
  if (Object.keys(cpu).length > 0) out.cpu = cpu;
  // A swap limit alone is left out: cgroup v1 refuses memory+swap below an unlimited memory limit.
  if (r.memoryLimitBytes > 0) {
    const swap = r.memorySwapLimitBytes !== 0 ? r.memorySwapLimitBytes : r.memoryLimitBytes;
    out.memory = { limit: r.memoryLimitBytes, swap };
  }
  // A zero hugepage limit is meaningful (no huge pages), so these pass as given.
  if (r.hugepageLimits.length > 0)
    out.hugepageLimits = r.hugepageLimits.map((h) => ({ pageSize: h.pageSize, limit: h.limit }));
  if (Object.keys(r.unified).length > 0) out.unified = { ...r.unified };
  return out;
}

function containerAnnotations(input: ContainerSpecInput): Record<string, string> {
  const pod = input.sandbox.metadata;
  return {
    ...input.spec.annotations,
    'io.kubernetes.cri.container-type': 'container',
    'io.kubernetes.cri.container-name': input.spec.metadata.name,
    'io.kubernetes.cri.image-name': input.image.name,
    'io.kubernetes.cri.sandbox-id': input.sandboxId,
    'io.kubernetes.cri.sandbox-name': pod.name,
    'io.kubernetes.cri.sandbox-namespace': pod.namespace,
    'io.kubernetes.cri.sandbox-uid': pod.uid,
  };
}
