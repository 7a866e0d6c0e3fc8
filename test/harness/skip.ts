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

/**
 * For a test that needs nothing the VM has and this kind of host lacks (cgroup v2, AppArmor,
 * systemd, a criu that works): skipped in the VM part of `npm test` (scripts/vm/suites.sh sets
 * BERTH_TEST_VM_PART=1), since the host suite runs it to the same effect and the emulated VM,
 * several times slower, has to fit its own bound. `npm run test:vm` runs it like any other.
 */
export const hostProves: string | false =
  process.env.BERTH_TEST_VM_PART === '1'
    ? 'the host suite runs this; the VM part of npm test runs what needs the VM'
    : false;
