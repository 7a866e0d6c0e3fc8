import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

import Database from 'better-sqlite3';

import { migrate } from '../../state/migrate.js';
import { AlreadyExistsError, NotFoundError } from '../errors.js';
import { ContainerRepo } from './containers.js';
import { ImageRepo } from './images.js';
import { SANDBOX_COLUMNS, fromRecord, toRecord, type SandboxRecord } from './sandbox-record.js';
import type { SandboxPatch, SandboxRow } from './types.js';

export type { NetworkState, SandboxPatch, SandboxRow, SandboxState } from './types.js';
export type { ContainerPatch, ContainerRow, ContainerState } from './types.js';
export { ContainerRepo } from './containers.js';
export { ImageRepo } from './images.js';
export { SchemaTooNewError } from '../../state/migrate.js';

/** How long a statement waits for another connection's lock (e.g. an operator's sqlite3 shell). */
const BUSY_TIMEOUT_MS = 5_000;

const COLUMNS = SANDBOX_COLUMNS.join(', ');
/** Numeric order of the canonical decimal created_at (the schema forbids leading zeros). */
const BY_CREATION = 'ORDER BY length(created_at), created_at, id';

interface Statements {
  insert: Database.Statement<[SandboxRecord]>;
  update: Database.Statement<[SandboxRecord]>;
  get: Database.Statement<[string], SandboxRecord>;
  byMetadata: Database.Statement<[string, string, string, number], SandboxRecord>;
  byIdPrefix: Database.Statement<[{ prefix: string }], SandboxRecord>;
  list: Database.Statement<[], SandboxRecord>;
  delete: Database.Statement<[string]>;
}

/**
 * The daemon's persistent state. All access is synchronous: better-sqlite3 runs each statement
 * on the calling thread, so no two store calls interleave within the process.
 */
export class Store {
  /** Images, their names and their layers; same database and connection. */
  readonly images: ImageRepo;
  /** Containers; same database and connection. */
  readonly containers: ContainerRepo;
  private readonly statements: Statements;
  private readonly updateInTransaction: Database.Transaction<(id: string, patch: SandboxPatch) => void>;

  private constructor(private readonly db: Database.Database) {
    this.statements = prepareStatements(db);
    this.images = new ImageRepo(db);
    this.containers = new ContainerRepo(db);
    // Read, merge and write under one lock so a concurrent writer cannot slip in between.
    this.updateInTransaction = db.transaction((id: string, patch: SandboxPatch): void => {
      const current = this.statements.get.get(id);
      if (current === undefined) throw new NotFoundError('sandbox', id);
      this.statements.update.run(toRecord(applyPatch(fromRecord(current), patch)));
    });
  }

  /** Opens (creating if needed) the database at `path` and brings its schema up to date. */
  static open(path: string): Store {
    // 0711 as containerd does for its root: others may traverse to sandbox files, not list.
    mkdirSync(dirname(path), { recursive: true, mode: 0o711 });
    const db = new Database(path, { timeout: BUSY_TIMEOUT_MS });
    try {
      configure(db);
      migrate(db);
      return new Store(db);
    } catch (err) {
      db.close();
      throw err;
    }
  }

  close(): void {
    if (this.db.open) this.db.close();
  }

  /** Throws AlreadyExistsError if the id or the (namespace, name, uid, attempt) is taken. */
  insertSandbox(row: SandboxRow): void {
    try {
      this.statements.insert.run(toRecord(row));
    } catch (err) {
      if (isUniqueViolation(err)) {
        throw new AlreadyExistsError(
          `sandbox ${row.id} (${row.namespace}/${row.name}, uid ${row.uid}, attempt ${row.attempt}) already exists`,
        );
      }
      throw err;
    }
  }

  /** Changes only the fields present (and not undefined) in `patch`. Throws NotFoundError for an unknown id. */
  updateSandbox(id: string, patch: SandboxPatch): void {
    this.updateInTransaction.immediate(id, patch);
  }

  getSandbox(id: string): SandboxRow | undefined {
    const record = this.statements.get.get(id);
    return record === undefined ? undefined : fromRecord(record);
  }

  findSandboxByMetadata(
    namespace: string,
    name: string,
    uid: string,
    attempt: number,
  ): SandboxRow | undefined {
    const record = this.statements.byMetadata.get(namespace, name, uid, attempt);
    return record === undefined ? undefined : fromRecord(record);
  }

