import type { Logger } from '../log.js';
import { nowNanos } from '../time.js';
import type { EventHub } from './hub.js';

/** What happened to a container, or to a pod sandbox, in the words of kubelet's evented PLEG. */
export type LifecycleChange = 'CREATED' | 'STARTED' | 'STOPPED' | 'DELETED';

/** A change to container `containerId` of pod `sandboxId`; for the sandbox itself both are its id. */
export interface LifecycleFact {
  change: LifecycleChange;
  containerId: string;
  sandboxId: string;
}

/** Where the services report lifecycle changes; gRPC and the wire form are the edge's business. */
export interface LifecycleEvents {
  /** Publishes the change with the pod as it is at this moment. */
  publish(fact: LifecycleFact): void;
  /**
   * Describes the pod now and returns what publishes that description: for a removal, whose event
   * must describe a pod that is gone once the removal has succeeded.
   */
  capture(fact: LifecycleFact): () => void;
}

/** A published change: the fact, when (ns since the epoch, strictly increasing), and the pod then. */
export interface LifecycleEvent<Pod> extends LifecycleFact {
  createdAt: string;
  pod: Pod;
}

/**
 * Takes the pod's picture the moment a change is reported (kubelet builds the pod's status from the
 * event alone) and puts it on the hub. A pod that is no longer known cannot be described; its event
 * is dropped, as kubelet would drop one without a sandbox status.
 */
export class LifecyclePublisher<Pod> implements LifecycleEvents {
  private lastCreatedAt = 0n;
  private describe: ((sandboxId: string) => Pod | undefined) | null = null;
  /** Changes start-up repair reported before the services that describe pods existed. */
  private pending: LifecycleFact[] = [];

  constructor(
    private readonly hub: EventHub<LifecycleEvent<Pod>>,
    private readonly logger: Logger,
  ) {}

  /**
   * Start-up repair runs before the services exist; its changes are described here, as berthd
   * found them, before anything is served.
   */
  describeWith(describe: (sandboxId: string) => Pod | undefined): void {
    this.describe = describe;
    for (const fact of this.pending.splice(0)) this.publish(fact);
  }

  publish(fact: LifecycleFact): void {
    this.capture(fact)();
  }

  capture(fact: LifecycleFact): () => void {
    if (!this.describe) return () => this.pending.push(fact);
    const pod = this.describe(fact.sandboxId);
    if (pod === undefined) {
      this.logger.warn({ ...fact }, 'event dropped: its pod sandbox is unknown');
      return () => {};
    }
    return () => this.hub.publish({ ...fact, createdAt: this.nextCreatedAt(), pod });
  }

  /** kubelet ignores a pod status no newer than the one it has: two events never share a time. */
  private nextCreatedAt(): string {
    const now = BigInt(nowNanos());
    this.lastCreatedAt = now > this.lastCreatedAt ? now : this.lastCreatedAt + 1n;
    return this.lastCreatedAt.toString();
  }
}

/** The fact of a change to a container. */
export function containerChange(
  change: LifecycleChange,
  container: { id: string; sandboxId: string },
): LifecycleFact {
  return { change, containerId: container.id, sandboxId: container.sandboxId };
}

/** The fact of a change to a pod sandbox itself: kubelet knows it by its id as a container id. */
export function sandboxChange(change: LifecycleChange, sandboxId: string): LifecycleFact {
  return { change, containerId: sandboxId, sandboxId };
}
