/**
 * Checkpoint archives of a test berthd's running containers, made as kubelet has them made: by
 * CheckpointContainer, the container left running. The restore tests restore what berth itself
 * wrote, so that the two halves are proven to fit.
 */
import type { TestDaemon } from './daemon.js';

/** criu of a small busybox container takes seconds, more under emulation: a bound for a hang. */
const CHECKPOINT_TIMEOUT_S = 120;

/** CheckpointContainer of `id` into `location` (absolute, in an existing dir). */
export function checkpointContainer(
  daemon: TestDaemon,
  id: string,
  location: string,
  timeoutS = CHECKPOINT_TIMEOUT_S,
): Promise<unknown> {
  return daemon.cri.call('CheckpointContainer', { container_id: id, location, timeout: timeoutS });
}
