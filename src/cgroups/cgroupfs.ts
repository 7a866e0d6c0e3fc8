/** The cgroupfs driver: runc makes each cgroup as a directory at the same path in every hierarchy. */
import { InvalidArgumentError } from '../errors.js';
import { CgroupManager, checkedRelative } from './manager.js';

/** Where containers of pods without a cgroup parent go. */
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

  /** kubelet's "/kubepods/burstable/pod<uid>"; a parent without the leading slash means the same. */
  podPath(parent: string): string {
    return this.relativePath(absolute(parent));
  }
}

function absolute(path: string): string {
  return path.startsWith('/') ? path : `/${path}`;
}
