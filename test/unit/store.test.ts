import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';

import Database from 'better-sqlite3';

import { AlreadyExistsError, NotFoundError } from '../../src/errors.js';
import type { Sandbox } from '../../src/model/sandbox.js';
import { migrations } from '../../state/migrations.js';
import { SchemaTooNewError, Store } from '../../src/store/index.js';
import { SANDBOX_TABLE, sandboxMapping } from '../../src/store/sandbox-record.js';
import { Table } from '../../src/store/table.js';
import { withConnection } from '../harness/database.js';
import { cniResults, sandbox as podSandbox, storedNetworking } from '../harness/records.js';

/** This file's sandbox has an id of the daemon's form (hex). */
function sandbox(overrides: Partial<Sandbox> = {}): Sandbox {
  return podSandbox({ id: 'a1b2c3d4e5f6', ...overrides });
}

describe('Store sandboxes', () => {
  let dir: string;
  let path: string;
  let store: Store;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-store-'));
    // A missing parent directory is part of what open() must handle.
    path = join(dir, 'nested', 'berth.db');
    store = Store.open(path);
  });

  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('round-trips a sandbox through insert, get, transitions, list and delete', () => {
    const row = sandbox();
    store.sandboxes.insert(row);
    assert.deepEqual(store.sandboxes.get(row.id), row);

    store.sandboxes.networkAdding(row.id, storedNetworking());
    store.sandboxes.infraCreated(row.id, { pid: 4242, startTime: 987654 });
    store.sandboxes.networkUp(row.id, { results: cniResults(), ip: '10.88.0.5', additionalIps: ['fd00::5'] });
    store.sandboxes.markReady(row.id);
    const updated = store.sandboxes.get(row.id);
    assert.deepEqual(updated, {
      ...row,
      state: 'READY',
      step: 'ready',
      networkState: 'READY',
      cniConfig: storedNetworking(),
      cniResults: cniResults(),
      ip: '10.88.0.5',
      additionalIps: ['fd00::5'],
      pid: 4242,
      infraStartTime: 987654,
    });

    assert.deepEqual(store.sandboxes.list(), [updated]);
    assert.equal(store.sandboxes.delete(row.id), true);
    assert.equal(store.sandboxes.get(row.id), undefined);
    assert.deepEqual(store.sandboxes.list(), []);
  });

  it('round-trips a host-network sandbox, which has no netns', () => {
    const row = sandbox({ hostNetwork: true, netnsPath: null });
    store.sandboxes.insert(row);
    assert.deepEqual(store.sandboxes.get(row.id), row);
  });

  it('changes only the fields a transition sets', () => {
    const row = sandbox({ step: 'cni-add', ip: '10.88.0.9' });
    store.sandboxes.insert(row);
    store.sandboxes.infraCreated(row.id, { pid: 4242, startTime: 987654 });
    assert.deepEqual(store.sandboxes.get(row.id), { ...row, pid: 4242, infraStartTime: 987654 });
  });

  it('never rewrites the identity, even if a change carries it', () => {
    const row = sandbox();
    store.sandboxes.insert(row);
    withConnection(path, (db) =>
      new Table(db, SANDBOX_TABLE, sandboxMapping).update(row.id, (current) => ({
        ...current,
        name: 'renamed',
        namespace: 'kube-system',
        uid: 'other-uid',
        attempt: 7,
        step: 'x',
      })),
    );
    assert.deepEqual(store.sandboxes.get(row.id), { ...row, step: 'x' });
    assert.equal(store.sandboxes.findByMetadata('default', 'nginx', row.uid, 0)?.id, row.id);
  });

  it('throws NotFoundError when changing a missing id', () => {
    assert.throws(() => store.sandboxes.markReady('nope'), NotFoundError);
  });

  it('deletes idempotently', () => {
    assert.equal(store.sandboxes.delete('never-existed'), false);
    store.sandboxes.insert(sandbox());
    assert.equal(store.sandboxes.delete('a1b2c3d4e5f6'), true);
    assert.equal(store.sandboxes.delete('a1b2c3d4e5f6'), false);
  });

  it('refuses a second sandbox with the same namespace, name, uid and attempt', () => {
    const first = sandbox();
    store.sandboxes.insert(first);
    assert.throws(() => store.sandboxes.insert(sandbox({ id: 'ffffffffffff' })), AlreadyExistsError);
    // The kubelet retry path: look the pod up and answer with the existing id.
    assert.equal(store.sandboxes.findByMetadata('default', 'nginx', first.uid, 0)?.id, first.id);

    // Any differing key component is a different pod sandbox.
    store.sandboxes.insert(sandbox({ id: 'b1', attempt: 1 }));
    store.sandboxes.insert(sandbox({ id: 'b2', uid: 'other-uid' }));
    store.sandboxes.insert(sandbox({ id: 'b3', namespace: 'kube-system' }));
    store.sandboxes.insert(sandbox({ id: 'b4', name: 'redis' }));
    assert.equal(store.sandboxes.findByMetadata('default', 'nginx', first.uid, 1)?.id, 'b1');
    assert.equal(store.sandboxes.findByMetadata('default', 'nginx', first.uid, 2), undefined);
    assert.equal(store.sandboxes.list().length, 5);
  });

  it('refuses a duplicate id', () => {
    store.sandboxes.insert(sandbox());
    assert.throws(() => store.sandboxes.insert(sandbox({ uid: 'another-pod' })), AlreadyExistsError);
  });

  it('keeps all 19 digits of a nanosecond created_at', () => {
    const createdAt = '1763793600123456789';
    assert.ok(!Number.isSafeInteger(Number(createdAt)), 'the fixture must exceed 2^53 to mean anything');
    store.sandboxes.insert(sandbox({ createdAt }));
    assert.equal(store.sandboxes.get('a1b2c3d4e5f6')?.createdAt, createdAt);
    store.close();
    store = Store.open(path);
    assert.equal(store.sandboxes.get('a1b2c3d4e5f6')?.createdAt, createdAt);
  });

  it('rejects a created_at that is not a canonical int64 decimal', () => {
    for (const createdAt of ['', '-1', '01', '1.5', '1e18', '12345678901234567890']) {
      assert.throws(
        () => store.sandboxes.insert(sandbox({ createdAt })),
        /CHECK constraint failed/,
        createdAt,
      );
    }
  });

  it('lists in numeric created_at order, not string order', () => {
    store.sandboxes.insert(sandbox({ id: 'c', uid: 'c', createdAt: '1763793600123456789' }));
    store.sandboxes.insert(sandbox({ id: 'a', uid: 'a', createdAt: '1000' }));
    store.sandboxes.insert(sandbox({ id: 'b', uid: 'b', createdAt: '999' }));
    assert.deepEqual(
      store.sandboxes.list().map((row) => row.id),
      ['b', 'a', 'c'],
    );
  });

  it('finds sandboxes by id prefix', () => {
    store.sandboxes.insert(sandbox({ id: 'abc123', uid: '1', createdAt: '2' }));
    store.sandboxes.insert(sandbox({ id: 'abd456', uid: '2', createdAt: '1' }));
    store.sandboxes.insert(sandbox({ id: 'xyz789', uid: '3', createdAt: '3' }));
    const ids = (prefix: string): string[] => store.sandboxes.findByIdPrefix(prefix).map((row) => row.id);
    assert.deepEqual(ids('ab'), ['abd456', 'abc123']);
    assert.deepEqual(ids('abc'), ['abc123']);
    assert.deepEqual(ids('abc123'), ['abc123']);
    assert.deepEqual(ids('abc1234'), []);
    assert.deepEqual(ids('ABC'), []);
    // Wildcards of LIKE and GLOB are literal here.
    assert.deepEqual(ids('%'), []);
    assert.deepEqual(ids('*'), []);
    assert.deepEqual(ids(''), []);
  });

  it('keeps rows across a reopen without re-running migrations', () => {
    store.sandboxes.insert(sandbox());
    store.close();
    // Migration 1 is a plain CREATE TABLE: running it again would throw "already exists".
    store = Store.open(path);
    assert.deepEqual(store.sandboxes.get('a1b2c3d4e5f6'), sandbox());

    const raw = new Database(path, { readonly: true });
    try {
      assert.equal(raw.pragma('user_version', { simple: true }), migrations.length);
      assert.equal(raw.pragma('journal_mode', { simple: true }), 'wal');
    } finally {
      raw.close();
    }
  });

  it('refuses a database whose schema version is newer than the code', () => {
    store.close();
    const raw = new Database(path);
    raw.pragma('user_version = 99');
    raw.close();
    assert.throws(
      () => Store.open(path),
      (err: unknown) =>
        err instanceof SchemaTooNewError && err.found === 99 && /newer berthd/.test(err.message),
    );
    // Reopen something valid so afterEach has a store to close.
    store = Store.open(join(dir, 'fresh.db'));
  });
});
