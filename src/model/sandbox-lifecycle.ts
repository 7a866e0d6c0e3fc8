/**
 * Every state a pod sandbox and its network may be in, and every named transition between them:
 * the one place that says which change may follow which. SandboxRepo applies these, one
 * guarded UPDATE each; nothing else writes a sandbox's states.
 */
import { follow, type Rule } from './lifecycle.js';

/** CREATING doubles as a journal entry: a row left in CREATING after a crash is rolled back at start. */
export const SANDBOX_STATES = ['CREATING', 'READY', 'NOTREADY'] as const;
export type SandboxState = (typeof SANDBOX_STATES)[number];

/**
 * Where the pod's CNI attachment stands. ADDING is written before the first ADD so that a crash
 * mid-ADD still leads to a DEL; TORN_DOWN only after every DEL succeeded.
 */
export const NETWORK_STATES = ['NONE', 'ADDING', 'READY', 'TORN_DOWN'] as const;
export type NetworkState = (typeof NETWORK_STATES)[number];

export interface SandboxStates {
  state: SandboxState;
  networkState: NetworkState;
}

/** What RunPodSandbox's journal row starts as. */
export const INITIAL_SANDBOX_STATES: Readonly<SandboxStates> = { state: 'CREATING', networkState: 'NONE' };

/** A transition of the sandbox's state and, when it touches the network, of its network state. */
export interface SandboxRule {
  readonly state: Rule<SandboxState>;
  /** Absent: the network state may be anything and stays. */
  readonly network?: Rule<NetworkState>;
}

const rules = {
  /** runc created the infra; its pid and start time are recorded. */
  infraCreated: { state: { from: ['CREATING'] } },
  /** Start-up read the start time of a running infra recorded before berth kept it. */
  infraIdentified: { state: { from: ['READY'] } },
  /** The CNI input is recorded before the first ADD, so that a DEL can always follow. */
  networkAdding: { state: { from: ['CREATING'] }, network: { from: ['NONE'], to: 'ADDING' } },
  /** The next plugin of a network's chain is about to run its ADD. */
  pluginAddStarting: { state: { from: ['CREATING'] }, network: { from: ['ADDING'] } },
  /** Every ADD succeeded: results and IPs are recorded. */
  networkUp: { state: { from: ['CREATING'] }, network: { from: ['ADDING'], to: 'READY' } },
  /** Every step succeeded; a pod network is up unless the pod has the host's. */
  markReady: { state: { from: ['CREATING'], to: 'READY' }, network: { from: ['NONE', 'READY'] } },
  /** RunPodSandbox failed and some undo failed too: the row stays for Stop and Remove to retry. */
  createFailed: { state: { from: ['CREATING'], to: 'NOTREADY' } },
  /**
   * What held the pod's namespaces is gone though no StopPodSandbox asked (its infra exited or was
   * killed, its pins unmounted), found while berthd ran or at start-up: the reason says what.
   */
  foundDead: { state: { from: ['READY'], to: 'NOTREADY' } },
  /** The infra is stopped (or gone before the pod was ready); stopping again is no change. */
  markNotReady: { state: { from: ['CREATING', 'READY', 'NOTREADY'], to: 'NOTREADY' } },
  /** UpdatePodSandboxResources recorded what the pod now asks for its cgroup. */
  resourcesUpdated: { state: { from: ['READY', 'NOTREADY'] } },
  /** Every DEL succeeded, whatever the sandbox's own state. */
  networkTornDown: {
    state: { from: SANDBOX_STATES },
    network: { from: ['ADDING', 'READY'], to: 'TORN_DOWN' },
  },
} satisfies Record<string, SandboxRule>;

export type SandboxTransition = keyof typeof rules;

export const SANDBOX_TRANSITIONS: Readonly<Record<SandboxTransition, SandboxRule>> = rules;

/** The states `transition` leaves sandbox `id` in; throws IllegalTransitionError if it may not happen. */
export function nextSandboxStates(
  id: string,
  current: SandboxStates,
  transition: SandboxTransition,
): SandboxStates {
  const rule = SANDBOX_TRANSITIONS[transition];
  const subject = `pod sandbox ${id}`;
  return {
    state: follow(rule.state, current.state, { subject, transition, dimension: 'state' }),
    networkState: rule.network
      ? follow(rule.network, current.networkState, { subject, transition, dimension: 'network state' })
      : current.networkState,
  };
}
