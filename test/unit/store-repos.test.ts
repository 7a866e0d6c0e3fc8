import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';

import Database from 'better-sqlite3';

import { AlreadyExistsError, NotFoundError } from '../../src/errors.js';
import { IllegalTransitionError } from '../../src/model/lifecycle.js';
import type { Container } from '../../src/model/container.js';
import {
  CONTAINER_STATES,
  CONTAINER_TRANSITIONS,
  nextContainerState,
  type ContainerTransition,
} from '../../src/model/container-lifecycle.js';
import type { Sandbox } from '../../src/model/sandbox.js';
import {
  NETWORK_STATES,
  SANDBOX_STATES,
  SANDBOX_TRANSITIONS,
  nextSandboxStates,
  type SandboxTransition,
} from '../../src/model/sandbox-lifecycle.js';
import { ContainerRepo, SandboxRepo, Store } from '../../src/store/index.js';
import { emptyResources } from '../harness/container-spec.js';
import { IMAGE_ID, cniResults, container, sandbox, storedNetworking } from '../harness/records.js';

/** An infra process as runc created it: pid and start time. */
const INFRA = { pid: 4242, startTime: 987654 };
const UP = { results: cniResults(), ip: '10.88.0.5', additionalIps: ['fd00::5'] };

/** Every transition, called with the arguments a RunPodSandbox or a Stop would give it. */
const SANDBOX_CALLS: [SandboxTransition, (repo: SandboxRepo, id: string) => Sandbox][] = [
  ['infraCreated', (repo, id) => repo.infraCreated(id, INFRA)],
  ['infraIdentified', (repo, id) => repo.infraIdentified(id, INFRA)],
  ['foundDead', (repo, id) => repo.foundDead(id, 'its infra process (pid 4242) is gone')],
  ['networkAdding', (repo, id) => repo.networkAdding(id, storedNetworking())],
  ['pluginAddStarting', (repo, id) => repo.pluginAddStarting(id, 1, 0)],
  ['networkUp', (repo, id) => repo.networkUp(id, UP)],
  ['markReady', (repo, id) => repo.markReady(id)],
  ['createFailed', (repo, id) => repo.createFailed(id, 'cni-add')],
  ['markNotReady', (repo, id) => repo.markNotReady(id)],
  ['networkTornDown', (repo, id) => repo.networkTornDown(id)],
  [
    'resourcesUpdated',
    (repo, id) => repo.resourcesUpdated(id, { resources: emptyResources(), overhead: null }),
  ],
];

let dir: string;
let path: string;
let store: Store;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'berth-store-repos-'));
  path = join(dir, 'berth.db');
  store = Store.open(path);
});

