/**
 * One cgroup driver's knowledge of the host's cgroups, built once at start-up over the probed
 * hierarchies: the cgroupsPath runc is given, where that and a pod's cgroup parent are below the
 * hierarchies' roots, reading their figures, removing a container's leftovers, and which
 * resources the host can apply. The driver decides the names (cgroupfs paths or systemd units);
 * the version (v1, v2, hybrid) decides the files.
 */
import { InvalidArgumentError } from '../errors.js';
import type { CgroupDriver } from './driver.js';
import { removeCgroupEverywhere } from './hierarchy.js';
import { MonitorCgroup, type MonitorCgroupMode } from './monitor.js';
import type { PodCgroupLimits } from './pod-cgroup.js';
import type { CgroupHost } from './probe.js';
import { readCgroupDetailAt, readCgroupStatsAt, type CgroupDetail, type CgroupStats } from './stats.js';

/** What supportedResources looks at of a container's resources. */
interface CgroupResources {
  /** cgroup v2 files and values. */
  unified: Record<string, string>;
  hugepageLimits: readonly unknown[];
}

/** runc sets `org.systemd.property.X` annotations as property X of the unit it makes (systemd driver). */
const UNIT_PROPERTY_PREFIX = 'org.systemd.property.';

export abstract class CgroupManager {
  abstract readonly driver: CgroupDriver;

  constructor(readonly host: CgroupHost) {}

  /** runc's linux.cgroupsPath for container (or infra) `id`, inside its pod's cgroup parent. */
  abstract cgroupsPath(parent: string, id: string): string;

  /** The cgroup a cgroupsPath names, as a path below the hierarchies' roots, as runc derives it. */
  abstract relativePath(cgroupsPath: string): string;

  /** The pod's own cgroup, which its cgroup_parent names, below the hierarchies' roots. */
  abstract podPath(parent: string): string;

  /** The cgroup parent berth makes for pod `id`, one kubelet gave none, in the driver's form. */
  abstract podCgroupFor(id: string): string;

  /** Makes the pod cgroup `parent` (from podCgroupFor) with `limits` set on it. */
  abstract createPodCgroup(parent: string, limits: PodCgroupLimits, timeoutMs: number): Promise<void>;

  /** Sets `limits` on the existing pod cgroup `parent`. */
  abstract updatePodCgroup(parent: string, limits: PodCgroupLimits, timeoutMs: number): Promise<void>;

  /**
   * Removes the pod cgroup `parent` with whatever is still below it (killing what runs there); one
   * already gone is fine.
   */
  removePodCgroup(parent: string, timeoutMs: number): Promise<void> {
    return removeCgroupEverywhere(this.podPath(parent), timeoutMs, this.host.mountPoints);
  }

  /** The cgroup the container monitors live in, outside berthd's own. */
  monitors(mode: MonitorCgroupMode): MonitorCgroup {
    return new MonitorCgroup(mode, this.driver);
  }

  /** A container's counters by its cgroupsPath; null when its cgroup is gone. */
  readStats(cgroupsPath: string): Promise<CgroupStats | null> {
    return readCgroupStatsAt(this.host, this.relativePath(cgroupsPath));
  }

  /** The counters of the cgroup at `rel` (from relativePath or podPath); null when it is gone. */
  readStatsAt(rel: string): Promise<CgroupStats | null> {
    return readCgroupStatsAt(this.host, rel);
  }

  readDetailAt(rel: string): Promise<CgroupDetail | null> {
    return readCgroupDetailAt(this.host, rel);
  }

  /**
   * OCI annotations for runc to set as properties of the unit it makes for a container whose v2
   * files are `unified`; the systemd driver's business only.
   */
  unitAnnotations(_unified: Record<string, string>): Record<string, string> {
    return {};
  }

  /**
   * A container's annotations as its OCI spec gets them: the request's, less any that runc would
   * make a property of the container's systemd unit (a client could otherwise set Delegate=, or
   * lift the unit's limits), then the driver's own.
   */
  specAnnotations(
    requested: Record<string, string>,
    unified: Record<string, string>,
  ): Record<string, string> {
    const kept = Object.entries(requested).filter(([key]) => !key.startsWith(UNIT_PROPERTY_PREFIX));
    return { ...Object.fromEntries(kept), ...this.unitAnnotations(unified) };
  }

  /**
   * The systemd unit that records whether the container at `cgroupsPath` (v2 files `unified`) was
   * OOM-killed, past its cgroup's removal; null where none does (the systemd driver's business).
   */
  oomRecordingUnit(_cgroupsPath: string, _unified: Record<string, string>): string | null {
    return null;
  }

  /** Removes a container's cgroup from every hierarchy, killing what still runs in it. */
  removeContainerCgroup(cgroupsPath: string, timeoutMs: number): Promise<void> {
    return removeCgroupEverywhere(this.relativePath(cgroupsPath), timeoutMs, this.host.mountPoints);
  }

  /**
   * `resources` as this host can apply them, or an error naming the field. kubelet sends a (zero)
   * hugepage limit for every page size the node has; a host without the hugetlb controller (this
   * kind of VM, cgroup v1) cannot apply any, and runc would fail the container: like containerd's
   * tolerate_missing_hugetlb_controller, they are dropped there. `field` names the resources in
   * the request.
   */
  supportedResources<R extends CgroupResources>(resources: R, field: string): R {
    // runc would fail on them with a message that names no field; kubelet sends none on cgroup v1.
    if (Object.keys(resources.unified).length > 0 && this.host.version !== 'v2') {
      throw new InvalidArgumentError(`${field}.unified`, 'needs cgroup v2, and this node runs cgroup v1');
    }
    if (resources.hugepageLimits.length === 0 || this.host.controllers.includes('hugetlb')) return resources;
    return { ...resources, hugepageLimits: [] };
  }
}

/**
 * The path below the hierarchies' roots, checked the way both drivers need it: no "." or ".."
 * component (the cgroup must stay where its name says), repeated slashes folded.
 */
export function checkedRelative(path: string, cgroupsPath: string): string {
  if (path.split('/').some((seg) => seg === '..' || seg === '.')) {
    throw new InvalidArgumentError('cgroupsPath', `"${cgroupsPath}" has a "." or ".." component`);
  }
  return path.replace(/\/{2,}/g, '/');
}
