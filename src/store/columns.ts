/**
 * Reading typed values back out of columns. The schema's CHECKs hold most invariants already;
 * re-checking here costs little and turns a hand-edited or corrupted row into a clear error
 * naming its column instead of a wrong type downstream.
 */

/** The column a value came from, as the error for a bad one names it. */
export interface ColumnOf {
  /** How errors name the row: `sandbox`, `container`, `image`. */
  noun: string;
  id: string;
  column: string;
}

export function corrupt(where: ColumnOf, value: string): Error {
  return new Error(
    `${where.noun} ${where.id}: unexpected ${where.column} ${JSON.stringify(value)} in the database`,
  );
}

/** One of `values` (a lifecycle's states, say), or the error naming the column. */
export function parseEnum<T extends string>(values: readonly T[], value: string, where: ColumnOf): T {
  const known = values.find((candidate) => candidate === value);
  if (known === undefined) throw corrupt(where, value);
  return known;
}

export function parseJson(text: string, where: ColumnOf): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw corrupt(where, text);
  }
}

/**
 * A JSON column berthd wrote itself from a value of type T. The writer's type vouches for the
 * shape, which is too rich to re-check whole on every read; `looksRight` checks its outline so
 * that a row someone edited fails here. The one place a stored shape is taken on trust.
 */
export function decodeJson<T>(text: string, looksRight: (value: unknown) => boolean, where: ColumnOf): T {
  const value = parseJson(text, where);
  if (!looksRight(value)) throw corrupt(where, text);
  return value as T;
}

/** SQL NULL for null; JSON text otherwise. */
export function encodeNullableJson(value: object | null): string | null {
  return value === null ? null : JSON.stringify(value);
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The outline of a stored object that must at least carry an object under `key` (a spec's metadata). */
export function hasObjectField(value: unknown, key: string): boolean {
  return isObject(value) && isObject(value[key]);
}

export function isStringArray(value: unknown): value is string[] {
  return Array.isArray(value) && value.every((item) => typeof item === 'string');
}

export function isNumberArray(value: unknown): value is number[] {
  return Array.isArray(value) && value.every((item) => typeof item === 'number');
}
