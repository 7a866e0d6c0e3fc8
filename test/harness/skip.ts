/** `skip` options for suites that need what only some machines have: why not, or false to run. */
import { existsSync, readFileSync } from 'node:fs';
import { DOCKER_REGISTRY } from './registry.js';

/** Suites that run berthd, runc or mounts. */
export const rootSkip: string | false = process.getuid?.() !== 0 ? 'needs root' : false;

/** Suites that also pull from a TestRegistry (Debian's docker-registry). */
export const registrySkip: string | false =
  rootSkip || (!existsSync(DOCKER_REGISTRY) ? 'no docker-registry' : false);

/** The kernel's AppArmor module is on (the Debian 13 VM; not this kind of host). */
export const appArmorEnabled: boolean = (() => {
  try {
    return readFileSync('/sys/module/apparmor/parameters/enabled', 'utf8').trim() === 'Y';
  } catch {
    return false;
  }
})();
