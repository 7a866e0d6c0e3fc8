import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { FailedPreconditionError } from '../../src/errors.js';
import { newContainer } from '../../src/model/container.js';
import {
  CONTAINER_STATES,
  CONTAINER_TRANSITIONS,
  nextContainerState,
  type ContainerState,
  type ContainerTransition,
} from '../../src/model/container-lifecycle.js';
import { IllegalTransitionError, type Rule } from '../../src/model/lifecycle.js';
import { newSandbox } from '../../src/model/sandbox.js';
import {
  NETWORK_STATES,
  SANDBOX_STATES,
  SANDBOX_TRANSITIONS,
  nextSandboxStates,
  type NetworkState,
  type SandboxState,
  type SandboxTransition,
} from '../../src/model/sandbox-lifecycle.js';
import { container, sandbox } from '../harness/records.js';

/** The changes of state a table allows, as "FROM→TO", sorted. */
function edges<S extends string>(rules: readonly Rule<S>[]): string[] {
  const found = new Set<string>();
  for (const rule of rules) {
    for (const from of rule.from)
      if (rule.to !== undefined && rule.to !== from) found.add(`${from}→${rule.to}`);
  }
  return [...found].sort();
}

/** Where each sandbox transition may start: its state, and its network state (null: any). */
const SANDBOX_ALLOWED: [SandboxTransition, SandboxState[], NetworkState[] | null][] = [
  ['infraCreated', ['CREATING'], null],
  ['infraIdentified', ['READY'], null],
  ['foundDead', ['READY'], null],
  ['networkAdding', ['CREATING'], ['NONE']],
  ['pluginAddStarting', ['CREATING'], ['ADDING']],
  ['networkUp', ['CREATING'], ['ADDING']],
  ['markReady', ['CREATING'], ['NONE', 'READY']],
  ['createFailed', ['CREATING'], null],
  ['markNotReady', ['CREATING', 'READY', 'NOTREADY'], null],
  ['networkTornDown', ['CREATING', 'READY', 'NOTREADY'], ['ADDING', 'READY']],
  ['resourcesUpdated', ['READY', 'NOTREADY'], null],
];

const CONTAINER_ALLOWED: [ContainerTransition, ContainerState[]][] = [
  ['beginStep', ['CREATING']],
  ['userResolved', ['CREATING']],
  ['processCreated', ['CREATING']],
  ['markCreated', ['CREATING']],
  ['createFailed', ['CREATING']],
  ['markRunning', ['CREATED']],
  ['markRestored', ['CREATED']],
  ['startFailed', ['CREATED']],
  ['markExited', ['CREATED', 'RUNNING']],
  ['updateResources', ['CREATED', 'RUNNING']],
];

/** The list names every transition of the table, once. */
function assertCovers(table: object, allowed: [string, ...unknown[]][]): void {
  assert.deepEqual(allowed.map(([name]) => name).sort(), Object.keys(table).sort());
}

