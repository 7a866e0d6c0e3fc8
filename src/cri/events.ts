import type { ContainerService } from '../container/service.js';
import type { ContainerView } from '../container/types.js';
import { NotFoundError } from '../errors.js';
import type { EventHub } from '../events/hub.js';
import type { LifecycleEvent } from '../events/lifecycle.js';
import type { SandboxService } from '../sandbox/service.js';
import type { SandboxView } from '../sandbox/types.js';
import { toWireContainerStatus } from './container-status.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import type { StreamHandlers } from './handler.js';
import type { Sent } from './messages.js';
import { toWireStatus } from './sandbox.js';

/**
 * A pod as an event carries it: what PodSandboxStatus and ContainerStatus report of it at the
 * moment of the change. kubelet's evented PLEG builds the pod's whole status from this alone.
 */
export interface PodSnapshot {
  sandbox: SandboxView;
  /** Every container of the pod, not only the one the event is about. */
  containers: ContainerView[];
}

export type PodEventHub = EventHub<LifecycleEvent<PodSnapshot>>;

/** The pod as the status rpcs would report it now; undefined once its sandbox is gone. */
export function describePod(
  sandboxes: SandboxService,
  containers: ContainerService,
  sandboxId: string,
): PodSnapshot | undefined {
  try {
    return {
      sandbox: sandboxes.view(sandboxId),
      containers: containers.views.list({ podSandboxId: sandboxId }),
    };
  } catch (err) {
    if (err instanceof NotFoundError) return undefined;
    throw err;
  }
}

export function eventHandlers(hub: PodEventHub) {
  return {
    GetContainerEvents: async function* (_request, { signal }) {
      const subscription = hub.subscribe();
      signal.addEventListener('abort', () => subscription.close(), { once: true });
      try {
        for await (const event of subscription) yield toWireEvent(event);
      } finally {
        subscription.close();
      }
    },
  } satisfies StreamHandlers<RuntimeServiceHandlers>;
}

export function toWireEvent(event: LifecycleEvent<PodSnapshot>) {
  return {
    container_id: event.containerId,
    container_event_type: `CONTAINER_${event.change}_EVENT`,
    created_at: event.createdAt,
    pod_sandbox_status: toWireStatus(event.pod.sandbox),
    containers_statuses: event.pod.containers.map(toWireContainerStatus),
  } satisfies Sent<'ContainerEventResponse'>;
}
