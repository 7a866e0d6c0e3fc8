/**
 * What every keyed table of the store does the same way: insert with its constraint errors told
 * apart, look-up by id and by id prefix, listing oldest first, guarded changes of some columns,
 * read-change-write under one IMMEDIATE transaction, delete. A repository gives the table's shape
 * and how its values map to records; the SQL for these lives here only.
 */
import Database from 'better-sqlite3';

import { NotFoundError } from '../errors.js';
import { KeptValues, WrittenOnce } from './kept.js';

/**
 * Numeric order of the canonical decimal created_at (the schema forbids leading zeros), then
 * `key`: rows created in the same nanosecond still come in one stable order.
 */
export function creationOrder(key = 'id'): string {
  return `ORDER BY length(created_at), created_at, ${key}`;
}

/**
 * `column`, from its character `from` (1-based), starts with the bound parameter `param`. substr
 * rather than LIKE/GLOB: no wildcard escaping, and case-sensitive like the ids.
 */
export function startsWith(column: string, param: string, from = 1): string {
  return `substr(${column}, ${from}, length(@${param})) = @${param}`;
}

/** The constraint an insert broke, for the repository to say what it means. */
export type Conflict = 'primary key' | 'unique' | 'foreign key';

/** A keyed table as its repository describes it. */
export interface TableShape<Rec> {
  /** Its SQL name. */
  readonly name: string;
  /** How errors name one row: `sandbox`, `container`. */
  readonly noun: string;
  /** Every column; every statement uses this one list, so SELECTs and INSERTs agree. */
  readonly columns: readonly (keyof Rec & string)[];
  /** Besides id, the columns an update never rewrites: the row's identity. */
  readonly identity: readonly (keyof Rec & string)[];
  /** What a broken constraint on insert means; undefined keeps SQLite's own error. */
  conflict(conflict: Conflict, record: Rec, db: Database.Database): Error | undefined;
}

/** How a repository's values become records (exactly as better-sqlite3 binds and reads them) and back. */
export interface Mapping<Rec, T> {
  toRecord(value: T): Rec;
  /** `specs`: where the table keeps the specs it decoded, written once; absent, each is decoded. */
  fromRecord(record: Rec, specs?: WrittenOnce): T;
}

/**
 * A change of some columns of row `id`, made only where the row satisfies the change's guard:
 * returns the row's value as it now is, or undefined when no row `id` satisfied it (nothing changed).
 */
export type Change<Rec, T> = (id: string, values: Partial<Rec>) => T | undefined;

/** How a table keeps what it reads. */
export interface TableOptions {
  /**
   * Keep every value read, parsed and frozen, until this connection changes its row or another
   * connection writes the database: listings then read ids only and parse no row twice. Values
   * handed out are shared, hence frozen. Not for a table read inside an outer transaction that may
   * roll back: what it read there would be kept.
   */
  readonly keepValues?: boolean;
}

interface Statements<Rec> {
  insert: Database.Statement<[Rec]>;
  update: Database.Statement<[Rec]>;
  get: Database.Statement<[string], Rec>;
  byIdPrefix: Database.Statement<[{ prefix: string }], Rec>;
  list: Database.Statement<[], Rec>;
  delete: Database.Statement<[string]>;
  ids: Database.Statement<[], string>;
  idsByPrefix: Database.Statement<[{ prefix: string }], string>;
}

/**
 * One keyed table seen through one mapping. Synchronous like the rest of the store: better-sqlite3
 * runs each statement on the calling thread, so no two calls interleave within the process.
 */
export class Table<Rec extends { id: string }, T> {
  private readonly statements: Statements<Rec>;
  private readonly updateInTransaction: Database.Transaction<(id: string, change: (current: T) => T) => T>;
  private readonly kept: KeptValues<T> | null;
  private readonly specs = new WrittenOnce();

  constructor(
    private readonly db: Database.Database,
    private readonly shape: TableShape<Rec>,
    private readonly mapping: Mapping<Rec, T>,
    options: TableOptions = {},
  ) {
    this.statements = prepareStatements(db, shape);
    this.kept = options.keepValues ? new KeptValues(db) : null;
    // Read, change and write under one lock so a concurrent writer cannot slip in between.
    this.updateInTransaction = db.transaction((id: string, change: (current: T) => T): T => {
      const current = this.statements.get.get(id);
      if (current === undefined) throw new NotFoundError(shape.noun, id);
      const next = change(mapping.fromRecord(current, this.specs));
      this.statements.update.run(mapping.toRecord(next));
      return next;
    });
  }

  /** Throws what the shape makes of a broken uniqueness or reference. */
  insert(value: T): void {
    const record = this.mapping.toRecord(value);
    try {
      this.statements.insert.run(record);
    } catch (err) {
      const conflict = conflictOf(err);
      throw (conflict && this.shape.conflict(conflict, record, this.db)) ?? err;
    } finally {
      this.kept?.forget(record.id);
    }
  }

  /**
   * The change of `columns` (never the identity) where `guard` holds, as one UPDATE statement: one
   * commit, and no read of the row before it. `guard` is SQL over the row's columns and the new
   * values (`@column`). The row comes back from the statement itself (RETURNING), its spec decoded
   * only if it changed.
   */
  change(columns: readonly (keyof Rec & string)[], guard: string): Change<Rec, T> {
    const fixed = new Set<string>(['id', ...this.shape.identity]);
    const refused = columns.filter((column) => fixed.has(column));
    if (refused.length > 0) throw new Error(`${this.shape.name}: a change may not set ${refused.join(', ')}`);
    const assignments = columns.map((column) => `${column} = @${column}`).join(', ');
    const update = this.db.prepare<[Partial<Rec>], Rec>(
      `UPDATE ${this.shape.name} SET ${assignments} WHERE id = @id AND (${guard}) ` +
        `RETURNING ${this.shape.columns.join(', ')}`,
    );
    return (id, values) => {
      let record: Rec | undefined;
      try {
        record = update.get({ ...values, id });
      } catch (err) {
        this.kept?.forget(id);
        throw err;
      }
      if (record === undefined) return undefined;
      const value = this.mapping.fromRecord(record, this.specs);
      this.kept?.replace(id, value);
      return value;
    };
  }