describe('sandbox lifecycle', () => {
  it('changes a sandbox state only along CREATING→READY→NOTREADY and CREATING→NOTREADY', () => {
    assert.deepEqual(edges(Object.values(SANDBOX_TRANSITIONS).map((rule) => rule.state)), [
      'CREATING→NOTREADY',
      'CREATING→READY',
      'READY→NOTREADY',
    ]);
  });

  it('changes a network state only along NONE→ADDING→READY→TORN_DOWN and ADDING→TORN_DOWN', () => {
    const rules = Object.values(SANDBOX_TRANSITIONS).flatMap((rule) => (rule.network ? [rule.network] : []));
    assert.deepEqual(edges(rules), ['ADDING→READY', 'ADDING→TORN_DOWN', 'NONE→ADDING', 'READY→TORN_DOWN']);
  });

  it('allows each transition exactly where it may start, and nowhere else', () => {
    assertCovers(SANDBOX_TRANSITIONS, SANDBOX_ALLOWED);
    for (const [transition, states, networkStates] of SANDBOX_ALLOWED) {
      const rule = SANDBOX_TRANSITIONS[transition];
      for (const state of SANDBOX_STATES) {
        for (const networkState of NETWORK_STATES) {
          const current = { state, networkState };
          const what = `${transition} from ${state}/${networkState}`;
          const ok = states.includes(state) && (networkStates?.includes(networkState) ?? true);
          if (!ok) {
            assert.throws(() => nextSandboxStates('s1', current, transition), IllegalTransitionError, what);
            continue;
          }
          assert.deepEqual(
            nextSandboxStates('s1', current, transition),
            { state: rule.state.to ?? state, networkState: rule.network?.to ?? networkState },
            what,
          );
        }
      }
    }
  });

  it('leaves READY only for NOTREADY, and a torn-down network for nothing', () => {
    assert.deepEqual(
      Object.entries(SANDBOX_TRANSITIONS)
        .filter(([, rule]) => rule.state.from.includes('READY') && rule.state.to !== undefined)
        .map(([name, rule]) => `${name}→${rule.state.to}`),
      ['foundDead→NOTREADY', 'markNotReady→NOTREADY'],
    );
    for (const rule of Object.values(SANDBOX_TRANSITIONS)) {
      assert.ok(!rule.network?.from.includes('TORN_DOWN'));
    }
  });

  it('refuses with FAILED_PRECONDITION, naming the sandbox, the transition and the state', () => {
    assert.throws(
      () => nextSandboxStates('abc', { state: 'NOTREADY', networkState: 'NONE' }, 'markReady'),
      (err: unknown) =>
        err instanceof IllegalTransitionError &&
        err instanceof FailedPreconditionError &&
        err.message === 'pod sandbox abc: markReady is not allowed in state NOTREADY (only in CREATING)',
    );
    assert.throws(
      () => nextSandboxStates('abc', { state: 'CREATING', networkState: 'TORN_DOWN' }, 'networkUp'),
      /^IllegalTransitionError: pod sandbox abc: networkUp is not allowed in network state TORN_DOWN \(only in ADDING\)$/,
    );
  });

  it('starts a sandbox as a CREATING journal entry with nothing done yet', () => {
    // The harness's sandbox is one just reserved; its runtime handler, as its name, comes from the spec.
    const expected = sandbox({ runtimeHandler: 'kata', spec: { ...sandbox().spec, runtimeHandler: 'kata' } });
    const { id, spec, hostNetwork, netnsPath, sandboxDir, createdAt, infra, podCgroup, resources } = expected;
    assert.deepEqual(
      newSandbox({ id, spec, hostNetwork, netnsPath, sandboxDir, createdAt, infra, podCgroup, resources }),
      expected,
    );
  });
});

describe('container lifecycle', () => {
  it('changes state only along CREATING→CREATED→RUNNING→EXITED, CREATING→EXITED and CREATED→EXITED', () => {
    assert.deepEqual(edges(Object.values(CONTAINER_TRANSITIONS)), [
      'CREATED→EXITED',
      'CREATED→RUNNING',
      'CREATING→CREATED',
      'CREATING→EXITED',
      'RUNNING→EXITED',
    ]);
  });

  it('allows each transition exactly where it may start, and nothing from EXITED', () => {
    assertCovers(CONTAINER_TRANSITIONS, CONTAINER_ALLOWED);
    for (const [transition, allowed] of CONTAINER_ALLOWED) {
      for (const state of CONTAINER_STATES) {
        const what = `${transition} from ${state}`;
        if (!allowed.includes(state)) {
          assert.throws(() => nextContainerState('c1', state, transition), IllegalTransitionError, what);
          continue;
        }
        assert.equal(
          nextContainerState('c1', state, transition),
          CONTAINER_TRANSITIONS[transition].to ?? state,
          what,
        );
      }
    }
    assert.ok(Object.values(CONTAINER_TRANSITIONS).every((rule) => !rule.from.includes('EXITED')));
  });

  it('refuses with FAILED_PRECONDITION, naming the container, the transition and the state', () => {
    assert.throws(
      () => nextContainerState('c1', 'EXITED', 'markRunning'),
      (err: unknown) =>
        err instanceof FailedPreconditionError &&
        err.message === 'container c1: markRunning is not allowed in state EXITED (only in CREATED)',
    );
  });

  it('starts a container as a CREATING journal entry with nothing done yet', () => {
    // The harness's container is one just reserved; its name and image come from the spec.
    const expected = container();
    const { id, sandboxId, spec, imageId, createdAt, logPath, bundleDir, cgroupsPath } = expected;
    assert.deepEqual(
      newContainer({ id, sandboxId, spec, imageId, createdAt, logPath, bundleDir, cgroupsPath }),
      expected,
    );
  });
});
