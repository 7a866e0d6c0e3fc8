import type Database from 'better-sqlite3';

import { migrations as knownMigrations, type Migration } from './migrations.js';

/** The database was written by a newer berthd; its schema may mean things this code cannot honour. */
export class SchemaTooNewError extends Error {
  override name = 'SchemaTooNewError';
  constructor(
    readonly path: string,
    readonly found: number,
    readonly known: number,
  ) {
    super(
      `database ${path} has schema version ${found}, but this berthd only knows up to ${known}; ` +
        'refusing to open it (it was written by a newer berthd — upgrade, or move the file aside)',
    );
  }
}

export interface MigrateResult {
  /** user_version before migrating. */
  from: number;
  /** user_version after migrating. */
  to: number;
}

/**
 * Brings `db` up to the newest schema. Each migration runs in its own IMMEDIATE transaction
 * together with its user_version bump, so a crash leaves the database at a clean version, and a
 * second process opening the same file waits instead of applying the same step twice.
 */
export function migrate(
  db: Database.Database,
  migrations: readonly Migration[] = knownMigrations,
): MigrateResult {
  checkSequence(migrations);
  const latest = migrations.at(-1)?.version ?? 0;
  const from = userVersion(db);
  if (from > latest) throw new SchemaTooNewError(db.name, from, latest);
  if (from === latest) return { from, to: from };

  // Table rebuilds in later migrations (the usual way to change a column in SQLite) would
  // cascade or fail with foreign keys enforced; SQLite's documented procedure is to switch them
  // off around the change and run foreign_key_check before committing. The pragma is a no-op
  // inside a transaction, hence out here.
  const foreignKeys = db.pragma('foreign_keys', { simple: true }) === 1;
  db.pragma('foreign_keys = OFF');
  try {
    const step = db.transaction((migration: Migration): void => {
      // Re-read under the write lock: another process may have migrated while we waited.
      const current = userVersion(db);
      if (current >= migration.version) return;
      if (current !== migration.version - 1) {
        throw new Error(`schema version ${current} cannot take migration ${describe(migration)}`);
      }
      db.exec(migration.sql);
      const violations = db.pragma('foreign_key_check');
      if (Array.isArray(violations) && violations.length > 0) {
        throw new Error(`migration ${describe(migration)} leaves foreign key violations`);
      }
      // PRAGMA takes no bound parameters; the version is an integer checked by checkSequence.
      db.pragma(`user_version = ${migration.version}`);
    });
    for (const migration of migrations) {
      if (migration.version > from) step.immediate(migration);
    }
  } finally {
    db.pragma(`foreign_keys = ${foreignKeys ? 'ON' : 'OFF'}`);
  }
  return { from, to: userVersion(db) };
}

function userVersion(db: Database.Database): number {
  const version = db.pragma('user_version', { simple: true });
  if (typeof version !== 'number') throw new Error(`PRAGMA user_version returned ${String(version)}`);
  return version;
}

/** A gap or reordering would make user_version ambiguous, so it is a programming error. */
function checkSequence(migrations: readonly Migration[]): void {
  migrations.forEach((migration, index) => {
    if (migration.version !== index + 1) {
      throw new Error(
        `migration ${describe(migration)} is at position ${index + 1}; versions must be 1, 2, 3, …`,
      );
    }
  });
}

function describe(migration: Migration): string {
  return `${migration.version} (${migration.name})`;
}
