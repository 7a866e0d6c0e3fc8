/**
 * The OOM witness the exit watcher asks when conmon left no OOM marker (runtime/exits.ts): the
 * systemd unit of a container that records OOM kills (cgroups/systemd.ts), as systemd kept it
 * (host/systemd.ts). Only a SIGKILLed container is asked about, the only way the OOM killer ends one.
 */
import type { CgroupManager } from '../cgroups/index.js';
import { scopeOomKilled } from '../host/systemd.js';
import type { OomWitness } from '../runtime/index.js';
import type { ContainerServiceDeps } from './context.js';

/** SIGKILL's exit code. */
const KILLED = 128 + 9;

export function oomWitness(
  store: ContainerServiceDeps['store'],
  cgroups: CgroupManager,
  timeoutMs: number,
): OomWitness {
  return async (id, exitCode) => {
    const container = exitCode === KILLED ? store.containers.get(id) : undefined;
    const unit = container
      ? cgroups.oomRecordingUnit(container.cgroupsPath, container.spec.resources.unified)
      : null;
    return unit !== null && (await scopeOomKilled(unit, timeoutMs));
  };
}
