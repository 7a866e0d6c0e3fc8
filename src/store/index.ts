import { closeSync, constants, fchmodSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';

import Database from 'better-sqlite3';

import { migrate } from '../../state/migrate.js';
import { chmodExisting, PRIVATE_DIR, PRIVATE_FILE } from '../file-modes.js';
import { ContainerRepo } from './containers.js';
import { ImageRepo } from './images.js';
import { SandboxRepo } from './sandboxes.js';

export { ContainerRepo, type ContainerProcess } from './containers.js';
export { ImageRepo } from './images.js';
export { SandboxRepo, type NetworkUp } from './sandboxes.js';
export { SchemaTooNewError } from '../../state/migrate.js';

/** How long a statement waits for another connection's lock (e.g. an operator's sqlite3 shell). */
const BUSY_TIMEOUT_MS = 5_000;

/**
 * The daemon's persistent state: one SQLite connection and a repository per kind of record. All
 * access is synchronous: better-sqlite3 runs each statement on the calling thread, so no two store
 * calls interleave within the process.
 */
export class Store {
  /** Pod sandboxes, typed, changed by named transitions. */
  readonly sandboxes: SandboxRepo;
  /** Containers, typed, changed by named transitions. */
  readonly containers: ContainerRepo;
  /** Images, their names and their layers. */
  readonly images: ImageRepo;

  private constructor(private readonly db: Database.Database) {
    this.sandboxes = new SandboxRepo(db);
    this.containers = new ContainerRepo(db);
    this.images = new ImageRepo(db);
  }

  /** Opens (creating if needed) the database at `path` and brings its schema up to date. */
  static open(path: string): Store {
    mkdirSync(dirname(path), { recursive: true, mode: PRIVATE_DIR });
    makePrivate(path);
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
}

/**
 * The database holds every container's config, env secrets included: no other user may read it.
 * SQLite creates the -wal and -shm files with the database file's mode, so the file is made 0600
 * before SQLite first opens it; an older berth's 0644 files, and those a crash left, are fixed.
 */
function makePrivate(path: string): void {
  const fd = openSync(path, constants.O_RDWR | constants.O_CREAT | constants.O_NOFOLLOW, PRIVATE_FILE);
  try {
    fchmodSync(fd, PRIVATE_FILE);
  } finally {
    closeSync(fd);
  }
  chmodExisting([`${path}-wal`, `${path}-shm`], PRIVATE_FILE);
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
