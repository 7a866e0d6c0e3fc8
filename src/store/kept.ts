/**
 * What a table keeps of what it read, so that reads parse no row twice: whole values while they are
 * what the database holds (KeptValues), and the specs of rows, which are written once (WrittenOnce).
 */
import type Database from 'better-sqlite3';

/**
 * The values a table read, and its ids in listing order, for as long as they are what the database
 * holds: this connection's own writes replace or forget what they touch, and a write by any other
 * connection (an operator's sqlite3 shell, a test) changes SQLite's data_version, which forgets
 * everything.
 */
export class KeptValues<T> {
  private readonly byId = new Map<string, T>();
  private ordered: readonly string[] | null = null;
  private readonly dataVersion: Database.Statement<[], number>;
  private seenVersion = -1;

  constructor(db: Database.Database) {
    this.dataVersion = db.prepare<[], number>('PRAGMA data_version').pluck();
  }

  /** Call checkVersion first, once per look-up. */
  value(id: string, read: () => T | undefined): T | undefined {
    const kept = this.byId.get(id);
    if (kept !== undefined) return kept;
    const value = read();
    if (value !== undefined) this.byId.set(id, deepFreeze(value));
    return value;
  }

  /** The ids in listing order, as `read` gives them when nothing is kept. */
  order(read: () => string[]): readonly string[] {
    this.ordered ??= Object.freeze(read());
    return this.ordered;
  }

  /** `value` is what row `id` now holds, read back from the write that changed it; the order stays. */
  replace(id: string, value: T): void {
    this.byId.set(id, deepFreeze(value));
  }

  forget(id: string): void {
    this.byId.delete(id);
    this.ordered = null;
  }

  /** Forgets everything if another connection wrote the database since the last look-up. */
  checkVersion(): void {
    const version = this.dataVersion.get() ?? -1;
    if (version === this.seenVersion) return;
    this.seenVersion = version;
    this.byId.clear();
    this.ordered = null;
  }
}

/**
 * Each row's spec, parsed once: it is written at insert and never again, so a transition, which
 * reads its row back, need not parse it anew. Kept with the column values it was decoded from,
 * which are compared on every use: a row changed since (by hand, or a container's resources) is
 * decoded again. Values are shared between the records handed out, hence frozen.
 */
export class WrittenOnce {
  private readonly byId = new Map<string, { from: readonly unknown[]; value: unknown }>();

  value<V>(id: string, from: readonly unknown[], decode: () => V): V {
    const kept = this.byId.get(id);
    if (kept && kept.from.length === from.length && kept.from.every((part, i) => part === from[i])) {
      return kept.value as V;
    }
    const value = deepFreeze(decode());
    this.byId.set(id, { from, value });
    return value;
  }

  forget(id: string): void {
    this.byId.delete(id);
  }
}

function deepFreeze<V>(value: V): V {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}
