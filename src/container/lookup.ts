import { FailedPreconditionError, NotFoundError } from '../errors.js';
import type { Container } from '../model/container.js';
import { findByIdOrPrefix, matchesLabels, type RecordKind } from '../operation/lookup.js';
import type { Store } from '../store/index.js';
import type { ContainerFilter, ContainerStateName } from './types.js';

/** A container record is the create's journal: until the create is done, clients do not see it. */
const CONTAINER: RecordKind<Container> = {
  field: 'container_id',
  noun: 'container',
  plural: 'containers',
  hidden: (container) => container.state === 'CREATING',
};

/** By exact id or unique prefix, as clients name containers; NotFound otherwise. */
export function findContainer(store: Store, idOrPrefix: string): Container {
  return findByIdOrPrefix(store.containers, idOrPrefix, CONTAINER, false);
}

/** As findContainer, for the idempotent calls to which an unknown container is no error. */
export function findContainerIfAny(store: Store, idOrPrefix: string): Container | undefined {
  return findByIdOrPrefix(store.containers, idOrPrefix, CONTAINER, true);
}

/** By full id, as it is now: for re-reading a container under its lock. */
export function currentContainer(store: Store, id: string): Container {
  const container = store.containers.get(id);
  if (!container) throw new NotFoundError('container', id);
  return container;
}

/** For the calls that need a process to work in (exec, attach, log reopening). */
export function findRunning(store: Store, idOrPrefix: string): Container {
  const container = findContainer(store, idOrPrefix);
  if (container.state !== 'RUNNING') {
    throw new FailedPreconditionError(`container ${container.id} is ${stateWord(container)}, not running`);
  }
  return container;
}

/** The containers a CRI filter selects (creates in progress are not containers yet). */
export function selectContainers(store: Store, filter: ContainerFilter): Container[] {
  return candidates(store, filter)
    .filter((container) => container.state !== 'CREATING')
    .filter((container) => !filter.state || stateName(container) === filter.state)
    .filter((container) => matchesLabels(container.spec.labels, filter.labelSelector));
}

/** The containers of the id and pod filters, oldest first. */
function candidates(store: Store, { id, podSandboxId }: ContainerFilter): Container[] {
  if (!podSandboxId) return id ? store.containers.findByIdPrefix(id) : store.containers.list();
  const exact = store.sandboxes.get(podSandboxId) !== undefined;
  // The common case, and every event's picture of its pod: one pod, by its full id.
  if (exact && !id) return store.containers.listBySandbox(podSandboxId);
  const sandboxIds = new Set(
    exact ? [podSandboxId] : store.sandboxes.findByIdPrefix(podSandboxId).map((s) => s.id),
  );
  const found = id ? store.containers.findByIdPrefix(id) : store.containers.list();
  return found.filter((container) => sandboxIds.has(container.sandboxId));
}

/**
 * Created or running: runc has its process, and a conmon watches it. Not a created container made
 * from a checkpoint: its process and monitor come with its restore, at StartContainer.
 */
export function hasProcess(container: Pick<Container, 'state' | 'restore'>): boolean {
  return (container.state === 'CREATED' && !container.restore) || container.state === 'RUNNING';
}

/** The state as CRI names it. */
export function stateName(container: Pick<Container, 'state'>): ContainerStateName {
  switch (container.state) {
    case 'CREATED':
      return 'CONTAINER_CREATED';
    case 'RUNNING':
      return 'CONTAINER_RUNNING';
    case 'EXITED':
      return 'CONTAINER_EXITED';
    default:
      return 'CONTAINER_UNKNOWN';
  }
}

/** The state as error messages say it. */
export function stateWord(container: Pick<Container, 'state'>): string {
  return container.state.toLowerCase();
}
