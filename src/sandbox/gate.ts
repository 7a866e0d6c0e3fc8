import { FailedPreconditionError } from '../errors.js';
import { KeyedGate } from '../operation/gate.js';

/**
 * The order between a pod and its containers. Container operations that add to a pod (create,
 * start) run inside the gate; StopPodSandbox and RemovePodSandbox close it, wait for the ones
 * already inside, then work on a pod where nothing new can appear. A container operation that
 * comes while the pod is closing is refused: a pod being stopped or removed takes no new
 * container. Without this a create that raced a remove left a container in a pod whose row was
 * going, or a pod NOTREADY with a container just started in it.
 */
export class PodGate extends KeyedGate {
  constructor() {
    super((podId) => new FailedPreconditionError(`pod sandbox ${podId} is being stopped or removed`));
  }
}
