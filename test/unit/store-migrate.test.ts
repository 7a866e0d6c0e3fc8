import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import Database from 'better-sqlite3';

import { SchemaTooNewError, migrate } from '../../state/migrate.js';
import { migrations, type Migration } from '../../state/migrations.js';

const first: Migration = { version: 1, name: 'one', sql: 'CREATE TABLE one (x INTEGER)' };
const second: Migration = { version: 2, name: 'two', sql: 'CREATE TABLE two (y INTEGER)' };

function version(db: Database.Database): unknown {
  return db.pragma('user_version', { simple: true });
}

function tables(db: Database.Database): string[] {
  return db
    .prepare<[], { name: string }>("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
    .all()
    .map((row) => row.name);
}

describe('migrate', () => {
  it('applies the real migrations to an empty database', () => {
    const db = new Database(':memory:');
    assert.deepEqual(migrate(db), { from: 0, to: migrations.length });
    assert.ok(tables(db).includes('sandboxes'));
    db.close();
  });

  it('applies only the pending migrations', () => {
    const db = new Database(':memory:');
    assert.deepEqual(migrate(db, [first]), { from: 0, to: 1 });
    assert.deepEqual(migrate(db, [first, second]), { from: 1, to: 2 });
    assert.deepEqual(migrate(db, [first, second]), { from: 2, to: 2 });
    assert.deepEqual(tables(db), ['one', 'two']);
    db.close();
  });

  it('rolls a failing migration back entirely, version included', () => {
    const db = new Database(':memory:');
    const broken: Migration = {
      version: 2,
      name: 'broken',
      sql: 'CREATE TABLE half (z); SELECT nonsense FROM nowhere',
    };
    assert.throws(() => migrate(db, [first, broken]), /no such table/);
    assert.equal(version(db), 1);
    assert.deepEqual(tables(db), ['one']);
    db.close();
  });

  it('refuses a database newer than the known migrations', () => {
    const db = new Database(':memory:');
    db.pragma('user_version = 3');
    assert.throws(() => migrate(db, [first, second]), SchemaTooNewError);
    assert.equal(version(db), 3);
    db.close();
  });

  it('rejects a migration list with gaps', () => {
    const db = new Database(':memory:');
    assert.throws(() => migrate(db, [first, { ...second, version: 3 }]), /versions must be 1, 2, 3/);
    db.close();
  });

  it('restores foreign key enforcement afterwards', () => {
    const db = new Database(':memory:');
    db.pragma('foreign_keys = ON');
    migrate(db, [first]);
    assert.equal(db.pragma('foreign_keys', { simple: true }), 1);
    db.close();
  });
});
