/**
 * The kinds of value a setting can hold: how each is read from a flag or the config file and
 * checked, and how it is written back for --help and the sample config. `where` names the flag, or
 * the file and key, in every error.
 */
import { posix } from 'node:path';
import { parseHostPort } from '../address.js';
import { errorMessage } from '../errors.js';
import { ConfigError } from './error.js';
import { describeTomlValue, isTomlTable, tomlString } from './toml.js';

/** A flag's values, in command-line order. */
export interface FlagValues {
  last: string;
  all: readonly string[];
}

export interface ValueKind<T> {
  fromFlag(values: FlagValues, where: string): T;
  fromToml(value: unknown, where: string): T;
  /** As --help and the README show it; '' for a value that is unset. */
  show(value: T): string;
  /** As a TOML literal. */
  toToml(value: T): string;
}

type TextParser<T> = (text: string, where: string) => T;

/** A value written as one string, in a flag or the file; the last occurrence of its flag wins. */
function textKind<T>(parse: TextParser<T>, show: (value: T) => string, expected = 'a string'): ValueKind<T> {
  return {
    fromFlag: (values, where) => parse(values.last, where),
    fromToml: (value, where) => {
      if (typeof value !== 'string') {
        throw new ConfigError(`${where}: expected ${expected}, got ${describeTomlValue(value)}`);
      }
      return parse(value, where);
    },
    show,
    toToml: (value) => tomlString(show(value)),
  };
}

function stringKind<T extends string>(parse: TextParser<T>): ValueKind<T> {
  return textKind(parse, (value) => value);
}

/** Normalized, without a trailing slash. */
function parseAbsolutePath(value: string, where: string): string {
  if (value === '') throw new ConfigError(`${where}: empty path`);
  if (value.includes('\0')) throw new ConfigError(`${where}: path contains a NUL byte`);
  if (!posix.isAbsolute(value)) throw new ConfigError(`${where}: path must be absolute, got "${value}"`);
  const normal = posix.normalize(value);
  return normal.length > 1 && normal.endsWith('/') ? normal.slice(0, -1) : normal;
}

/** sun_path is 108 bytes including the terminating NUL. */
const MAX_SOCKET_PATH_BYTES = 107;

function parseSocketPath(value: string, where: string): string {
  let path = value;
  if (value.startsWith('unix://')) path = value.slice('unix://'.length);
  else if (/^[a-zA-Z][a-zA-Z0-9+.-]*:\/\//.test(value)) {
    throw new ConfigError(
      `${where}: only unix sockets are supported (a path or unix:///path), got "${value}"`,
    );
  }
  const abs = parseAbsolutePath(path, where);
  if (Buffer.byteLength(abs) > MAX_SOCKET_PATH_BYTES) {
    throw new ConfigError(`${where}: socket path is longer than ${MAX_SOCKET_PATH_BYTES} bytes: ${abs}`);
  }
  return abs;
}

/** A relative path would depend on the directory berthd was started in, so only bare names search PATH. */
function parseProgram(value: string, where: string): string {
  if (value.includes('/')) return parseAbsolutePath(value, where);
  if (value.trim() === '' || /\s|\0/.test(value)) {
    throw new ConfigError(`${where}: expected an absolute path or a program name, got "${value}"`);
  }
  return value;
}

function parseListenAddress(value: string, where: string): string {
  try {
    parseHostPort(value);
  } catch (err) {
    throw new ConfigError(`${where}: ${errorMessage(err)}`);
  }
  return value;
}

/** An absolute path; '' (no path) is only ever a default, never accepted from a flag or the file. */
export const absolutePath = stringKind(parseAbsolutePath);
/** An absolute path or unix:///path, short enough for a socket address. */
export const socketPath = stringKind(parseSocketPath);
/** An absolute path, or a bare program name looked up in PATH. */
export const program = stringKind(parseProgram);
/** host:port, IPv6 hosts in brackets; an empty host listens on every address. */
export const listenAddress = stringKind(parseListenAddress);
/** As listenAddress, or '' for a server that is off. */
export const optionalListenAddress = stringKind((value, where) =>
  value === '' ? value : parseListenAddress(value, where),
);

