import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { afterEach, beforeEach, describe, it } from 'node:test';

import Database from 'better-sqlite3';

import { AlreadyExistsError, NotFoundError } from '../../src/errors.js';
import type { Container } from '../../src/model/container.js';
import { CONTAINER_TABLE, containerMapping } from '../../src/store/container-record.js';
import { Store } from '../../src/store/index.js';
import { sandboxMapping } from '../../src/store/sandbox-record.js';
import { Table } from '../../src/store/table.js';
import { migrate } from '../../state/migrate.js';
import { migrations } from '../../state/migrations.js';
import { emptyResources } from '../harness/container-spec.js';
import { insertRow, withConnection } from '../harness/database.js';
import { IMAGE_ID as IMAGE_A, container, sandbox } from '../harness/records.js';

const IMAGE_B = `sha256:${'b'.repeat(64)}`;

function isForeignKeyError(err: unknown): boolean {
  return err instanceof Database.SqliteError && err.code === 'SQLITE_CONSTRAINT_FOREIGNKEY';
}

describe('Store containers', () => {
  let dir: string;
  let path: string;
  let store: Store;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-store-containers-'));
    path = join(dir, 'berth.db');
    store = Store.open(path);
    store.sandboxes.insert(sandbox());
  });

  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('round-trips every field through insert, get, transitions, list and delete', () => {
    // The fields no transition changes differ from the fixture's, so a column mapped wrong shows.
    const row = container({
      imageName: 'busybox@sha256:' + 'b'.repeat(64),
      imageId: IMAGE_B,
      createdAt: '1763793600123456790',
      logPath: '',
      bundleDir: '/run/berth/containers/other',
      cgroupsPath: '/kubepods/other',
    });
    store.containers.insert(row);
    assert.deepEqual(store.containers.get(row.id), row);

    // Every field a transition sets changes, each to a value distinct from the original.
    const user = { uid: 1000, gid: 1000, additionalGids: [] };
    const resources = { ...emptyResources(), memoryLimitBytes: 64 * 1024 * 1024 };
    const exit = {
      exitCode: 137,
      reason: 'OOMKilled',
      message: 'killed by the OOM killer',
      finishedAt: '1763793602000000002',
    };
    store.containers.userResolved(row.id, user);
    store.containers.processCreated(row.id, { pid: 4242, monitorPid: 4241 });
    store.containers.markCreated(row.id);
    store.containers.markRunning(row.id, '1763793601000000001');
    store.containers.updateResources(row.id, resources);
    store.containers.markExited(row.id, exit);
    const updated = store.containers.get(row.id);
    assert.deepEqual(updated, {
      ...row,
      ...exit,
      state: 'EXITED',
      step: 'created',
      spec: { ...row.spec, resources },
      startedAt: '1763793601000000001',
      pid: 0,
      monitorPid: 4241,
      user,
    });

    // ...and survives a reopen.
    store.close();
    store = Store.open(path);
    assert.deepEqual(store.containers.get(row.id), updated);

    assert.deepEqual(store.containers.list(), [updated]);
    assert.deepEqual(store.containers.listBySandbox('pod1'), [updated]);
    assert.equal(store.containers.delete(row.id), true);
    assert.equal(store.containers.delete(row.id), false);
    assert.equal(store.containers.get(row.id), undefined);
    assert.deepEqual(store.containers.list(), []);
  });

  it('keeps negative exit codes and 19-digit timestamps exactly', () => {
    const row = container({ exitCode: -1, finishedAt: '9223372036854775807' });
    store.containers.insert(row);
    assert.deepEqual(store.containers.get(row.id), row);
  });

  it('changes only the given fields, never the identity, even if a change carries it', () => {
    const row = container();
    store.containers.insert(row);
    store.sandboxes.insert(sandbox({ id: 'pod2', uid: 'uid-2' }));
    withConnection(path, (db) =>
      new Table(db, CONTAINER_TABLE, containerMapping).update(row.id, (current) => ({
        ...current,
        sandboxId: 'pod2',
        name: 'renamed',
        attempt: 7,
        step: 'create-bundle',
        bogus: 'column',
      })),
    );
    assert.deepEqual(store.containers.get(row.id), { ...row, step: 'create-bundle' });
  });

  it('throws NotFoundError when changing a missing id', () => {
    assert.throws(() => store.containers.markRunning('nope', '1'), NotFoundError);
  });

  it('refuses the same name and attempt twice in one sandbox, naming them and the holder', () => {
    store.containers.insert(container());
    assert.throws(
      () => store.containers.insert(container({ id: 'dup' })),
      (err: unknown) =>
        err instanceof AlreadyExistsError &&
        err.message === 'container "web" (attempt 0) already exists in pod sandbox pod1 as c0ffee01',
    );
    assert.equal(store.containers.get('dup'), undefined);

    // A restart (next attempt), another name, or another sandbox is a different container.
    store.sandboxes.insert(sandbox({ id: 'pod2', uid: 'uid-2' }));
    store.containers.insert(container({ id: 'c1', attempt: 1 }));
    store.containers.insert(container({ id: 'c2', name: 'sidecar' }));
    store.containers.insert(container({ id: 'c3', sandboxId: 'pod2' }));
    assert.equal(store.containers.list().length, 4);
  });

  it('refuses a duplicate id', () => {
    store.containers.insert(container());
    assert.throws(
      () => store.containers.insert(container({ name: 'other' })),
      (err: unknown) => err instanceof AlreadyExistsError && /c0ffee01 already exists/.test(err.message),
    );
  });

  it('refuses a container in an unknown sandbox', () => {
    assert.throws(
      () => store.containers.insert(container({ sandboxId: 'ghost' })),
      (err: unknown) => err instanceof NotFoundError && err.kind === 'sandbox' && err.id === 'ghost',
    );
    assert.deepEqual(store.containers.list(), []);
  });

  it('refuses to delete a sandbox that still has containers', () => {
    store.containers.insert(container());
    assert.throws(() => store.sandboxes.delete('pod1'), isForeignKeyError);
    assert.ok(store.sandboxes.get('pod1'));
    assert.equal(store.containers.delete('c0ffee01'), true);
    assert.equal(store.sandboxes.delete('pod1'), true);
  });

  it('rejects values the schema forbids', () => {
    const bad: Partial<Container>[] = [
      { id: '' },
      { attempt: -1 },
      { state: 'PAUSED' as Container['state'] },
      { imageId: 'sha256:abc' },
      { imageId: `sha256:${'A'.repeat(64)}` },
      { imageId: `sha512:${'a'.repeat(64)}` },
      { createdAt: '' },
      { startedAt: '01' },
      { finishedAt: '-5' },
      { finishedAt: '12345678901234567890' },
      { exitCode: 2 ** 31 },
      { pid: -1 },
      { monitorPid: -1 },
    ];
    for (const overrides of bad) {
      assert.throws(
        () => store.containers.insert(container({ id: 'bad', ...overrides })),
        /CHECK constraint failed/,
        JSON.stringify(overrides),
      );
    }
    // STRICT: text that is not a number is a type error rather than stored as text.
    assert.throws(
      () => store.containers.insert(container({ id: 'bad', pid: 'five' as unknown as number })),
      /cannot store TEXT value in INTEGER column/,
    );
    // No container the repository takes has JSON columns that are not JSON; an edit might.
    const record = containerMapping.toRecord(container({ id: 'bad' }));
    for (const json of [{ config_json: '{not json' }, { user_json: '' }]) {
      assert.throws(
        () => withConnection(path, (db) => insertRow(db, 'containers', { ...record, ...json })),
        /CHECK constraint failed/,
        JSON.stringify(json),
      );
    }
    assert.deepEqual(store.containers.list(), []);
  });

  it('finds containers by id prefix, oldest first', () => {
    store.containers.insert(container({ id: 'abc123', name: 'a', createdAt: '2' }));
    store.containers.insert(container({ id: 'abd456', name: 'b', createdAt: '1' }));
    store.containers.insert(container({ id: 'xyz789', name: 'c', createdAt: '3' }));
    const ids = (prefix: string): string[] => store.containers.findByIdPrefix(prefix).map((row) => row.id);
    assert.deepEqual(ids('ab'), ['abd456', 'abc123']);
    assert.deepEqual(ids('abc'), ['abc123']);
    assert.deepEqual(ids('abc123'), ['abc123']);
    assert.deepEqual(ids('abc1234'), []);
    assert.deepEqual(ids('ABC'), []);
    assert.deepEqual(ids('%'), []);
    assert.deepEqual(ids('_'), []);
    assert.deepEqual(ids('*'), []);
    assert.deepEqual(ids(''), []);
  });

  it('lists in numeric created_at order, per sandbox too', () => {
    store.sandboxes.insert(sandbox({ id: 'pod2', uid: 'uid-2' }));
    store.containers.insert(container({ id: 'c', name: 'c', createdAt: '1763793600123456789' }));
    store.containers.insert(container({ id: 'a', name: 'a', createdAt: '1000' }));
    store.containers.insert(container({ id: 'b', name: 'b', createdAt: '999', sandboxId: 'pod2' }));
    // A journal row that has no creation time yet sorts first; ties fall back to the id.
    store.containers.insert(container({ id: 'e', name: 'e', createdAt: '0' }));
    store.containers.insert(container({ id: 'd', name: 'd', createdAt: '0' }));
    const ids = (rows: Container[]): string[] => rows.map((row) => row.id);
    assert.deepEqual(ids(store.containers.list()), ['d', 'e', 'b', 'a', 'c']);
    assert.deepEqual(ids(store.containers.listBySandbox('pod1')), ['d', 'e', 'a', 'c']);
    assert.deepEqual(ids(store.containers.listBySandbox('pod2')), ['b']);
    assert.deepEqual(store.containers.listBySandbox('ghost'), []);
  });

  it('hands out each container parsed once and frozen, until a transition or delete changes it', () => {
    store.containers.insert(container({ state: 'CREATED' }));
    const first = store.containers.get('c0ffee01');
    assert.ok(first);
    assert.equal(store.containers.get('c0ffee01'), first, 'parsed again');
    assert.equal(store.containers.list()[0], first, 'list parsed it again');
    assert.ok(Object.isFrozen(first) && Object.isFrozen(first.spec.labels), 'a shared value is mutable');
    assert.throws(() => {
      first.spec.labels.added = 'x';
    }, TypeError);

    const running = store.containers.markRunning('c0ffee01', '1763793601000000001');
    assert.equal(store.containers.get('c0ffee01')?.state, 'RUNNING');
    assert.deepEqual(store.containers.get('c0ffee01'), running);
    assert.equal(first.state, 'CREATED', 'a value handed out changed under its holder');

    store.containers.insert(container({ id: 'c2', name: 'two', createdAt: '1' }));
    assert.deepEqual(
      store.containers.list().map((row) => row.id),
      ['c2', 'c0ffee01'],
    );
    store.containers.delete('c0ffee01');
    assert.equal(store.containers.get('c0ffee01'), undefined);
    assert.deepEqual(
      store.containers.list().map((row) => row.id),
      ['c2'],
    );
  });

  it('sees what another connection wrote: nothing it kept is stale', () => {
    store.containers.insert(container({ state: 'CREATED' }));
    assert.equal(store.containers.get('c0ffee01')?.message, '');
    assert.equal(store.containers.list().length, 1);
    withConnection(path, (db) => {
      db.prepare(`UPDATE containers SET message = 'edited' WHERE id = 'c0ffee01'`).run();
      insertRow(
        db,
        'containers',
        containerMapping.toRecord(container({ id: 'c2', name: 'two', createdAt: '1' })),
      );
    });
    assert.equal(store.containers.get('c0ffee01')?.message, 'edited');
    assert.deepEqual(
      store.containers.list().map((row) => row.id),
      ['c2', 'c0ffee01'],
    );
    withConnection(path, (db) => db.prepare(`DELETE FROM containers WHERE id = 'c2'`).run());
    assert.equal(store.containers.get('c2'), undefined);
    assert.deepEqual(
      store.containers.findByIdPrefix('c').map((row) => row.id),
      ['c0ffee01'],
    );
    assert.deepEqual(
      store.containers.listBySandbox('pod1').map((row) => row.id),
      ['c0ffee01'],
    );
  });

  it('reports which containers use an image', () => {
    store.containers.insert(container({ id: 'c2', name: 'two', createdAt: '20' }));
    store.containers.insert(container({ id: 'c1', name: 'one', createdAt: '10' }));
    store.containers.insert(container({ id: 'c3', name: 'three', imageId: IMAGE_B }));
    assert.deepEqual(store.containers.imageInUse(IMAGE_A), ['c1', 'c2']);
    assert.deepEqual(store.containers.imageInUse(IMAGE_B), ['c3']);
    assert.deepEqual(store.containers.imageInUse(`sha256:${'c'.repeat(64)}`), []);
    store.containers.delete('c3');
    assert.deepEqual(store.containers.imageInUse(IMAGE_B), []);
  });

  it('uses indexes for the per-sandbox, per-image and foreign key look-ups', () => {
    const raw = new Database(path, { readonly: true });
    try {
      const plan = (sql: string): string =>
        raw
          .prepare<[], { detail: string }>(`EXPLAIN QUERY PLAN ${sql}`)
          .all()
          .map((row) => row.detail)
          .join('; ');
      // The foreign key check on a sandbox delete runs this same look-up.
      assert.match(
        plan("SELECT id FROM containers WHERE sandbox_id = 'x'"),
        /USING INDEX containers_metadata/,
      );
      assert.match(plan("SELECT id FROM containers WHERE image_id = 'x'"), /USING INDEX containers_image_id/);
    } finally {
      raw.close();
    }
  });

  it('lists 500 containers quickly', () => {
    const insertMany = (): void => {
      for (let i = 0; i < 500; i++) {
        store.containers.insert(
          container({ id: `id${String(i).padStart(4, '0')}`, name: `c${i}`, createdAt: String(1000 + i) }),
        );
      }
    };
    insertMany();
    store.containers.list(); // warm up
    const start = performance.now();
    const rows = store.containers.list();
    const elapsed = performance.now() - start;
    assert.equal(rows.length, 500);
    assert.equal(rows[0]?.id, 'id0000');
    assert.equal(rows[499]?.id, 'id0499');
    // A bound for something pathological (seconds), not a speed target: a few milliseconds on a
    // quiet machine, tens on one whose cores are busy with something else.
    assert.ok(elapsed < 1_000, `list() took ${elapsed.toFixed(1)} ms`);
  });
});

