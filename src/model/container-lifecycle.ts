/**
 * Every state a container may be in and every named transition between them: the one place that
 * says which change may follow which. ContainerRepo applies these, one guarded UPDATE each; nothing
 * else writes a container's state.
 */
import { follow, type Rule } from './lifecycle.js';

/**
 * CREATING doubles as a journal entry (rolled back at start-up); CREATED, RUNNING and EXITED are
 * CRI's states. The state is what berth last learned: a RUNNING row whose exit file appeared while
 * berthd was down becomes EXITED at start-up.
 */
export const CONTAINER_STATES = ['CREATING', 'CREATED', 'RUNNING', 'EXITED'] as const;
export type ContainerState = (typeof CONTAINER_STATES)[number];

/** What CreateContainer's journal row starts as. */
export const INITIAL_CONTAINER_STATE: ContainerState = 'CREATING';

const rules = {
  /** CreateContainer journals the step it is about to take. */
  beginStep: { from: ['CREATING'] },
  /** The user the process will run as is known once the spec is built. */
  userResolved: { from: ['CREATING'] },
  /** conmon and runc created the process: its pid and the monitor's are recorded. */
  processCreated: { from: ['CREATING'] },
  markCreated: { from: ['CREATING'], to: 'CREATED' },
  /** CreateContainer failed and some undo failed too: shown exited, so kubelet removes it. */
  createFailed: { from: ['CREATING'], to: 'EXITED' },
  /** StartContainer, or start-up finding that an interrupted one went through. */
  markRunning: { from: ['CREATED'], to: 'RUNNING' },
  /**
   * StartContainer of a container created from a checkpoint: the restored process and its monitor
   * come into being here, not at create, so their pids are recorded with the start.
   */
  markRestored: { from: ['CREATED'], to: 'RUNNING' },
  /** runc start failed and the process is not running. */
  startFailed: { from: ['CREATED'], to: 'EXITED' },
  /** An exit recorded by conmon, or decided by berth for a process it killed or lost. */
  markExited: { from: ['CREATED', 'RUNNING'], to: 'EXITED' },
  /** UpdateContainerResources changed the limits runc enforces. */
  updateResources: { from: ['CREATED', 'RUNNING'] },
} satisfies Record<string, Rule<ContainerState>>;

export type ContainerTransition = keyof typeof rules;

export const CONTAINER_TRANSITIONS: Readonly<Record<ContainerTransition, Rule<ContainerState>>> = rules;

/** The state `transition` leaves container `id` in; throws IllegalTransitionError if it may not happen. */
export function nextContainerState(
  id: string,
  current: ContainerState,
  transition: ContainerTransition,
): ContainerState {
  return follow(CONTAINER_TRANSITIONS[transition], current, {
    subject: `container ${id}`,
    transition,
    dimension: 'state',
  });
}
