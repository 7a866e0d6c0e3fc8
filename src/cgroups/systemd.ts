/**
 * The systemd driver: runc asks systemd for a scope per container, inside a slice, and systemd
 * places the cgroup after its unit's name. berth computes where that is, to read and remove it.
 */
import { InvalidArgumentError } from '../errors.js';
import { CgroupManager, checkedRelative } from './manager.js';
import { writeLimitFiles, type PodCgroupLimits } from './pod-cgroup.js';
import type { CgroupHost, CgroupVersion } from './probe.js';

/**
 * Where containers of pods without a cgroup parent went before berth made a slice per pod (those
 * pods keep them there); also runc's default for an empty slice.
 */
const DEFAULT_SLICE = 'system.slice';

/** The OCI annotation runc turns into a property of the scope it makes (a D-Bus variant's text). */
const OOM_POLICY_ANNOTATION = 'org.systemd.property.OOMPolicy';

/** Names a pod's slice: "berth-pod_<id>.slice", which systemd nests in "berth.slice". */
const POD_SLICE_PREFIX = 'berth-pod_';

/**
 * What the driver has systemd itself do with a pod's slice (host/systemd.ts does it, over
 * systemctl). Properties are set for this boot only (runtime drop-ins): the pods do not outlive it.
 */
export interface SliceControl {
  /** Starts `slice` (systemd makes one without a unit file) with `properties` set. */
  start(slice: string, properties: readonly string[], timeoutMs: number): Promise<void>;
  setProperties(slice: string, properties: readonly string[], timeoutMs: number): Promise<void>;
  /** Stops it, and all that still runs in it, and drops the properties set. */
  remove(slice: string, timeoutMs: number): Promise<void>;
}

/** What the node's systemd can do, probed (host/systemd.ts). */
export interface SystemdOptions {
  /** It takes OOMPolicy= for scopes (version 253 on); older ones refuse it, failing runc. */
  scopeOomPolicy: boolean;
  /** Absent: no pod slices can be made (a manager only asked about paths). */
  slices?: SliceControl;
}

export class SystemdManager extends CgroupManager {
  readonly driver = 'systemd';

  constructor(
    host: CgroupHost,
    private readonly systemd: SystemdOptions,
  ) {
    super(host);
  }

  /**
   * With kubelet's memory.oom.group the kernel kills the whole container on an OOM, so having
   * systemd stop the scope then (OOMPolicy=stop) changes nothing in the container, and makes
   * systemd record the kill as the scope's Result (see host/systemd.ts). Without the group kill it
   * would stop a container the kernel left running, so the policy stays systemd's.
   */
  override unitAnnotations(unified: Record<string, string>): Record<string, string> {
    return this.oomRecordingUnitFor(unified) ? { [OOM_POLICY_ANNOTATION]: "'stop'" } : {};
  }

  override oomRecordingUnit(cgroupsPath: string, unified: Record<string, string>): string | null {
    if (!this.oomRecordingUnitFor(unified)) return null;
    return this.relativePath(cgroupsPath).split('/').pop() ?? null;
  }

  private oomRecordingUnitFor(unified: Record<string, string>): boolean {
    return this.systemd.scopeOomPolicy && unified['memory.oom.group']?.trim() === '1';
  }

  /** "slice:prefix:name", as runc's --systemd-cgroup expects; runc creates the scope itself. */
  cgroupsPath(parent: string, id: string): string {
    return `${parent || DEFAULT_SLICE}:berth:${id}`;
  }

  /**
   * "slice:prefix:name" names the scope "<prefix>-<name>.scope" (or the slice "<name>" when it
   * ends in ".slice") inside the expanded slice; an empty slice means system.slice, as in runc.
   */
  relativePath(cgroupsPath: string): string {
    const parts = cgroupsPath.split(':');
    if (parts.length !== 3) {
      throw new InvalidArgumentError('cgroupsPath', `"${cgroupsPath}" is not of the form slice:prefix:name`);
    }
    const [slice = '', prefix = '', name = ''] = parts;
    if (name === '') throw new InvalidArgumentError('cgroupsPath', `"${cgroupsPath}" has no name`);
    const unit = name.endsWith('.slice') ? name : `${prefix}-${name}.scope`;
    return checkedRelative(`${expandSlice(slice || DEFAULT_SLICE)}/${unit}`, cgroupsPath);
  }

  podCgroupFor(id: string): string {
    return `${POD_SLICE_PREFIX}${id}.slice`;
  }

