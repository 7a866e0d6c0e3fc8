/**
 * Host device nodes for a container's spec: the CRI's device mappings, or every device of the
 * host for a privileged container.
 */
import { readdir, stat, lstat } from 'node:fs/promises';
import { posix } from 'node:path';
import type { BigIntStats } from 'node:fs';
import { InvalidArgumentError } from '../errors.js';
import type { LinuxDevice, LinuxDeviceCgroup } from './spec.js';

export interface ResolvedDevices {
  devices: LinuxDevice[];
  /** One cgroup allow rule per device, with the mapping's permissions. */
  rules: LinuxDeviceCgroup[];
}

/**
 * The device at `hostPath` (symlinks followed, as /dev/disk/by-id names are links), created at
 * `containerPath`. A directory maps every device beneath it, recursively, to the same relative
 * path under `containerPath`. `permissions` is some of "rwm", "" meaning all. `field` names the
 * request field for errors, e.g. config.devices[0].host_path.
 */
export async function deviceFromPath(
  hostPath: string,
  containerPath: string,
  permissions: string,
  field: string,
): Promise<ResolvedDevices> {
  const access = normalizePermissions(permissions, field.replace(/host_path$/, 'permissions'));
  let info: BigIntStats;
  try {
    info = await stat(hostPath, { bigint: true });
  } catch (err) {
    throw new InvalidArgumentError(
      field,
      `${hostPath}: ${(err as NodeJS.ErrnoException).code ?? 'cannot stat'}`,
    );
  }
  const found: Array<{ path: string; info: BigIntStats }> = [];
  if (info.isDirectory()) {
    for (const d of await devicesUnder(hostPath, [])) {
      found.push({ path: posix.join(containerPath, posix.relative(hostPath, d.path)), info: d.info });
    }
  } else if (info.isCharacterDevice() || info.isBlockDevice()) {
    found.push({ path: containerPath, info });
  } else {
    throw new InvalidArgumentError(field, `${hostPath} is not a device`);
  }
  const devices = found.map((f) => toDevice(f.path, f.info));
  const rules = devices.map((d): LinuxDeviceCgroup => ({
    allow: true,
    type: d.type,
    major: d.major,
    minor: d.minor,
    access,
  }));
  return { devices, rules };
}

/**
 * Directories of /dev that are not device nodes of the host but filesystems a container gets its
 * own of (pts, shm, mqueue) or links to process state (fd). /dev/console is the host's terminal.
 */
const HOST_SKIP = ['/dev/pts', '/dev/shm', '/dev/mqueue', '/dev/fd', '/dev/console'];

/** Every device node under /dev, for a privileged container, at the same paths. */
export async function hostDevices(root = '/dev'): Promise<LinuxDevice[]> {
  const skip = HOST_SKIP.map((p) => posix.join(root, posix.relative('/dev', p)));
  const found = await devicesUnder(root, skip);
  return found.map((f) => toDevice(posix.join('/dev', posix.relative(root, f.path)), f.info));
}

/** Device nodes below `dir`, not following symlinks (they would list devices twice, or loop). */
async function devicesUnder(
  dir: string,
  skip: readonly string[],
): Promise<Array<{ path: string; info: BigIntStats }>> {
  const out: Array<{ path: string; info: BigIntStats }> = [];
  const names = await readdir(dir).catch(() => [] as string[]);
  for (const name of names.sort()) {
    const path = posix.join(dir, name);
    if (skip.includes(path)) continue;
    // Devices come and go (hotplug); a vanished entry is simply not there.
    const info = await lstat(path, { bigint: true }).catch(() => null);
    if (info === null) continue;
    if (info.isDirectory()) out.push(...(await devicesUnder(path, skip)));
    else if (info.isCharacterDevice() || info.isBlockDevice()) out.push({ path, info });
  }
  return out;
}

function toDevice(path: string, info: BigIntStats): LinuxDevice {
  const { major, minor } = splitDev(info.rdev);
  return {
    path,
    type: info.isBlockDevice() ? 'b' : 'c',
    major,
    minor,
    fileMode: Number(info.mode & 0o777n),
    uid: Number(info.uid),
    gid: Number(info.gid),
  };
}

/** The kernel's dev_t layout (glibc's gnu_dev_major / gnu_dev_minor). */
export function splitDev(rdev: bigint): { major: number; minor: number } {
  const major = ((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn);
  const minor = (rdev & 0xffn) | ((rdev >> 12n) & ~0xffn);
  return { major: Number(major & 0xffffffffn), minor: Number(minor & 0xffffffffn) };
}

function normalizePermissions(permissions: string, field: string): string {
  if (permissions === '') return 'rwm';
  if (!/^[rwm]+$/.test(permissions)) {
    throw new InvalidArgumentError(field, `"${permissions}": permissions are some of r, w, m`);
  }
  return ['r', 'w', 'm'].filter((c) => permissions.includes(c)).join('');
}
