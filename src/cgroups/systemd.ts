/**
 * The systemd driver: runc asks systemd for a scope per container, inside a slice, and systemd
 * places the cgroup after its unit's name. berth computes where that is, to read and remove it.
 */
import { InvalidArgumentError } from '../errors.js';
import { CgroupManager, checkedRelative } from './manager.js';

/** Where containers of pods without a cgroup parent go; also runc's default for an empty slice. */
const DEFAULT_SLICE = 'system.slice';

export class SystemdManager extends CgroupManager {
  readonly driver = 'systemd';

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

  /** The parent is a slice (kubelet's "kubepods-burstable-pod<uid>.slice"), expanded to its path. */
  podPath(parent: string): string {
    return expandSlice(parent);
  }
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
