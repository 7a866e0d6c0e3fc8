/** The cgroups room's front: the manager of the configured driver over the probed hierarchies. */
import { CgroupfsManager } from './cgroupfs.js';
import type { CgroupDriver } from './driver.js';
import type { CgroupManager } from './manager.js';
import type { CgroupHost } from './probe.js';
import { SystemdManager, type SystemdOptions } from './systemd.js';

export type { CgroupManager } from './manager.js';
export { cpuWeightOf, MAX_SHARES, type WeightConversion } from './cpu-weight.js';

/** `systemd`: what the systemd the systemd driver runs under can do; nothing extra unless given. */
export function cgroupManager(
  driver: CgroupDriver,
  host: CgroupHost,
  systemd: SystemdOptions = { scopeOomPolicy: false },
): CgroupManager {
  return driver === 'systemd' ? new SystemdManager(host, systemd) : new CgroupfsManager(host);
}
