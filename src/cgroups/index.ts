/** The cgroups room's front: the manager of the configured driver over the probed hierarchies. */
import { CgroupfsManager } from './cgroupfs.js';
import type { CgroupDriver } from './driver.js';
import type { CgroupManager } from './manager.js';
import type { CgroupHost } from './probe.js';
import { SystemdManager } from './systemd.js';

export type { CgroupManager } from './manager.js';

export function cgroupManager(driver: CgroupDriver, host: CgroupHost): CgroupManager {
  return driver === 'systemd' ? new SystemdManager(host) : new CgroupfsManager(host);
}
