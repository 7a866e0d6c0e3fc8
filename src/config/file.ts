/** The config file: read with care (berthd runs as root), then every key checked against the table. */
import { closeSync, fstatSync, openSync, readFileSync } from 'node:fs';
import { errorMessage } from '../errors.js';
import { ConfigError } from './error.js';
import { SETTINGS, TOML_LAYOUT, type BerthConfig, type Field } from './settings.js';
import { describeTomlValue, isTomlTable, parseTomlDocument } from './toml.js';

const TOP_LEVEL = TOML_LAYOUT.get('') ?? new Map<string, Field>();
const TABLES = [...TOML_LAYOUT.keys()].filter((table) => table !== '');
/** What may stand at the top of the file: its keys, then its tables. */
const TOP_LEVEL_NAMES = [...TOP_LEVEL.keys(), ...TABLES];

export interface FileLayer {
  path: string;
  values: Partial<BerthConfig>;
}

/** A missing file is fine unless it was named explicitly (by --config). */
export function readConfigFile(path: string, explicit: boolean): FileLayer | undefined {
  const text = readText(path, explicit);
  if (text === undefined) return undefined;
  const doc = parseTomlDocument(text, path);

  const values: Partial<BerthConfig> = {};
  for (const [name, value] of Object.entries(doc)) {
    const field = TOP_LEVEL.get(name);
    if (field !== undefined) {
      readKey(values, field, value, `${path}: ${name}`);
      continue;
    }
    const table = TABLES.includes(name) ? TOML_LAYOUT.get(name) : undefined;
    if (table === undefined) throw new ConfigError(`${path}: unknown key "${name}"${known(TOP_LEVEL_NAMES)}`);
    if (!isTomlTable(value)) {
      throw new ConfigError(`${path}: ${name}: expected a table [${name}], got ${describeTomlValue(value)}`);
    }
    for (const [sub, subValue] of Object.entries(value)) {
      const subField = table.get(sub);
      if (subField === undefined) {
        const names = [...table.keys()].map((k) => `${name}.${k}`);
        throw new ConfigError(`${path}: unknown key "${name}.${sub}"${known(names)}`);
      }
      readKey(values, subField, subValue, `${path}: ${name}.${sub}`);
    }
  }
  return { path, values };
}

function readText(path: string, explicit: boolean): string | undefined {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch (err) {
    if (isErrno(err, 'ENOENT')) {
      if (!explicit) return undefined;
      throw new ConfigError(`--config: config file ${path} does not exist`);
    }
    throw new ConfigError(`${path}: cannot open config file: ${errorMessage(err)}`);
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new ConfigError(`${path}: config file is not a regular file`);
    // berthd runs as root and the file names binaries it executes: refuse one anybody may edit.
    if ((st.mode & 0o002) !== 0 && process.geteuid?.() === 0) {
      throw new ConfigError(`${path}: config file is writable by every user; refusing it (chmod o-w)`);
    }
    return readFileSync(fd, 'utf8');
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`${path}: cannot read config file: ${errorMessage(err)}`);
  } finally {
    closeSync(fd);
  }
}

function readKey<F extends Field>(
  layer: Partial<BerthConfig>,
  field: F,
  value: unknown,
  where: string,
): void {
  layer[field] = SETTINGS[field].kind.fromToml(value, where);
}

function known(names: readonly string[]): string {
  return ` (known: ${names.join(', ')})`;
}

function isErrno(err: unknown, code: string): boolean {
  return err instanceof Error && 'code' in err && err.code === code;
}