  async createPodCgroup(parent: string, limits: PodCgroupLimits, timeoutMs: number): Promise<void> {
    await this.sliceControl().start(parent, sliceProperties(limits, this.host.version), timeoutMs);
    await this.writeUnified(parent, limits);
  }

  async updatePodCgroup(parent: string, limits: PodCgroupLimits, timeoutMs: number): Promise<void> {
    await this.sliceControl().setProperties(parent, sliceProperties(limits, this.host.version), timeoutMs);
    await this.writeUnified(parent, limits);
  }

  /**
   * systemd kills what is left in the slice as it stops it, and removes its cgroup; not the cgroup
   * of a slice given properties but never started (measured on systemd 257), which goes as a
   * container's does.
   */
  override async removePodCgroup(parent: string, timeoutMs: number): Promise<void> {
    await this.sliceControl().remove(parent, timeoutMs);
    await super.removePodCgroup(parent, timeoutMs);
  }

  /**
   * The v2 files systemd has no property for (UNIFIED_PROPERTIES has those it has) are written as
   * runc writes a container's.
   */
  private async writeUnified(parent: string, limits: PodCgroupLimits): Promise<void> {
    const files = Object.entries(limits.unified)
      .filter(([file]) => !(file in UNIFIED_PROPERTIES))
      .map(([file, value]) => ({ controller: '', file, value }));
    await writeLimitFiles(this.host, this.podPath(parent), files);
  }

  private sliceControl(): SliceControl {
    if (!this.systemd.slices) throw new Error('this systemd driver was made without control of slices');
    return this.systemd.slices;
  }

  /** The parent is a slice (kubelet's "kubepods-burstable-pod<uid>.slice"), expanded to its path. */
  podPath(parent: string): string {
    return expandSlice(parent);
  }
}

/**
 * v2 files systemd sets from a property of the slice: written directly, systemd would write its
 * own value back as soon as a scope joins the slice (measured: pids.max, on systemd 257).
 */
const UNIFIED_PROPERTIES: Readonly<Record<string, string>> = {
  'pids.max': 'TasksMax',
  'memory.high': 'MemoryHigh',
  'memory.low': 'MemoryLow',
  'memory.min': 'MemoryMin',
  'memory.swap.max': 'MemorySwapMax',
};

/**
 * `limits` as properties of a slice, each always given so that an update also lifts what is no
 * longer asked ("X=" resets X). systemd sets cpu.max from a percentage of one CPU. On v1 and
 * hybrid hosts, where cpu is a v1 controller, the shares go as CPUShares=: systemd would turn a
 * CPUWeight= into shares of its own (weight * 1024 / 100), not the ones asked, which the weight
 * was made from.
 */
export function sliceProperties(limits: PodCgroupLimits, version: CgroupVersion): string[] {
  const percent = Math.round((limits.cpuQuota * 10_000) / limits.cpuPeriod) / 100;
  const unified = Object.entries(UNIFIED_PROPERTIES).map(([file, property]) => {
    const value = limits.unified[file]?.trim() ?? '';
    return `${property}=${value === 'max' ? 'infinity' : value}`;
  });
  return [
    `MemoryMax=${limits.memoryBytes > 0 ? limits.memoryBytes : 'infinity'}`,
    `CPUQuota=${limits.cpuQuota > 0 ? `${percent}%` : ''}`,
    `CPUQuotaPeriodSec=${limits.cpuPeriod}us`,
    version !== 'v2'
      ? `CPUShares=${limits.cpuShares > 0 ? limits.cpuShares : ''}`
      : `CPUWeight=${limits.cpuShares > 0 ? limits.cpuWeight : ''}`,
    `AllowedCPUs=${limits.cpusetCpus}`,
    `AllowedMemoryNodes=${limits.cpusetMems}`,
    ...unified,
  ];
}

/**
 * systemd's slice nesting made explicit: "a-b-c.slice" lives at "/a.slice/a-b.slice/a-b-c.slice",
 * and "-.slice" is the root (""), so a path built on it starts at the top.
 */
export function expandSlice(slice: string): string {
  const suffix = '.slice';
  if (!slice.endsWith(suffix) || slice.length === suffix.length || slice.includes('/')) {
    throw new InvalidArgumentError('cgroupsPath', `invalid slice name "${slice}"`);
  }
  const stem = slice.slice(0, -suffix.length);
  if (stem === '-') return '';
  const parts = stem.split('-');
  if (parts.some((p) => p === ''))
    throw new InvalidArgumentError('cgroupsPath', `invalid slice name "${slice}"`);
  return parts.map((_, i) => `/${parts.slice(0, i + 1).join('-')}${suffix}`).join('');
}
