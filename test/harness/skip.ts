/** `skip` options for suites that need what only some machines have: why not, or false to run. */
import { existsSync } from 'node:fs';
import { DOCKER_REGISTRY } from './registry.js';

/** Suites that run berthd, runc or mounts. */
export const rootSkip: string | false = process.getuid?.() !== 0 ? 'needs root' : false;

/** Suites that also pull from a TestRegistry (Debian's docker-registry). */
export const registrySkip: string | false =
  rootSkip || (!existsSync(DOCKER_REGISTRY) ? 'no docker-registry' : false);