export function choice<const T extends string>(allowed: readonly T[]): ValueKind<T> {
  return stringKind((value, where) => {
    const found = allowed.find((a) => a === value);
    if (found === undefined) {
      throw new ConfigError(`${where}: "${value}" is not one of ${allowed.join(', ')}`);
    }
    return found;
  });
}

/** Milliseconds, written as a Go-style duration string; at least `minMs`, at most a day. */
export function duration(minMs: number): ValueKind<number> {
  return textKind(
    (value, where) => parseDuration(value, minMs, where),
    formatDuration,
    'a duration string such as "30s"',
  );
}

/**
 * A whole number from `min` to `max`: in the file a TOML integer, on the command line decimal
 * digits. A float such as 1.5 or a string is an error, not rounded or read.
 */
export function count(min: number, max: number): ValueKind<number> {
  const inRange = (n: number, where: string): number => {
    if (n < min || n > max) throw new ConfigError(`${where}: must be from ${min} to ${max}, got ${n}`);
    return n;
  };
  return {
    fromFlag: ({ last }, where) => {
      if (!/^\d{1,15}$/.test(last)) throw new ConfigError(`${where}: expected a whole number, got "${last}"`);
      return inRange(Number(last), where);
    },
    fromToml: (value, where) => {
      const n = typeof value === 'bigint' ? Number(value) : value;
      if (typeof n !== 'number' || !Number.isSafeInteger(n)) {
        throw new ConfigError(`${where}: expected an integer, got ${describeTomlValue(value)}`);
      }
      return inRange(n, where);
    },
    show: (value) => String(value),
    toToml: (value) => String(value),
  };
}

/**
 * Absolute directories searched in order. The flag may be repeated and each value may list several,
 * comma-separated or colon-separated as in CNI_PATH and PATH; together they replace the list.
 */
export const directoryList: ValueKind<string[]> = {
  fromFlag: (values, where) =>
    values.all.flatMap((value) => value.split(/[,:]/).map((part) => parseAbsolutePath(part, where))),
  fromToml: (value, where) => {
    if (!Array.isArray(value)) {
      throw new ConfigError(`${where}: expected an array of strings, got ${describeTomlValue(value)}`);
    }
    if (value.length === 0) throw new ConfigError(`${where}: must list at least one directory`);
    return value.map((item: unknown, i) => absolutePath.fromToml(item, `${where}[${i}]`));
  },
  show: (dirs) => dirs.join(','),
  toToml: (dirs) => `[${dirs.map(tomlString).join(', ')}]`,
};

/** Also keeps every duration far below setTimeout's 2^31-1 ms limit. */
const MAX_DURATION_MS = 24 * 60 * 60 * 1000;
/** Largest first, as formatDuration writes them. */
const DURATION_UNITS = [
  ['h', 3_600_000],
  ['m', 60_000],
  ['s', 1000],
  ['ms', 1],
] as const;

/** Go-style durations: "500ms", "30s", "1m30s", "1.5h". */
function parseDuration(value: string, minMs: number, where: string): number {
  const whole = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$/;
  if (!whole.test(value)) {
    throw new ConfigError(`${where}: "${value}" is not a duration such as "500ms", "30s" or "1m30s"`);
  }
  let ms = 0;
  for (const m of value.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)) {
    ms += Number(m[1]) * (DURATION_UNITS.find(([unit]) => unit === m[2])?.[1] ?? 0);
  }
  ms = Math.round(ms);
  if (ms < minMs) throw new ConfigError(`${where}: duration must be at least ${formatDuration(minMs)}`);
  if (ms > MAX_DURATION_MS)
    throw new ConfigError(`${where}: duration must be at most ${formatDuration(MAX_DURATION_MS)}`);
  return ms;
}

