/**
 * What the host can do, probed once at start-up: logged once, shown by verbose Status (`crictl
 * info`), and handed to whoever decides by it, so that no module keeps a probe of its own. Probes
 * of what a runtime handler can do (rro mounts, joining a user namespace) belong to the handler.
 */
import { access, constants, readdir, readFile, stat } from 'node:fs/promises';
import { release } from 'node:os';
import { probeCgroupHost, type CgroupHost } from '../cgroups/probe.js';
import { errorMessage, ExecError } from '../errors.js';
import { findProgram, run } from '../exec.js';
import { loadLibc } from '../libc.js';
import type { AppArmorHost } from '../oci/apparmor.js';
import { heldCapabilities } from '../oci/capabilities.js';
import { parseOomScoreAdj } from '../oci/oom.js';
import { probeIdmapSupport, type IdmapSupport } from './idmap-probe.js';

export interface HostFeatures {
  cgroups: CgroupHost;
  /**
   * Whether AppArmor is usable (probeAppArmor), and the default profile berthd loaded there at
   * start-up (host/apparmor.ts; the probe itself loads nothing and answers null).
   */
  appArmor: AppArmorHost;
  /** The kernel filters syscalls (CONFIG_SECCOMP_FILTER), with the actions it offers. */
  seccomp: { enabled: boolean; actions: string[] };
  /** The page sizes the kernel has huge pages of, as CRI names them ("2MB"). */
  hugetlb: { pageSizes: string[] };
  /**
   * Whether the kernel has mount_setattr(2), which idmapped mounts need, and whether it idmaps
   * what a user-namespaced pod needs (tried once, see idmap-probe.ts).
   */
  idmappedMounts: { kernel: string; mountSetattr: boolean } & IdmapSupport;
  /** CRIU, which checkpoints containers; null when it is not installed or does not answer. */
  criu: CriuHost | null;
  /** berthd's own process, which runc inherits from (see probeOwnProcess). */
  process: OwnProcess;
}

/** What berthd itself holds that bounds what a container may be given. */
export interface OwnProcess {
  /** Every capability the kernel knows that berthd's bounding set holds (heldCapabilities). */
  capabilities: string[];
  /** berthd's oom_score_adj, the floor of a container's (clampOomScoreAdj); null: unreadable. */
  oomScoreAdj: number | null;
}

export interface HostProbeOptions {
  timeoutMs: number;
  /** A dir on the image store's filesystem the idmapping probe may make its scratch dirs in. */
  scratchDir: string;
}

export async function probeHostFeatures(opts: HostProbeOptions): Promise<HostFeatures> {
  const [cgroups, appArmor, seccomp, pageSizes, idmapped, criu, own] = await Promise.all([
    probeCgroupHost(),
    probeAppArmor(),
    seccompSupport(),
    hugePageSizes(),
    idmappedMounts(opts),
    probeCriu(opts.timeoutMs),
    probeOwnProcess(),
  ]);
  return {
    cgroups,
    appArmor,
    seccomp,
    hugetlb: { pageSizes },
    idmappedMounts: { kernel: release(), ...idmapped },
    criu,
    process: own,
  };
}

/** Where probeOwnProcess reads; other paths only in tests. */
export interface OwnProcessPaths {
  capLastCap: string;
  status: string;
  oomScoreAdj: string;
}

const OWN_PROCESS_PATHS: OwnProcessPaths = {
  capLastCap: '/proc/sys/kernel/cap_last_cap',
  status: '/proc/self/status',
  oomScoreAdj: '/proc/self/oom_score_adj',
};

/**
 * Read once: berthd's bounding set and oom_score_adj do not change while it runs (nothing in
 * berthd changes them), and every CreateContainer and RunPodSandbox builds from them.
 */
export async function probeOwnProcess(paths: OwnProcessPaths = OWN_PROCESS_PATHS): Promise<OwnProcess> {
  const read = (path: string): Promise<string> => readFile(path, 'utf8').catch(() => '');
  const [lastCap, status, oom] = await Promise.all([
    read(paths.capLastCap),
    read(paths.status),
    read(paths.oomScoreAdj),
  ]);
  return { capabilities: heldCapabilities(lastCap, status), oomScoreAdj: parseOomScoreAdj(oom) };
}

/** What the AppArmor probe looks at; other paths only in tests. */
export interface AppArmorPaths {
  /** Without the module, or with it disabled at boot, there is no such file or it says "N". */
  enabledFile: string;
  /** The module's securityfs interface, where profiles are loaded and listed. */
  securityDir: string;
  /** The program that loads profiles, by name (looked up in PATH) or path. */
  parser: string;
}

const APPARMOR_PATHS: AppArmorPaths = {
  enabledFile: '/sys/module/apparmor/parameters/enabled',
  securityDir: '/sys/kernel/security/apparmor',
  parser: 'apparmor_parser',
};

