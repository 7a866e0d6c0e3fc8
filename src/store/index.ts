import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

import Database from 'better-sqlite3';

import { migrate } from '../../state/migrate.js';
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