  get(id: string): T | undefined {
    this.kept?.checkVersion();
    return this.valueOf(id);
  }

  private valueOf(id: string): T | undefined {
    return this.kept ? this.kept.value(id, () => this.read(id)) : this.read(id);
  }

  private read(id: string): T | undefined {
    const record = this.statements.get.get(id);
    return record === undefined ? undefined : this.mapping.fromRecord(record, this.specs);
  }

  /** The values of rows `ids`, kept ones as they are; a row gone meanwhile is left out. */
  private values(kept: KeptValues<T>, ids: () => readonly string[]): T[] {
    kept.checkVersion();
    return ids().flatMap((id) => this.valueOf(id) ?? []);
  }

  /**
   * Rows whose id starts with `prefix` (crictl shows and accepts truncated ids), oldest first; the
   * caller decides what more than one match means. An empty prefix matches nothing, so a blank id
   * in a request can never resolve to, say, the only row there is.
   */
  findByIdPrefix(prefix: string): T[] {
    if (prefix === '') return [];
    if (this.kept) return this.values(this.kept, () => this.statements.idsByPrefix.all({ prefix }));
    return this.statements.byIdPrefix
      .all({ prefix })
      .map((record) => this.mapping.fromRecord(record, this.specs));
  }

  /** Oldest first. */
  list(): T[] {
    const kept = this.kept;
    if (kept) return this.values(kept, () => kept.order(() => this.statements.ids.all()));
    return this.statements.list.all().map((record) => this.mapping.fromRecord(record, this.specs));
  }

  /** A query for the rows where `condition` (SQL with `?` parameters) holds, oldest first. */
  where<P extends unknown[]>(condition: string): (...params: P) => T[] {
    const select = (columns: string): string =>
      `SELECT ${columns} FROM ${this.shape.name} WHERE ${condition} ${creationOrder()}`;
    const kept = this.kept;
    if (kept) {
      const ids = this.db.prepare<P, string>(select('id')).pluck();
      return (...params) => this.values(kept, () => ids.all(...params));
    }
    const statement = this.db.prepare<P, Rec>(select(this.shape.columns.join(', ')));
    return (...params) =>
      statement.all(...params).map((record) => this.mapping.fromRecord(record, this.specs));
  }

  /**
   * Replaces the row by `change(current)` in one IMMEDIATE transaction, and returns it; the
   * identity columns are never rewritten. Throws NotFoundError for an unknown id; whatever
   * `change` throws leaves the row as it was.
   */
  update(id: string, change: (current: T) => T): T {
    try {
      return this.updateInTransaction.immediate(id, change);
    } finally {
      // Read back when next asked: what was written is the record, not the value `change` made.
      this.kept?.forget(id);
    }
  }

  /** Returns whether a row was deleted; deleting an unknown id is not an error (CRI removes are idempotent). */
  delete(id: string): boolean {
    try {
      return this.statements.delete.run(id).changes > 0;
    } finally {
      this.kept?.forget(id);
      this.specs.forget(id);
    }
  }
}

function prepareStatements<Rec>(db: Database.Database, shape: TableShape<Rec>): Statements<Rec> {
  const columns = shape.columns.join(', ');
  const params = shape.columns.map((column) => `@${column}`).join(', ');
  const fixed = new Set<string>(['id', ...shape.identity]);
  // Leaving the identity out of SET also spares SQLite a foreign key check on every update.
  const assignments = shape.columns
    .filter((column) => !fixed.has(column))
    .map((column) => `${column} = @${column}`)
    .join(', ');
  const select = `SELECT ${columns} FROM ${shape.name}`;
  return {
    insert: db.prepare<[Rec]>(`INSERT INTO ${shape.name} (${columns}) VALUES (${params})`),
    update: db.prepare<[Rec]>(`UPDATE ${shape.name} SET ${assignments} WHERE id = @id`),
    get: db.prepare<[string], Rec>(`${select} WHERE id = ?`),
    byIdPrefix: db.prepare<[{ prefix: string }], Rec>(
      `${select} WHERE ${startsWith('id', 'prefix')} ${creationOrder()}`,
    ),
    list: db.prepare<[], Rec>(`${select} ${creationOrder()}`),
    delete: db.prepare<[string]>(`DELETE FROM ${shape.name} WHERE id = ?`),
    ids: db.prepare<[], string>(`SELECT id FROM ${shape.name} ${creationOrder()}`).pluck(),
    idsByPrefix: db
      .prepare<[{ prefix: string }], string>(
        `SELECT id FROM ${shape.name} WHERE ${startsWith('id', 'prefix')} ${creationOrder()}`,
      )
      .pluck(),
  };
}

function conflictOf(err: unknown): Conflict | undefined {
  if (!(err instanceof Database.SqliteError)) return undefined;
  switch (err.code) {
    case 'SQLITE_CONSTRAINT_PRIMARYKEY':
      return 'primary key';
    case 'SQLITE_CONSTRAINT_UNIQUE':
      return 'unique';
    case 'SQLITE_CONSTRAINT_FOREIGNKEY':
      return 'foreign key';
    default:
      return undefined;
  }
}
