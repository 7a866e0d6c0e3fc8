/** TOML as berthd's config files use it: parsed with errors that name the file, values named in errors. */
import { parse as parseToml, TomlError } from 'smol-toml';
import { errorMessage } from '../errors.js';
import { ConfigError } from './error.js';

export type TomlTable = { [key: string]: unknown };

/** Parses a whole document; `source` (the file) names it in a syntax error. */
export function parseTomlDocument(text: string, source: string): TomlTable {
  try {
    return parseToml(text, { integersAsBigInt: 'asNeeded' });
  } catch (err) {
    if (err instanceof TomlError) {
      const first = err.message.split('\n')[0] ?? err.message;
      throw new ConfigError(`${source}: invalid TOML at line ${err.line}, column ${err.column}: ${first}`);
    }
    throw new ConfigError(`${source}: invalid TOML: ${errorMessage(err)}`);
  }
}

/** How a value that has the wrong type is named in an error: "integer 5", "an array". */
export function describeTomlValue(value: unknown): string {
  if (Array.isArray(value)) return 'an array';
  if (value instanceof Date) return 'a date-time';
  if (typeof value === 'bigint') return `integer ${value}`;
  if (typeof value === 'number') return Number.isInteger(value) ? `integer ${value}` : `float ${value}`;
  if (typeof value === 'boolean') return `boolean ${value}`;
  if (typeof value === 'string') return `string "${value}"`;
  if (isTomlTable(value)) return 'a table';
  return typeof value;
}

export function isTomlTable(value: unknown): value is TomlTable {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Date);
}

/**
 * A TOML basic string. JSON's escapes are TOML's too, except that TOML also forbids a raw DEL.
 */
export function tomlString(text: string): string {
  return JSON.stringify(text).replaceAll('\x7f', '\\u007f');
}
