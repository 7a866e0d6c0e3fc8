import { FailedPreconditionError } from '../errors.js';

interface PodState {
  /** Stop or Remove calls of the pod under way. */
  closing: number;
  /** Container operations under way in the pod. */
  active: number;
  /** Resolvers of closers waiting for `active` to reach 0. */
  idle: (() => void)[];
}

/**
 * The order between a pod and its containers. Container operations that add to a pod (create,
 * start) run inside the gate; StopPodSandbox and RemovePodSandbox close it, wait for the ones
 * already inside, then work on a pod where nothing new can appear. A container operation that
 * comes while the pod is closing is refused: a pod being stopped or removed takes no new
 * container. Without this a create that raced a remove left a container in a pod whose row was
 * going, or a pod NOTREADY with a container just started in it.
 */
export class PodGate {
  private readonly pods = new Map<string, PodState>();

  /** Runs `fn` as a container operation of pod `podId`; refused while the pod is closing. */
  async enter<T>(podId: string, fn: () => Promise<T>): Promise<T> {
    const state = this.state(podId);
    if (state.closing > 0) {
      throw new FailedPreconditionError(`pod sandbox ${podId} is being stopped or removed`);
    }
    state.active++;
    try {
      return await fn();
    } finally {
      state.active--;
      if (state.active === 0) for (const wake of state.idle.splice(0)) wake();
      this.forget(podId, state);
    }
  }

  /** Closes the pod to new container operations, waits for those under way, then runs `fn`. */
  async close<T>(podId: string, fn: () => Promise<T>): Promise<T> {
    const state = this.state(podId);
    state.closing++;
    try {
      if (state.active > 0) await new Promise<void>((resolve) => state.idle.push(resolve));
      return await fn();
    } finally {
      state.closing--;
      this.forget(podId, state);
    }
  }

  private state(podId: string): PodState {
    let state = this.pods.get(podId);
    if (!state) {
      state = { closing: 0, active: 0, idle: [] };
      this.pods.set(podId, state);
    }
    return state;
  }

  private forget(podId: string, state: PodState): void {
    if (state.closing === 0 && state.active === 0 && this.pods.get(podId) === state) this.pods.delete(podId);
  }
}
