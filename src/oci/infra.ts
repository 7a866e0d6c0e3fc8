/**
 * The pod's infra ("pause") container: catatonit sleeping as pid 1 of the pod, holding the
 * namespaces the pod's containers join. Its network namespace is not its own: it joins the pinned
 * netns that CNI configured, so the pod's network outlives (and predates) any process.
 */
import { access, chmod, copyFile, mkdir, readdir, rename, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { FailedPreconditionError } from '../errors.js';
import { SingleFlight } from '../kit/single-flight.js';
import { hasInterpreter } from './elf.js';
import { defaultSeccompProfile } from './seccomp.js';
import { joinUserNamespace, mappingsOf, type PodUserNamespace } from './userns.js';
import { OCI_VERSION, type LinuxCapabilities, type LinuxNamespace, type Mount, type Spec } from './spec.js';

/** Where distributions install catatonit, in order of preference. */
export const CATATONIT_PATHS: readonly string[] = ['/usr/bin/catatonit', '/usr/libexec/catatonit/catatonit'];

const ROOTFS_DIRS = ['proc', 'dev', 'sys', 'etc', 'tmp'];

const ensuring = new SingleFlight<string>();

/**
 * Returns `${rootDir}/infra/rootfs`, creating it first if needed: catatonit plus the empty mount
 * points a read-only root needs. Built in a temp dir and renamed into place, so a crash never
 * leaves a half-made rootfs that later calls would take for complete. Concurrent calls in this
 * process share one build.
 */
export function ensureInfraRootfs(rootDir: string, candidates = CATATONIT_PATHS): Promise<string> {
  return ensuring.run(rootDir, () => buildInfraRootfs(rootDir, candidates));
}

async function buildInfraRootfs(rootDir: string, candidates: readonly string[]): Promise<string> {
  const infraDir = join(rootDir, 'infra');
  const rootfs = join(infraDir, 'rootfs');
  if (await exists(join(rootfs, 'catatonit'))) return rootfs;
  const catatonit = await findCatatonit(candidates);
  await mkdir(infraDir, { recursive: true, mode: 0o755 });
  await removeStaleTemps(infraDir);
  // Without catatonit the dir is not ours to trust (a rename is atomic, so we never made it).
  await rm(rootfs, { recursive: true, force: true });
  const tmp = join(infraDir, `rootfs.tmp-${randomBytes(6).toString('hex')}`);
  try {
    await populateRootfs(tmp, catatonit);
    await rename(tmp, rootfs);
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
  return rootfs;
}

async function populateRootfs(dir: string, catatonit: string): Promise<void> {
  await mkdir(dir, { mode: 0o755 });
  for (const d of ROOTFS_DIRS) await mkdir(join(dir, d), { mode: 0o755 });
  await copyFile(catatonit, join(dir, 'catatonit'));
  await chmod(join(dir, 'catatonit'), 0o755);
}

/** Leftovers of a build interrupted by a crash; safe to remove as builds are serialised above. */
async function removeStaleTemps(infraDir: string): Promise<void> {
  for (const name of await readdir(infraDir)) {
    if (name.startsWith('rootfs.tmp-')) await rm(join(infraDir, name), { recursive: true, force: true });
  }
}

async function findCatatonit(candidates: readonly string[]): Promise<string> {
  for (const path of candidates) {
    if (!(await exists(path))) continue;
    // The rootfs holds nothing else, so a dynamically linked binary would fail to exec with a
    // baffling "no such file or directory" for its missing loader.
    if (await hasInterpreter(path)) {
      throw new FailedPreconditionError(
        `${path} is dynamically linked; the infra container needs a static catatonit`,
      );
    }
    return path;
  }
  throw new FailedPreconditionError(
    `catatonit not found (looked for ${candidates.join(', ')}); install the catatonit package`,
  );
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}

export interface InfraSpecOptions {
  rootfsPath: string;
  /** '' keeps the host's UTS namespace (host network pods). */
  hostname: string;
  /** The pinned netns to join; null means the host's network (no network namespace entry). */
  netnsPath: string | null;
  hostIpc: boolean;
  /** false: a new pid namespace, which the pod's containers later join. */
  hostPid: boolean;
  sysctls: Record<string, string>;
  cgroupsPath: string;
  runAsUser?: number;
  runAsGroup?: number;
  supplementalGroups?: number[];
  privileged: boolean;
  /** Already clamped by the caller (see clampOomScoreAdj). */
  oomScoreAdj: number;
  annotations: Record<string, string>;
  /**
   * The pod's own user namespace, which the infra joins, so that the namespaces it makes for the
   * pod (pid, ipc, uts) are owned by it; null or absent: the host's.
   */
  userns?: PodUserNamespace | null;
}

/** The default capability set of container runtimes (containerd, Docker). */
export const DEFAULT_CAPABILITIES: readonly string[] = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FSETID',
  'CAP_FOWNER',
  'CAP_MKNOD',
  'CAP_NET_RAW',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETFCAP',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_KILL',
  'CAP_AUDIT_WRITE',
];

export const DEFAULT_MASKED_PATHS: readonly string[] = [
  '/proc/acpi',
  '/proc/asound',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/sys/firmware',
  '/sys/devices/virtual/powercap',
];

export const DEFAULT_READONLY_PATHS: readonly string[] = [
  '/proc/bus',
  '/proc/fs',
  '/proc/irq',
  '/proc/sys',
  '/proc/sysrq-trigger',
];

const INFRA_ENV = ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'];

export function buildInfraSpec(o: InfraSpecOptions): Spec {
  const spec: Spec = {
    ociVersion: OCI_VERSION,
    process: {
      terminal: false,
      user: {
        uid: o.runAsUser ?? 0,
        gid: o.runAsGroup ?? 0,
        additionalGids: [...(o.supplementalGroups ?? [])],
      },
      // -P: pause mode, no child to run; catatonit just reaps and waits for a signal.
      args: ['/catatonit', '-P'],
      env: [...INFRA_ENV],
      cwd: '/',
      capabilities: infraCapabilities(o.privileged),
      noNewPrivileges: true,
      oomScoreAdj: o.oomScoreAdj,
    },
    root: { path: o.rootfsPath, readonly: true },
    mounts: infraMounts(),
    linux: {
      namespaces: infraNamespaces(o),
      ...(o.userns ? mappingsOf(joinUserNamespace(o.userns)) : {}),
      cgroupsPath: o.cgroupsPath,
      sysctl: { ...o.sysctls },
      resources: { devices: [{ allow: o.privileged, access: 'rwm' }] },
      ...(o.privileged
        ? {}
        : {
            maskedPaths: [...DEFAULT_MASKED_PATHS],
            readonlyPaths: [...DEFAULT_READONLY_PATHS],
            // The infra holds every namespace of the pod for its whole life: a process that could
            // unshare, mount or ptrace from there would reach all of the pod's containers.
            seccomp: defaultSeccompProfile(infraCapabilities(false).bounding ?? []),
          }),
    },
    annotations: { ...o.annotations },
  };
  if (o.hostname !== '') spec.hostname = o.hostname;
  return spec;
}

/** catatonit needs no capability to sleep and reap; privileged pods get the runtime default set. */
export function infraCapabilities(privileged: boolean): LinuxCapabilities {
  const caps = privileged ? [...DEFAULT_CAPABILITIES] : [];
  return { bounding: caps, effective: [...caps], permitted: [...caps], inheritable: [], ambient: [] };
}

export function infraNamespaces(o: InfraSpecOptions): LinuxNamespace[] {
  const ns: LinuxNamespace[] = [];
  if (!o.hostPid) ns.push({ type: 'pid' });
  if (!o.hostIpc) ns.push({ type: 'ipc' });
  if (o.hostname !== '') ns.push({ type: 'uts' });
  ns.push({ type: 'mount' });
  if (o.netnsPath !== null) ns.push({ type: 'network', path: o.netnsPath });
  if (o.userns) ns.push(joinUserNamespace(o.userns).namespace);
  return ns;
}

export function infraMounts(): Mount[] {
  return [
    { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
    {
      destination: '/dev',
      type: 'tmpfs',
      source: 'tmpfs',
      options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'],
    },
    {
      destination: '/dev/pts',
      type: 'devpts',
      source: 'devpts',
      options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'],
    },
    {
      destination: '/dev/shm',
      type: 'tmpfs',
      source: 'shm',
      options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'],
    },
    { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
    { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
  ];
}
