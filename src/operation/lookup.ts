import { InvalidArgumentError, NotFoundError } from '../errors.js';

/** What a lookup needs of a repository. */
export interface IdPrefixRecords<T> {
  get(id: string): T | undefined;
  findByIdPrefix(prefix: string): T[];
}

/** The kind of record looked up, as its errors name it. */
export interface RecordKind<T> {
  /** The request field an ambiguous prefix is blamed on: `pod_sandbox_id`. */
  field: string;
  /** As NotFound names one: `pod sandbox`. */
  noun: string;
  /** As an ambiguous prefix counts them: `sandboxes`. */
  plural: string;
  /** Records that exist but are not there for clients yet (a container still being created). */
  hidden?: (record: T) => boolean;
}

/**
 * A record by exact id or unique prefix (crictl shows and accepts truncated ids). An ambiguous
 * prefix is the caller's mistake; a missing one is NotFound unless `allowMissing`.
 */
export function findByIdOrPrefix<T>(
  records: IdPrefixRecords<T>,
  idOrPrefix: string,
  kind: RecordKind<T>,
  allowMissing: true,
): T | undefined;
export function findByIdOrPrefix<T>(
  records: IdPrefixRecords<T>,
  idOrPrefix: string,
  kind: RecordKind<T>,
  allowMissing: false,
): T;
export function findByIdOrPrefix<T>(
  records: IdPrefixRecords<T>,
  idOrPrefix: string,
  kind: RecordKind<T>,
  allowMissing: boolean,
): T | undefined;
export function findByIdOrPrefix<T>(
  records: IdPrefixRecords<T>,
  idOrPrefix: string,
  kind: RecordKind<T>,
  allowMissing: boolean,
): T | undefined {
  const found = exactOrUniquePrefix(records, idOrPrefix, kind);
  if (found !== undefined || allowMissing) return found;
  throw new NotFoundError(kind.noun, idOrPrefix);
}

function exactOrUniquePrefix<T>(
  records: IdPrefixRecords<T>,
  idOrPrefix: string,
  kind: RecordKind<T>,
): T | undefined {
  const visible = (record: T): boolean => !kind.hidden?.(record);
  const exact = records.get(idOrPrefix);
  if (exact !== undefined) return visible(exact) ? exact : undefined;
  const matches = records.findByIdPrefix(idOrPrefix).filter(visible);
  if (matches.length > 1) {
    throw new InvalidArgumentError(kind.field, `"${idOrPrefix}" matches ${matches.length} ${kind.plural}`);
  }
  return matches[0];
}

/** CRI label selectors: every key present with exactly that value. */
export function matchesLabels(
  labels: Record<string, string>,
  selector: Record<string, string> | undefined,
): boolean {
  if (!selector) return true;
  return Object.entries(selector).every(([key, value]) => labels[key] === value);
}