describe('Store containers migration', () => {
  let dir: string;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-store-containers-'));
  });

  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('upgrades a version 2 database, keeping its sandboxes', () => {
    const path = join(dir, 'berth.db');
    const row = sandbox();
    const v2 = new Database(path);
    try {
      assert.deepEqual(migrate(v2, migrations.slice(0, 2)), { from: 0, to: 2 });
      // Version 2 predates the infra column (migration 4), which defaults to the infra every pod then
      // ran, the spec version (migration 5), which defaults to the shape berth then wrote, and the
      // pod cgroup and resources (migration 6), none for the pods of then, and the infra's start
      // time and the reason (migration 8), neither recorded then.
      const {
        infra: _infra,
        spec_version: _version,
        pod_cgroup: _cgroup,
        resources_json: _asked,
        infra_start_time: _started,
        reason: _reason,
        ...v2Record
      } = sandboxMapping.toRecord(row);
      insertRow(v2, 'sandboxes', v2Record);
    } finally {
      v2.close();
    }

    const store = Store.open(path);
    try {
      assert.deepEqual(store.sandboxes.get(row.id), row);
      store.containers.insert(container());
      assert.equal(store.containers.get('c0ffee01')?.sandboxId, row.id);
    } finally {
      store.close();
    }

    const raw = new Database(path, { readonly: true });
    try {
      assert.equal(raw.pragma('user_version', { simple: true }), migrations.length);
    } finally {
      raw.close();
    }
  });
});