/**
 * AppArmor is usable only with the module enabled, its securityfs interface mounted (runc, like
 * berth, finds profiles there, and confines nothing without it) and apparmor_parser installed to
 * load berth's default profile. With the module on and one of the others missing it is reported
 * off, saying why, as containerd and runc take it: RuntimeDefault then means unconfined, and a
 * Localhost profile is refused.
 */
export async function probeAppArmor(paths: AppArmorPaths = APPARMOR_PATHS): Promise<AppArmorHost> {
  const off = (reason?: string): AppArmorHost => ({
    enabled: false,
    defaultProfile: null,
    ...(reason === undefined ? {} : { reason }),
  });
  const text = await readFile(paths.enabledFile, 'utf8').catch(() => 'N');
  if (text.trim() !== 'Y') return off();
  if (!(await isDirectory(paths.securityDir))) {
    return off(`the AppArmor module is enabled, but securityfs is not mounted (no ${paths.securityDir})`);
  }
  if (!(await isProgram(paths.parser))) {
    return off(`the AppArmor module is enabled, but ${paths.parser} is not installed (package apparmor)`);
  }
  return { enabled: true, defaultProfile: null };
}

/** findProgram takes a path as given: the file must be there and executable too. */
async function isProgram(name: string): Promise<boolean> {
  try {
    await access(await findProgram(name), constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

async function isDirectory(path: string): Promise<boolean> {
  return (await stat(path).catch(() => null))?.isDirectory() ?? false;
}

/** The filter's actions (Linux 4.14 on); a kernel without seccomp filters has no such file. */
async function seccompSupport(): Promise<HostFeatures['seccomp']> {
  const actions = await readFile('/proc/sys/kernel/seccomp/actions_avail', 'utf8').catch(() => '');
  const list = actions.split(/\s+/).filter((a) => a !== '');
  return { enabled: list.length > 0, actions: list };
}

/** /sys/kernel/mm/hugepages has a "hugepages-<n>kB" dir per size; none without huge pages. */
async function hugePageSizes(): Promise<string[]> {
  const names = await readdir('/sys/kernel/mm/hugepages').catch(() => [] as string[]);
  const kib = names.flatMap((name) => {
    const m = /^hugepages-(\d+)kB$/.exec(name);
    return m?.[1] === undefined ? [] : [Number(m[1])];
  });
  return kib.sort((a, b) => a - b).map(pageSizeName);
}

/** 2048 → "2MB", 1048576 → "1GB", 64 → "64KB": the largest unit that divides the size. */
export function pageSizeName(kib: number): string {
  if (kib % (1024 * 1024) === 0) return `${kib / (1024 * 1024)}GB`;
  if (kib % 1024 === 0) return `${kib / 1024}MB`;
  return `${kib}KB`;
}

const ENOSYS = 38;
const EPERM = 1;

/**
 * Asked of the kernel itself rather than read from its version: distributions backport. A call
 * with no attributes fails with EINVAL where the call exists; ENOSYS where it does not, and EPERM
 * where a seccomp filter around berthd forbids it, which is as good as not there.
 */
async function hasMountSetattr(): Promise<boolean> {
  const libc = await loadLibc();
  if (libc.mountSetattr(-1, '', 0, null) === 0) return true;
  const errno = libc.errno();
  return errno !== ENOSYS && errno !== EPERM;
}

async function idmappedMounts(
  opts: HostProbeOptions,
): Promise<Omit<HostFeatures['idmappedMounts'], 'kernel'>> {
  if (!(await hasMountSetattr())) {
    return {
      mountSetattr: false,
      overlayLower: false,
      tmpfs: false,
      reason: 'the kernel has no mount_setattr(2)',
    };
  }
  return { mountSetattr: true, ...(await probeIdmapSupport(opts.scratchDir, opts.timeoutMs)) };
}

/**
 * What criu says of itself. An installed criu may still be unable to dump on this kernel (criu
 * 3.17 on 6.18: "Unexpected rt vDSO area bounds"): `criu check` tries what a dump needs, and only
 * when it passes is criu usable; otherwise `reason` holds what it said.
 */
export interface CriuHost {
  version: string;
  usable: boolean;
  reason?: string;
}

/** `criu --version` says "Version: 3.17.1" first. `program` is another criu only in tests. */
export async function probeCriu(timeoutMs: number, program = 'criu'): Promise<CriuHost | null> {
  let path: string;
  let version: string | undefined;
  try {
    path = await findProgram(program);
    version = /^Version:\s*(\S+)/m.exec((await run(path, ['--version'], { timeoutMs })).stdout)?.[1];
  } catch {
    // Not installed, or it failed or hung: either way there is no criu to use.
    return null;
  }
  if (version === undefined) return null;
  try {
    await run(path, ['check'], { timeoutMs });
    return { version, usable: true };
  } catch (err) {
    const said = err instanceof ExecError ? lastLines(err.stderr) || err.message : errorMessage(err);
    return { version, usable: false, reason: `criu check failed: ${said}` };
  }
}

/** criu check prints a line per thing it tried; the failures come last. */
function lastLines(text: string): string {
  return text.trim().split('\n').slice(-3).join('; ');
}
