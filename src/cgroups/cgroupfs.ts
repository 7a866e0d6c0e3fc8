/** The cgroupfs driver: runc makes each cgroup as a directory at the same path in every hierarchy. */
import { InvalidArgumentError } from '../errors.js';
import { CgroupManager, checkedRelative } from './manager.js';
import {
  limitFiles,
  makePodCgroup,
  setsNothing,
  writeLimitFiles,
  type PodCgroupLimits,
} from './pod-cgroup.js';

/**
 * Where the cgroups of pods without a cgroup parent go (their containers directly, for pods from
 * before berth made pod cgroups).
 */
const DEFAULT_PARENT = '/berth';

export class CgroupfsManager extends CgroupManager {
  readonly driver = 'cgroupfs';

  cgroupsPath(parent: string, id: string): string {
    const base = parent ? absolute(parent) : DEFAULT_PARENT;
    return `${base.replace(/\/+$/, '')}/${id}`;
  }

  /**
   * The path itself: berth always writes absolute ones; runc would resolve a relative one against
   * its own cgroup, which we cannot know, so those are refused.
   */
  relativePath(cgroupsPath: string): string {
    if (!cgroupsPath.startsWith('/')) {
      throw new InvalidArgumentError('cgroupsPath', `"${cgroupsPath}" is not absolute`);
    }
    return checkedRelative(cgroupsPath.replace(/\/+$/, ''), cgroupsPath);
  }

  /** Beside the containers of older pods, which are named by bare ids: no clash. */
  podCgroupFor(id: string): string {
    return `${DEFAULT_PARENT}/pod_${id}`;
  }

  async createPodCgroup(parent: string, limits: PodCgroupLimits): Promise<void> {
    const rel = this.podPath(parent);
    await makePodCgroup(this.host, rel);
    if (setsNothing(limits)) return;
    await writeLimitFiles(this.host, rel, limitFiles(this.host, limits));
  }

  updatePodCgroup(parent: string, limits: PodCgroupLimits): Promise<void> {
    return writeLimitFiles(this.host, this.podPath(parent), limitFiles(this.host, limits));
  }

  /** kubelet's "/kubepods/burstable/pod<uid>"; a parent without the leading slash means the same. */
  podPath(parent: string): string {
    return this.relativePath(absolute(parent));
  }
}

function absolute(path: string): string {
  return path.startsWith('/') ? path : `/${path}`;
}
