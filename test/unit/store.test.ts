import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';

import Database from 'better-sqlite3';

import { AlreadyExistsError, NotFoundError } from '../../src/errors.js';
import { migrations } from '../../state/migrations.js';
import { SchemaTooNewError, Store, type SandboxPatch, type SandboxRow } from '../../src/store/index.js';
import { sandboxRow } from '../harness/records.js';

/** This file's sandbox has an id of the daemon's form (hex). */
function sandbox(overrides: Partial<SandboxRow> = {}): SandboxRow {
  return sandboxRow({ id: 'a1b2c3d4e5f6', ...overrides });
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

  it('round-trips a row through insert, get, update, list and delete', () => {
    const row = sandbox();
    store.insertSandbox(row);
    assert.deepEqual(store.getSandbox(row.id), row);

    store.updateSandbox(row.id, {
      state: 'READY',
      networkState: 'READY',
      hostNetwork: true,
      netnsPath: null,
      ip: '10.88.0.5',
      additionalIps: ['fd00::5'],
      cniResultJson: '{"ips":[]}',
      pid: 4242,
    });
    const updated = store.getSandbox(row.id);
    assert.deepEqual(updated, {
      ...row,
      state: 'READY',
      networkState: 'READY',
      hostNetwork: true,
      netnsPath: null,
      ip: '10.88.0.5',
      additionalIps: ['fd00::5'],
      cniResultJson: '{"ips":[]}',
      pid: 4242,
    });

    assert.deepEqual(store.listSandboxes(), [updated]);
    assert.equal(store.deleteSandbox(row.id), true);
    assert.equal(store.getSandbox(row.id), undefined);
    assert.deepEqual(store.listSandboxes(), []);
  });

  it('changes only the given fields, treating undefined as absent', () => {
    const row = sandbox({ step: 'cni-add', ip: '10.88.0.9' });
    store.insertSandbox(row);
    store.updateSandbox(row.id, { step: 'start-infra', ip: undefined });
    assert.deepEqual(store.getSandbox(row.id), { ...row, step: 'start-infra' });
  });

  it('never changes the id, even if a patch carries one', () => {
    const row = sandbox();
    store.insertSandbox(row);
    const sneaky = { id: 'other', step: 'x' } as SandboxPatch;
    store.updateSandbox(row.id, sneaky);
    assert.equal(store.getSandbox('other'), undefined);
    assert.equal(store.getSandbox(row.id)?.step, 'x');
  });

  it('throws NotFoundError when updating a missing id', () => {
    assert.throws(() => store.updateSandbox('nope', { state: 'READY' }), NotFoundError);
  });

  it('deletes idempotently', () => {
    assert.equal(store.deleteSandbox('never-existed'), false);
    store.insertSandbox(sandbox());
    assert.equal(store.deleteSandbox('a1b2c3d4e5f6'), true);
    assert.equal(store.deleteSandbox('a1b2c3d4e5f6'), false);
  });

  it('refuses a second sandbox with the same namespace, name, uid and attempt', () => {
    const first = sandbox();
    store.insertSandbox(first);
    assert.throws(() => store.insertSandbox(sandbox({ id: 'ffffffffffff' })), AlreadyExistsError);
    // The kubelet retry path: look the pod up and answer with the existing id.
    assert.equal(store.findSandboxByMetadata('default', 'nginx', first.uid, 0)?.id, first.id);

    // Any differing key component is a different pod sandbox.
    store.insertSandbox(sandbox({ id: 'b1', attempt: 1 }));
    store.insertSandbox(sandbox({ id: 'b2', uid: 'other-uid' }));
    store.insertSandbox(sandbox({ id: 'b3', namespace: 'kube-system' }));
    store.insertSandbox(sandbox({ id: 'b4', name: 'redis' }));
    assert.equal(store.findSandboxByMetadata('default', 'nginx', first.uid, 1)?.id, 'b1');
    assert.equal(store.findSandboxByMetadata('default', 'nginx', first.uid, 2), undefined);
    assert.equal(store.listSandboxes().length, 5);
  });

  it('refuses a duplicate id', () => {
    store.insertSandbox(sandbox());
    assert.throws(() => store.insertSandbox(sandbox({ uid: 'another-pod' })), AlreadyExistsError);
  });

  it('keeps all 19 digits of a nanosecond created_at', () => {
    const createdAt = '1763793600123456789';
    assert.ok(!Number.isSafeInteger(Number(createdAt)), 'the fixture must exceed 2^53 to mean anything');
    store.insertSandbox(sandbox({ createdAt }));
    assert.equal(store.getSandbox('a1b2c3d4e5f6')?.createdAt, createdAt);
    store.close();
    store = Store.open(path);
    assert.equal(store.getSandbox('a1b2c3d4e5f6')?.createdAt, createdAt);
  });

  it('rejects a created_at that is not a canonical int64 decimal', () => {
    for (const createdAt of ['', '-1', '01', '1.5', '1e18', '12345678901234567890']) {
      assert.throws(() => store.insertSandbox(sandbox({ createdAt })), /CHECK constraint failed/, createdAt);
    }
  });

  it('lists in numeric created_at order, not string order', () => {
    store.insertSandbox(sandbox({ id: 'c', uid: 'c', createdAt: '1763793600123456789' }));
    store.insertSandbox(sandbox({ id: 'a', uid: 'a', createdAt: '1000' }));
    store.insertSandbox(sandbox({ id: 'b', uid: 'b', createdAt: '999' }));
    assert.deepEqual(
      store.listSandboxes().map((row) => row.id),
      ['b', 'a', 'c'],
    );
  });

  it('finds sandboxes by id prefix', () => {
    store.insertSandbox(sandbox({ id: 'abc123', uid: '1', createdAt: '2' }));
    store.insertSandbox(sandbox({ id: 'abd456', uid: '2', createdAt: '1' }));
    store.insertSandbox(sandbox({ id: 'xyz789', uid: '3', createdAt: '3' }));
    const ids = (prefix: string): string[] => store.findSandboxesByIdPrefix(prefix).map((row) => row.id);
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
    store.insertSandbox(sandbox());
    store.close();
    // Migration 1 is a plain CREATE TABLE: running it again would throw "already exists".
    store = Store.open(path);
    assert.deepEqual(store.getSandbox('a1b2c3d4e5f6'), sandbox());

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
