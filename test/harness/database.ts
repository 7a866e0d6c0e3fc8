/**
 * berthd's SQLite database as tests read it beside the daemon, or change it while the daemon is
 * down to leave what a crash at some point would have left.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';

/** Where a daemon with root dir `rootDir` keeps its database. */
export function databasePath(rootDir: string): string {
  return join(rootDir, 'berth.db');
}

/** The rows `sql` selects, read-only; throws when the daemon has not made its database. */
export function selectRows<Row>(rootDir: string, sql: string): Row[] {
  const db = new Database(databasePath(rootDir), { readonly: true, fileMustExist: true });
  try {
    return db.prepare<[], Row>(sql).all();
  } finally {
    db.close();
  }
}

/** Runs one changing statement; returns how many rows it changed. */
export function changeRows(rootDir: string, sql: string, ...params: string[]): number {
  const db = new Database(databasePath(rootDir), { fileMustExist: true });
  try {
    return db.prepare<string[]>(sql).run(...params).changes;
  } finally {
    db.close();
  }
}

/**
 * Inserts `row` as it stands, one column per key, past any repository: what an older berthd or a
 * hand edit may have left.
 */
export function insertRow<Row extends object>(db: Database.Database, table: string, row: Row): void {
  const columns = Object.keys(row);
  const params = columns.map((column) => `@${column}`);
  db.prepare<[Row]>(`INSERT INTO ${table} (${columns.join(', ')}) VALUES (${params.join(', ')})`).run(row);
}

/** Runs `use` on a connection of its own to the database file at `path`, beside any other. */
export function withConnection<T>(path: string, use: (db: Database.Database) => T): T {
  const db = new Database(path, { fileMustExist: true });
  try {
    return use(db);
  } finally {
    db.close();
  }
}
