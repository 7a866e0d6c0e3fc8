import Database from 'better-sqlite3';

import { AlreadyExistsError, NotFoundError } from '../errors.js';
import {
  CONTAINER_COLUMNS,
  fromContainerRecord,
  toContainerRecord,
  type ContainerRecord,
} from './container-record.js';
import type { ContainerPatch, ContainerRow } from './types.js';

const COLUMNS = CONTAINER_COLUMNS.join(', ');
/** Numeric order of the canonical decimal created_at (the schema forbids leading zeros). */
const BY_CREATION = 'ORDER BY length(created_at), created_at, id';
/** The row's identity: never rewritten by an update. */
const FIXED_COLUMNS: ReadonlySet<string> = new Set(['id', 'sandbox_id', 'name', 'attempt']);

interface Statements {
  insert: Database.Statement<[ContainerRecord]>;
  update: Database.Statement<[ContainerRecord]>;
  get: Database.Statement<[string], ContainerRecord>;
  idByMetadata: Database.Statement<[string, string, number], { id: string }>;
  byIdPrefix: Database.Statement<[{ prefix: string }], ContainerRecord>;
  bySandbox: Database.Statement<[string], ContainerRecord>;
  list: Database.Statement<[], ContainerRecord>;
  delete: Database.Statement<[string]>;
  idsByImage: Database.Statement<[string], { id: string }>;
}

/**
 * Containers in the daemon's database, sharing Store's connection. Synchronous like Store; an
 * update reads, merges and writes in one IMMEDIATE transaction.
 */
export class ContainerRepo {
  private readonly statements: Statements;
  private readonly updateInTransaction: Database.Transaction<(id: string, patch: ContainerPatch) => void>;

  constructor(db: Database.Database) {
    this.statements = prepareStatements(db);
    this.updateInTransaction = db.transaction((id: string, patch: ContainerPatch): void => {
      const current = this.statements.get.get(id);
      if (current === undefined) throw new NotFoundError('container', id);
      this.statements.update.run(toContainerRecord(applyPatch(fromContainerRecord(current), patch)));
    });
  }

  /**
   * Throws AlreadyExistsError if the id or the (sandbox, name, attempt) is taken, and
   * NotFoundError if the sandbox has no row.
   */
  insert(row: ContainerRow): void {
    try {
      this.statements.insert.run(toContainerRecord(row));
    } catch (err) {
      if (!(err instanceof Database.SqliteError)) throw err;
      if (err.code === 'SQLITE_CONSTRAINT_PRIMARYKEY') {
        throw new AlreadyExistsError(`container ${row.id} already exists`);
      }
      if (err.code === 'SQLITE_CONSTRAINT_UNIQUE') throw this.metadataTaken(row);
      if (err.code === 'SQLITE_CONSTRAINT_FOREIGNKEY') throw new NotFoundError('sandbox', row.sandboxId);
      throw err;
    }
  }

  /** Changes only the fields present (and not undefined) in `patch`. Throws NotFoundError for an unknown id. */
  update(id: string, patch: ContainerPatch): void {
    this.updateInTransaction.immediate(id, patch);
  }

  get(id: string): ContainerRow | undefined {
    const record = this.statements.get.get(id);
    return record === undefined ? undefined : fromContainerRecord(record);
  }

  /**
   * Containers whose id starts with `prefix` (crictl shows and accepts truncated ids), oldest
   * first; the caller decides what more than one match means. An empty prefix matches nothing.
   */
  findByIdPrefix(prefix: string): ContainerRow[] {
    if (prefix === '') return [];
    return this.statements.byIdPrefix.all({ prefix }).map(fromContainerRecord);
  }

  /** Oldest first. */
  listBySandbox(sandboxId: string): ContainerRow[] {
    return this.statements.bySandbox.all(sandboxId).map(fromContainerRecord);
  }

  /** Oldest first. */
  list(): ContainerRow[] {
    return this.statements.list.all().map(fromContainerRecord);
  }

