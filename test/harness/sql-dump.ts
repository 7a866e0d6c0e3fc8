/**
 * A SQLite database as SQL text, and back: fixtures of databases made by an older berth are kept
 * as text, so a reviewer reads what a row held, and a test rebuilds the very file from it.
 */
import Database from 'better-sqlite3';

interface SchemaObject {
  type: string;
  name: string;
  sql: string | null;
}

/** Every table, index and row of `db`, with its user_version, as statements `loadDump` replays. */
export function dumpDatabase(db: Database.Database): string {
  const version = db.pragma('user_version', { simple: true });
  const lines = [`PRAGMA user_version = ${String(version)};`];
  const objects = db
    .prepare<[], SchemaObject>(
      "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND sql IS NOT NULL ORDER BY rowid",
    )
    .all();
  for (const { sql } of objects) lines.push(`${sql ?? ''};`);
  for (const { name } of objects.filter((object) => object.type === 'table')) {
    // Rowid order: parents (sandboxes) were created, and so are dumped, before children.
    for (const row of db.prepare<[], Record<string, unknown>>(`SELECT * FROM ${name} ORDER BY rowid`).all()) {
      const columns = Object.keys(row);
      const values = columns.map((column) => literal(row[column]));
      lines.push(`INSERT INTO ${name} (${columns.join(', ')}) VALUES (${values.join(', ')});`);
    }
  }
  return `${lines.join('\n')}\n`;
}

/** Makes the database file `path` (which must not exist) from `dump`. */
export function loadDump(path: string, dump: string): void {
  const db = new Database(path);
  try {
    db.exec(`BEGIN;\n${dump}\nCOMMIT;`);
  } finally {
    db.close();
  }
}

function literal(value: unknown): string {
  if (value === null) return 'NULL';
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  if (typeof value === 'string') return `'${value.replaceAll("'", "''")}'`;
  if (Buffer.isBuffer(value)) return `X'${value.toString('hex')}'`;
  throw new Error(`cannot dump a value of type ${typeof value}`);
}