  /**
   * Sandboxes whose id starts with `prefix` (crictl shows and accepts truncated ids); the caller
   * decides what more than one match means. An empty prefix matches nothing, so a blank id in a
   * request can never resolve to, say, the only sandbox on the node.
   */
  findSandboxesByIdPrefix(prefix: string): SandboxRow[] {
    if (prefix === '') return [];
    return this.statements.byIdPrefix.all({ prefix }).map(fromRecord);
  }

  /** Oldest first. */
  listSandboxes(): SandboxRow[] {
    return this.statements.list.all().map(fromRecord);
  }

  /** Returns whether a row was deleted; deleting an unknown id is not an error (RemovePodSandbox is idempotent). */
  deleteSandbox(id: string): boolean {
    return this.statements.delete.run(id).changes > 0;
  }
}

function configure(db: Database.Database): void {
  // WAL: readers never block the writer, and a commit is one append to the log.
  const mode = db.pragma('journal_mode = WAL', { simple: true });
  if (mode !== 'wal')
    throw new Error(`database ${db.name}: could not enable WAL (journal_mode is ${String(mode)})`);
  // In WAL mode NORMAL skips the fsync at commit, so the last transactions can vanish on power
  // loss. The store is our crash journal (CREATING rows, ADDING network state): a commit that
  // returned must survive, so FULL fsyncs the WAL on every commit.
  db.pragma('synchronous = FULL');
  db.pragma('foreign_keys = ON');
}

function prepareStatements(db: Database.Database): Statements {
  const params = SANDBOX_COLUMNS.map((column) => `@${column}`).join(', ');
  const assignments = SANDBOX_COLUMNS.filter((column) => column !== 'id')
    .map((column) => `${column} = @${column}`)
    .join(', ');
  return {
    insert: db.prepare<[SandboxRecord]>(`INSERT INTO sandboxes (${COLUMNS}) VALUES (${params})`),
    update: db.prepare<[SandboxRecord]>(`UPDATE sandboxes SET ${assignments} WHERE id = @id`),
    get: db.prepare<[string], SandboxRecord>(`SELECT ${COLUMNS} FROM sandboxes WHERE id = ?`),
    byMetadata: db.prepare<[string, string, string, number], SandboxRecord>(
      `SELECT ${COLUMNS} FROM sandboxes WHERE namespace = ? AND name = ? AND uid = ? AND attempt = ?`,
    ),
    // substr rather than LIKE/GLOB: no wildcard escaping, and case-sensitive like the ids.
    byIdPrefix: db.prepare<[{ prefix: string }], SandboxRecord>(
      `SELECT ${COLUMNS} FROM sandboxes WHERE substr(id, 1, length(@prefix)) = @prefix ${BY_CREATION}`,
    ),
    list: db.prepare<[], SandboxRecord>(`SELECT ${COLUMNS} FROM sandboxes ${BY_CREATION}`),
    delete: db.prepare<[string]>('DELETE FROM sandboxes WHERE id = ?'),
  };
}

/** Copies the defined fields of `patch` over `row`; an explicit undefined means "leave as is". */
function applyPatch(row: SandboxRow, patch: SandboxPatch): SandboxRow {
  const next: SandboxRow = { ...row };
  for (const key of Object.keys(patch)) {
    if (isPatchKey(key)) copyField(next, patch, key);
  }
  return next;
}

function copyField<K extends keyof SandboxPatch>(row: SandboxRow, patch: SandboxPatch, key: K): void {
  const value = patch[key];
  if (value !== undefined) row[key] = value;
}

/** A Record rather than a list so that a field added to SandboxRow fails to compile until listed. */
const PATCH_KEYS: Record<keyof SandboxPatch, true> = {
  name: true,
  namespace: true,
  uid: true,
  attempt: true,
  state: true,
  step: true,
  configJson: true,
  runtimeHandler: true,
  hostNetwork: true,
  netnsPath: true,
  networkState: true,
  cniConfigJson: true,
  cniResultJson: true,
  ip: true,
  additionalIps: true,
  createdAt: true,
  pid: true,
  cgroupParent: true,
  sandboxDir: true,
};

/** Also drops `id` and stray keys a cast may have smuggled in: the id never changes. */
function isPatchKey(key: string): key is keyof SandboxPatch {
  return Object.hasOwn(PATCH_KEYS, key);
}

function isUniqueViolation(err: unknown): boolean {
  return (
    err instanceof Database.SqliteError &&
    (err.code === 'SQLITE_CONSTRAINT_UNIQUE' || err.code === 'SQLITE_CONSTRAINT_PRIMARYKEY')
  );
}