afterEach(() => {
  store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('SandboxRepo', () => {
  it('round-trips a sandbox with its spec and CNI records parsed, across a reopen', () => {
    const record = sandbox({
      state: 'READY',
      networkState: 'READY',
      cniConfig: storedNetworking(),
      cniResults: cniResults(),
      ip: '10.88.0.5',
      additionalIps: ['fd00::5'],
      pid: 4242,
    });
    store.sandboxes.insert(record);
    assert.deepEqual(store.sandboxes.get(record.id), record);
    store.close();
    store = Store.open(path);
    assert.deepEqual(store.sandboxes.get(record.id), record);
    assert.deepEqual(store.sandboxes.list(), [record]);
    assert.deepEqual(store.sandboxes.findByIdPrefix('po'), [record]);
    assert.deepEqual(store.sandboxes.findByMetadata('default', 'nginx', 'uid-1', 0), record);
    assert.equal(store.sandboxes.findByMetadata('default', 'nginx', 'uid-1', 1), undefined);
    assert.equal(store.sandboxes.get('nope'), undefined);
  });

  it('lists oldest first and finds by id prefix, literally', () => {
    store.sandboxes.insert(sandbox({ id: 'abc123', uid: '1', createdAt: '1763793600123456789' }));
    store.sandboxes.insert(sandbox({ id: 'abd456', uid: '2', createdAt: '999' }));
    const ids = (sandboxes: Sandbox[]): string[] => sandboxes.map((s) => s.id);
    assert.deepEqual(ids(store.sandboxes.list()), ['abd456', 'abc123']);
    assert.deepEqual(ids(store.sandboxes.findByIdPrefix('ab')), ['abd456', 'abc123']);
    assert.deepEqual(ids(store.sandboxes.findByIdPrefix('abc')), ['abc123']);
    assert.deepEqual(ids(store.sandboxes.findByIdPrefix('%')), []);
    assert.deepEqual(ids(store.sandboxes.findByIdPrefix('')), []);
  });

  it('refuses a taken id or metadata, and deletes idempotently', () => {
    store.sandboxes.insert(sandbox());
    assert.throws(() => store.sandboxes.insert(sandbox({ uid: 'other' })), AlreadyExistsError);
    assert.throws(
      () => store.sandboxes.insert(sandbox({ id: 'pod2' })),
      (err: unknown) =>
        err instanceof AlreadyExistsError &&
        err.message === 'sandbox pod2 (default/nginx, uid uid-1, attempt 0) already exists',
    );
    assert.equal(store.sandboxes.delete('pod1'), true);
    assert.equal(store.sandboxes.delete('pod1'), false);
  });

  it('names the column of a stored value that is not what berthd writes', () => {
    store.sandboxes.insert(sandbox());
    const raw = new Database(path);
    try {
      const corrupt = (column: string, value: string): void => {
        store.close();
        raw.prepare(`UPDATE sandboxes SET ${column} = ? WHERE id = 'pod1'`).run(value);
        store = Store.open(path);
      };
      corrupt('config_json', '[]');
      assert.throws(() => store.sandboxes.get('pod1'), /^Error: sandbox pod1: unexpected config_json "\[\]"/);
      corrupt('config_json', JSON.stringify(sandbox().spec));
      corrupt('cni_result_json', '[{"ips":[]}]');
      assert.throws(() => store.sandboxes.list(), /sandbox pod1: unexpected cni_result_json/);
      corrupt('cni_result_json', '[]');
      corrupt('cni_config_json', '{"networks":[]}');
      assert.throws(() => store.sandboxes.list(), /sandbox pod1: unexpected cni_config_json/);
    } finally {
      raw.close();
    }
  });

  it('walks a RunPodSandbox and a StopPodSandbox through their transitions', () => {
    const repo = store.sandboxes;
    const start = sandbox();
    repo.insert(start);
    const steps: [() => Sandbox, Partial<Sandbox>][] = [
      [
        () => repo.networkAdding('pod1', storedNetworking()),
        { networkState: 'ADDING', cniConfig: storedNetworking() },
      ],
      [() => repo.infraCreated('pod1', INFRA), { pid: 4242, infraStartTime: 987654 }],
      [
        () => repo.networkUp('pod1', UP),
        { networkState: 'READY', cniResults: cniResults(), ip: '10.88.0.5', additionalIps: ['fd00::5'] },
      ],
      [() => repo.markReady('pod1'), { state: 'READY', step: 'ready' }],
      [() => repo.markNotReady('pod1'), { state: 'NOTREADY', pid: 0, infraStartTime: 0 }],
      [() => repo.networkTornDown('pod1'), { networkState: 'TORN_DOWN' }],
      [() => repo.markNotReady('pod1'), {}],
    ];
    let expected = start;
    for (const [transition, changes] of steps) {
      expected = { ...expected, ...changes };
      assert.deepEqual(transition(), expected);
      assert.deepEqual(repo.get('pod1'), expected);
    }
  });

  it('records where a failed RunPodSandbox stopped, with no infra left', () => {
    store.sandboxes.insert(sandbox({ step: 'cni-add', pid: 4242 }));
    assert.deepEqual(store.sandboxes.createFailed('pod1', 'cni-add'), {
      ...sandbox(),
      state: 'NOTREADY',
      step: 'failed at cni-add',
      pid: 0,
    });
  });

  it('applies each transition exactly where the lifecycle allows it, and leaves a refused row as it was', () => {
    assertCovers(SANDBOX_CALLS, SANDBOX_TRANSITIONS);
    for (const [transition, call] of SANDBOX_CALLS) {
      for (const state of SANDBOX_STATES) {
        for (const networkState of NETWORK_STATES) {
          const what = `${transition} from ${state}/${networkState}`;
          const before = sandbox({ state, networkState });
          store.sandboxes.insert(before);
          const allowed = unlessRefused(() => nextSandboxStates(before.id, before, transition));
          if (allowed) {
            const after = call(store.sandboxes, before.id);
            assert.deepEqual({ state: after.state, networkState: after.networkState }, allowed, what);
          } else {
            assert.throws(() => call(store.sandboxes, before.id), IllegalTransitionError, what);
            assert.deepEqual(store.sandboxes.get(before.id), before, what);
          }
          store.sandboxes.delete(before.id);
        }
      }
    }
  });

  it('throws NotFoundError for a transition of an unknown sandbox', () => {
    assert.throws(
      () => store.sandboxes.markNotReady('nope'),
      (err: unknown) => err instanceof NotFoundError && err.kind === 'sandbox' && err.id === 'nope',
    );
  });

  it('applies a transition as one guarded UPDATE, and reads the states only to explain a refusal', () => {
    store.sandboxes.insert(sandbox());
    const traced = (act: (repo: SandboxRepo) => void): string[] =>
      statementsRun(path, (db) => new SandboxRepo(db), act);
    assert.deepEqual(
      traced((repo) => repo.markReady('pod1')),
      ['UPDATE'],
    );
    assert.deepEqual(
      traced((repo) => assert.throws(() => repo.networkUp('pod1', UP), IllegalTransitionError)),
      ['UPDATE', 'SELECT'],
    );
    assert.equal(store.sandboxes.get('pod1')?.state, 'READY');
  });
});

const USER = { uid: 1000, gid: 1000, additionalGids: [1000, 10] };
const EXIT = { exitCode: 137, reason: 'Error', message: 'killed', finishedAt: '1763793602000000002' };
const RESOURCES = { ...emptyResources(), memoryLimitBytes: 64 * 1024 * 1024 };

/** Every transition, called with the arguments a CreateContainer, a Start or an exit would give it. */
const CONTAINER_CALLS: [ContainerTransition, (repo: ContainerRepo, id: string) => Container][] = [
  ['beginStep', (repo, id) => repo.beginStep(id, 'rootfs')],
  ['userResolved', (repo, id) => repo.userResolved(id, USER)],
  ['processCreated', (repo, id) => repo.processCreated(id, { pid: 4242, monitorPid: 4241 })],
  ['markCreated', (repo, id) => repo.markCreated(id)],
  ['createFailed', (repo, id) => repo.createFailed(id, EXIT)],
  ['markRunning', (repo, id) => repo.markRunning(id, '1763793601000000001')],
  [
    'markRestored',
    (repo, id) => repo.markRestored(id, '1763793601000000001', { pid: 4242, monitorPid: 4241 }),
  ],
  ['startFailed', (repo, id) => repo.startFailed(id, '1763793601000000001', EXIT)],
  ['markExited', (repo, id) => repo.markExited(id, EXIT)],
  ['updateResources', (repo, id) => repo.updateResources(id, RESOURCES)],
];

describe('ContainerRepo', () => {
  let repo: ContainerRepo;

  beforeEach(() => {
    store.sandboxes.insert(sandbox());
    repo = store.containers;
  });

  it('round-trips a container with its spec and user parsed, across a reopen', () => {
    const record = container({ state: 'RUNNING', user: USER, pid: 4242, monitorPid: 4241 });
    repo.insert(record);
    assert.deepEqual(repo.get(record.id), record);
    store.close();
    store = Store.open(path);
    repo = store.containers;
    assert.deepEqual(repo.get(record.id), record);
    assert.deepEqual(repo.list(), [record]);
    assert.deepEqual(repo.listBySandbox('pod1'), [record]);
    assert.deepEqual(repo.findByIdPrefix('c0f'), [record]);
    assert.deepEqual(repo.imageInUse(IMAGE_ID), [record.id]);
    assert.equal(repo.delete(record.id), true);
    assert.equal(repo.get(record.id), undefined);
  });

  it('refuses a taken id or metadata, and a container of an unknown sandbox', () => {
    repo.insert(container());
    assert.throws(() => repo.insert(container({ name: 'other' })), /container c0ffee01 already exists/);
    assert.throws(
      () => repo.insert(container({ id: 'dup' })),
      (err: unknown) =>
        err instanceof AlreadyExistsError &&
        err.message === 'container "web" (attempt 0) already exists in pod sandbox pod1 as c0ffee01',
    );
    assert.throws(
      () => repo.insert(container({ id: 'c3', sandboxId: 'ghost' })),
      (err: unknown) => err instanceof NotFoundError && err.kind === 'sandbox' && err.id === 'ghost',
    );
  });

  it('names the column of a stored value that is not what berthd writes', () => {
    repo.insert(container());
    const raw = new Database(path);
    try {
      raw.prepare(`UPDATE containers SET user_json = '{"uid":"0"}'`).run();
      assert.throws(() => repo.get('c0ffee01'), /^Error: container c0ffee01: unexpected user_json/);
      raw.prepare(`UPDATE containers SET user_json = '{}', config_json = '{"metadata":null}'`).run();
      assert.throws(() => repo.list(), /container c0ffee01: unexpected config_json/);
    } finally {
      raw.close();
    }
  });

  it('walks a CreateContainer, a StartContainer and an exit through their transitions', () => {
    const start = container();
    repo.insert(start);
    const id = start.id;
    const steps: [() => Container, Partial<Container>][] = [
      [() => repo.beginStep(id, 'rootfs'), { step: 'rootfs' }],
      [() => repo.userResolved(id, USER), { user: USER }],
      [() => repo.processCreated(id, { pid: 4242, monitorPid: 4241 }), { pid: 4242, monitorPid: 4241 }],
      [() => repo.markCreated(id), { state: 'CREATED', step: 'created' }],
      [
        () => repo.markRunning(id, '1763793601000000001'),
        { state: 'RUNNING', startedAt: '1763793601000000001' },
      ],
      [() => repo.updateResources(id, RESOURCES), { spec: { ...start.spec, resources: RESOURCES } }],
      [() => repo.markExited(id, EXIT), { state: 'EXITED', ...EXIT, pid: 0 }],
    ];
    let expected = start;
    for (const [transition, changes] of steps) {
      expected = { ...expected, ...changes };
      assert.deepEqual(transition(), expected);
      assert.deepEqual(repo.get(id), expected);
    }
  });

  it('keeps that a container is to be restored, and records its restore with its processes', () => {
    repo.insert(container({ state: 'CREATED', restore: true }));
    assert.equal(repo.get('c0ffee01')?.restore, true);
    assert.deepEqual(repo.markRestored('c0ffee01', '1763793601000000001', { pid: 4242, monitorPid: 4241 }), {
      ...container({ restore: true }),
      state: 'RUNNING',
      startedAt: '1763793601000000001',
      pid: 4242,
      monitorPid: 4241,
    });
  });

  it('records a failed create without its process, and a failed start with it', () => {
    repo.insert(container({ pid: 4242, monitorPid: 4241 }));
    assert.deepEqual(repo.createFailed('c0ffee01', EXIT), {
      ...container({ monitorPid: 4241 }),
      ...EXIT,
      state: 'EXITED',
    });

    repo.insert(container({ id: 'c2', name: 'two', state: 'CREATED', pid: 4242, monitorPid: 4241 }));
    assert.deepEqual(repo.startFailed('c2', '1763793601000000001', EXIT), {
      ...container({ id: 'c2', name: 'two', pid: 4242, monitorPid: 4241 }),
      ...EXIT,
      state: 'EXITED',
      startedAt: '1763793601000000001',
    });
  });

  it('applies each transition exactly where the lifecycle allows it, and leaves a refused row as it was', () => {
    assertCovers(CONTAINER_CALLS, CONTAINER_TRANSITIONS);
    for (const [transition, call] of CONTAINER_CALLS) {
      for (const state of CONTAINER_STATES) {
        const what = `${transition} from ${state}`;
        const before = container({ state });
        repo.insert(before);
        const allowed = unlessRefused(() => nextContainerState(before.id, state, transition));
        if (allowed) {
          assert.equal(call(repo, before.id).state, allowed, what);
        } else {
          assert.throws(() => call(repo, before.id), IllegalTransitionError, what);
          assert.deepEqual(repo.get(before.id), before, what);
        }
        repo.delete(before.id);
      }
    }
  });

  it('throws NotFoundError for a transition of an unknown container', () => {
    assert.throws(
      () => repo.markExited('nope', EXIT),
      (err: unknown) => err instanceof NotFoundError && err.kind === 'container' && err.id === 'nope',
    );
  });

  it('applies a transition as one guarded UPDATE, and reads the state only to explain a refusal', () => {
    repo.insert(container({ state: 'CREATED' }));
    const traced = (act: (repo: ContainerRepo) => void): string[] =>
      statementsRun(path, (db) => new ContainerRepo(db), act);
    assert.deepEqual(
      traced((repo) => repo.markRunning('c0ffee01', '1763793601000000001')),
      ['UPDATE'],
    );
    assert.deepEqual(
      traced((repo) => assert.throws(() => repo.markCreated('c0ffee01'), IllegalTransitionError)),
      ['UPDATE', 'SELECT'],
    );
    assert.equal(repo.get('c0ffee01')?.state, 'RUNNING');
  });
});

/** The list calls every transition of the table, once. */
function assertCovers(calls: readonly [string, unknown][], table: object): void {
  assert.deepEqual(calls.map(([name]) => name).sort(), Object.keys(table).sort());
}

/** What the lifecycle makes of a transition, or undefined when it refuses it. */
function unlessRefused<T>(decide: () => T): T | undefined {
  try {
    return decide();
  } catch (err) {
    if (err instanceof IllegalTransitionError) return undefined;
    throw err;
  }
}

/**
 * The statements `act` runs through a repository on a connection of its own to the database at
 * `dbPath`, by their first word (BEGIN with its mode).
 */
function statementsRun<R>(
  dbPath: string,
  open: (db: Database.Database) => R,
  act: (repo: R) => void,
): string[] {
  const log: string[] = [];
  const db = new Database(dbPath, { verbose: (sql) => log.push(String(sql)) });
  try {
    const repo = open(db);
    log.length = 0;
    act(repo);
  } finally {
    db.close();
  }
  return log.map((sql) => (sql.startsWith('BEGIN') ? sql : (sql.split(' ')[0] ?? '')));
}