export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  let rest = ms;
  let out = '';
  for (const [unit, size] of DURATION_UNITS) {
    const n = Math.floor(rest / size);
    if (n > 0) out += `${n}${unit}`;
    rest -= n * size;
  }
  return out;
}

/** An OCI runtime kubelet may ask for by name (RuntimeClass handler), besides the default runc. */
export interface RuntimeHandlerSetting {
  name: string;
  /** The runc-compatible binary: an absolute path or a name looked up in PATH. */
  path: string;
  /** Its --root: each handler keeps its own state, so no two handlers share one. */
  root: string;
}

/** As RuntimeClass requires of a handler name: a DNS label. */
const HANDLER_NAME = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
/** The default handler's name; it is configured by runtime.path. */
const DEFAULT_HANDLER = 'runc';
const HANDLER_KEYS = ['path', 'root'];

function handlerName(name: string, where: string): string {
  if (!HANDLER_NAME.test(name)) {
    throw new ConfigError(
      `${where}: handler name "${name}" is not a DNS label (lowercase letters, digits, -)`,
    );
  }
  if (name === DEFAULT_HANDLER) {
    throw new ConfigError(`${where}: "${DEFAULT_HANDLER}" is the default handler; set runtime.path instead`);
  }
  return name;
}

function distinctHandlers(handlers: RuntimeHandlerSetting[], where: string): RuntimeHandlerSetting[] {
  handlers.forEach((handler, i) => {
    const earlier = handlers.slice(0, i);
    if (earlier.some((other) => other.name === handler.name)) {
      throw new ConfigError(`${where}: handler "${handler.name}" is declared twice`);
    }
    const sharing = earlier.find((other) => other.root === handler.root);
    if (sharing) {
      throw new ConfigError(
        `${where}: handlers "${sharing.name}" and "${handler.name}" share root ${handler.root}`,
      );
    }
  });
  return handlers;
}

/**
 * Named runtime handlers: in the file a table per handler (`[runtime.handlers.<name>]` with `path`
 * and `root`), on the command line `NAME=PATH:ROOT`, repeatable; either way the list is replaced.
 */
export const runtimeHandlerList: ValueKind<RuntimeHandlerSetting[]> = {
  fromFlag: (values, where) =>
    distinctHandlers(
      values.all.map((value) => {
        const match = /^([^=]*)=([^:]*):(.*)$/.exec(value);
        if (match === null) throw new ConfigError(`${where}: expected NAME=PATH:ROOT, got "${value}"`);
        const [, name = '', path = '', root = ''] = match;
        return {
          name: handlerName(name, where),
          path: parseProgram(path, where),
          root: parseAbsolutePath(root, where),
        };
      }),
      where,
    ),
  fromToml: (value, where) => {
    if (!isTomlTable(value)) {
      throw new ConfigError(`${where}: expected a table of handlers, got ${describeTomlValue(value)}`);
    }
    const handlers = Object.entries(value).map(([name, table]) => {
      const at = `${where}.${name}`;
      handlerName(name, at);
      if (!isTomlTable(table))
        throw new ConfigError(`${at}: expected a table, got ${describeTomlValue(table)}`);
      const unknown = Object.keys(table).find((key) => !HANDLER_KEYS.includes(key));
      if (unknown !== undefined) {
        throw new ConfigError(`${at}: unknown key "${unknown}" (known: ${HANDLER_KEYS.join(', ')})`);
      }
      return {
        name,
        path: program.fromToml(table.path, `${at}.path`),
        root: absolutePath.fromToml(table.root, `${at}.root`),
      };
    });
    return distinctHandlers(handlers, where);
  },
  show: (handlers) => handlers.map((h) => `${h.name}=${h.path}:${h.root}`).join(','),
  toToml: (handlers) =>
    `{ ${handlers.map((h) => `${h.name} = { path = ${tomlString(h.path)}, root = ${tomlString(h.root)} }`).join(', ')} }`,
};