  /** Returns whether a row was deleted; deleting an unknown id is not an error (RemoveContainer is idempotent). */
  delete(id: string): boolean {
    return this.statements.delete.run(id).changes > 0;
  }

  /** Ids of the containers made from image `imageId`, oldest first; empty when it is unused. */
  imageInUse(imageId: string): string[] {
    return this.statements.idsByImage.all(imageId).map((record) => record.id);
  }

  private metadataTaken(row: ContainerRow): AlreadyExistsError {
    const existing = this.statements.idByMetadata.get(row.sandboxId, row.name, row.attempt)?.id;
    return new AlreadyExistsError(
      `container ${JSON.stringify(row.name)} (attempt ${row.attempt}) already exists in pod sandbox ` +
        `${row.sandboxId}${existing === undefined ? '' : ` as ${existing}`}`,
    );
  }
}

function prepareStatements(db: Database.Database): Statements {
  const params = CONTAINER_COLUMNS.map((column) => `@${column}`).join(', ');
  // Leaving the identity out of SET also spares SQLite the foreign key check on every update.
  const assignments = CONTAINER_COLUMNS.filter((column) => !FIXED_COLUMNS.has(column))
    .map((column) => `${column} = @${column}`)
    .join(', ');
  return {
    insert: db.prepare<[ContainerRecord]>(`INSERT INTO containers (${COLUMNS}) VALUES (${params})`),
    update: db.prepare<[ContainerRecord]>(`UPDATE containers SET ${assignments} WHERE id = @id`),
    get: db.prepare<[string], ContainerRecord>(`SELECT ${COLUMNS} FROM containers WHERE id = ?`),
    idByMetadata: db.prepare<[string, string, number], { id: string }>(
      'SELECT id FROM containers WHERE sandbox_id = ? AND name = ? AND attempt = ?',
    ),
    // substr rather than LIKE/GLOB: no wildcard escaping, and case-sensitive like the ids.
    byIdPrefix: db.prepare<[{ prefix: string }], ContainerRecord>(
      `SELECT ${COLUMNS} FROM containers WHERE substr(id, 1, length(@prefix)) = @prefix ${BY_CREATION}`,
    ),
    bySandbox: db.prepare<[string], ContainerRecord>(
      `SELECT ${COLUMNS} FROM containers WHERE sandbox_id = ? ${BY_CREATION}`,
    ),
    list: db.prepare<[], ContainerRecord>(`SELECT ${COLUMNS} FROM containers ${BY_CREATION}`),
    delete: db.prepare<[string]>('DELETE FROM containers WHERE id = ?'),
    idsByImage: db.prepare<[string], { id: string }>(
      `SELECT id FROM containers WHERE image_id = ? ${BY_CREATION}`,
    ),
  };
}

/** Copies the defined fields of `patch` over `row`; an explicit undefined means "leave as is". */
function applyPatch(row: ContainerRow, patch: ContainerPatch): ContainerRow {
  const next: ContainerRow = { ...row };
  for (const key of Object.keys(patch)) {
    if (isPatchKey(key)) copyField(next, patch, key);
  }
  return next;
}

function copyField<K extends keyof ContainerPatch>(row: ContainerRow, patch: ContainerPatch, key: K): void {
  const value = patch[key];
  if (value !== undefined) row[key] = value;
}

/** A Record rather than a list so that a field added to ContainerPatch fails to compile until listed. */
const PATCH_KEYS: Record<keyof ContainerPatch, true> = {
  state: true,
  step: true,
  configJson: true,
  imageName: true,
  imageId: true,
  createdAt: true,
  startedAt: true,
  finishedAt: true,
  exitCode: true,
  reason: true,
  message: true,
  pid: true,
  monitorPid: true,
  logPath: true,
  bundleDir: true,
  cgroupsPath: true,
  userJson: true,
};

/** Drops the identity fields (id, sandbox, name, attempt) and stray keys a cast may have smuggled in. */
function isPatchKey(key: string): key is keyof ContainerPatch {
  return Object.hasOwn(PATCH_KEYS, key);
}
