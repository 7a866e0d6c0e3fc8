/**
 * berthd's configuration: built-in defaults < TOML config file < command-line flags.
 * Everything is checked here, once, so the rest of the daemon can trust a BerthConfig.
 */
import { closeSync, fstatSync, openSync, readFileSync, statSync } from 'node:fs';
import { posix } from 'node:path';
import { parse as parseToml, TomlError } from 'smol-toml';
import { parseHostPort } from '../address.js';
import { BerthError, errorMessage } from '../errors.js';
import { BERTH_VERSION } from '../version.js';
import type { BerthConfig, CgroupDriver, LogLevel } from './types.js';

export class ConfigError extends BerthError {
  override name = 'ConfigError';
}

export type LoadResult =
  { kind: 'run'; config: BerthConfig } | { kind: 'help'; text: string } | { kind: 'version'; text: string };

/** Seams for tests; the daemon passes none of them. */
export interface LoadOptions {
  /** File read when --config is not given; a missing one is fine. */
  defaultConfigPath?: string;
  /** Whether the host runs systemd. Defaults to checking that /run/systemd/system is a directory. */
  hostRunsSystemd?: () => boolean;
  /** Directory a relative --config is resolved against. Defaults to process.cwd(). */
  cwd?: string;
}

export const DEFAULT_CONFIG_PATH = '/etc/berth/berth.toml';

export const LOG_LEVELS: readonly LogLevel[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];
export const CGROUP_DRIVERS: readonly CgroupDriver[] = ['cgroupfs', 'systemd'];

const SYSTEMD_MARKER = '/run/systemd/system';
/** sun_path is 108 bytes including the terminating NUL. */
const MAX_SOCKET_PATH_BYTES = 107;
/** Longest accepted duration; also keeps every value far below setTimeout's 2^31-1 ms limit. */
const MAX_DURATION_MS = 24 * 60 * 60 * 1000;

/** Fresh copy of the built-in defaults. */
export function defaultConfig(): BerthConfig {
  return {
    socket: '/run/berth/berth.sock',
    rootDir: '/var/lib/berth',
    stateDir: '/run/berth',
    cniConfDir: '/etc/cni/net.d',
    cniBinDirs: ['/opt/cni/bin', '/usr/lib/cni'],
    netnsDir: '/var/run/netns',
    registryConfig: '/etc/berth/registries.toml',
    runtime: 'runc',
    monitor: 'conmon',
    cgroupDriver: 'cgroupfs',
    logLevel: 'info',
    cniTimeoutMs: 30_000,
    runtimeTimeoutMs: 30_000,
    registryTimeoutMs: 60_000,
    stopGraceMs: 10_000,
    streamingAddress: '127.0.0.1:0',
    // containerd's stream_idle_timeout.
    streamingIdleTimeoutMs: 4 * 3_600_000,
    streamingTlsCert: '',
    streamingTlsKey: '',
  };
}

export function loadConfig(argv: string[], opts: LoadOptions = {}): LoadResult {
  const args = parseArgs(argv);
  if (args.help) return { kind: 'help', text: helpText(opts.defaultConfigPath ?? DEFAULT_CONFIG_PATH) };
  if (args.version) return { kind: 'version', text: `berthd ${BERTH_VERSION}` };

  const fromFlags: Partial<BerthConfig> = {};
  for (const [name, values] of args.values) {
    const def = FLAGS.find((f) => f.name === name);
    if (def?.apply) def.apply(fromFlags, values, name);
  }

  const configFlag = args.values.get('--config')?.at(-1);
  let file: FileLayer | undefined;
  if (configFlag !== undefined) {
    if (configFlag === '') throw new ConfigError('--config: empty path');
    const path = posix.resolve(opts.cwd ?? process.cwd(), configFlag);
    file = readConfigFile(path, true);
  } else {
    file = readConfigFile(opts.defaultConfigPath ?? DEFAULT_CONFIG_PATH, false);
  }

  const config: BerthConfig = { ...defaultConfig(), ...file?.values, ...fromFlags };

  if (config.cgroupDriver === 'systemd' && !(opts.hostRunsSystemd ?? hostRunsSystemd)()) {
    const source =
      fromFlags.cgroupDriver !== undefined ? '--cgroup-driver' : `${file?.path ?? ''}: cgroup_driver`;
    throw new ConfigError(
      `${source}: cgroup driver "systemd" needs a host running systemd, and ${SYSTEMD_MARKER} does not exist; use "cgroupfs"`,
    );
  }
  if ((config.streamingTlsCert === '') !== (config.streamingTlsKey === '')) {
    throw new ConfigError(
      'streaming TLS needs both a certificate and a key (--streaming-tls-cert and --streaming-tls-key, or streaming.tls_cert and streaming.tls_key)',
    );
  }
  if (config.rootDir === config.stateDir) {
    throw new ConfigError(
      `root and state directories must differ (both are ${config.rootDir}): state must be emptied by a reboot, root must survive it`,
    );
  }
  return { kind: 'run', config };
}

// ---------------------------------------------------------------------------------------------
// Flags

interface FlagDef {
  name: string;
  short?: string;
  /** Placeholder for the value; absent for switches. */
  arg?: string;
  help: string;
  /** Shown as "(default ...)" in the help text. */
  shownDefault?: (defaults: BerthConfig, defaultConfigPath: string) => string;
  /** Applies every occurrence of the flag, in order, to the flag layer. */
  apply?: (out: Partial<BerthConfig>, values: string[], flag: string) => void;
}

/** Flags whose last occurrence wins. */
function lastWins<K extends keyof BerthConfig>(
  key: K,
  read: (value: string, where: string) => BerthConfig[K],
): FlagDef['apply'] {
  return (out, values, flag) => {
    const last = values.at(-1);
    if (last !== undefined) out[key] = read(last, flag);
  };
}

const FLAGS: readonly FlagDef[] = [
  {
    name: '--config',
    arg: 'PATH',
    help: 'TOML config file; a missing default file is fine',
    shownDefault: (_d, path) => path,
  },
  {
    name: '--socket',
    arg: 'PATH',
    help: 'CRI unix socket: a path or unix:///path',
    shownDefault: (d) => d.socket,
    apply: lastWins('socket', socketPath),
  },
  {
    name: '--root',
    arg: 'DIR',
    help: 'persistent state: database, sandbox dirs',
    shownDefault: (d) => d.rootDir,
    apply: lastWins('rootDir', absolutePath),
  },
  {
    name: '--state',
    arg: 'DIR',
    help: 'volatile state (tmpfs), emptied by a reboot',
    shownDefault: (d) => d.stateDir,
    apply: lastWins('stateDir', absolutePath),
  },
  {
    name: '--cni-conf-dir',
    arg: 'DIR',
    help: 'CNI network configs (.conflist/.conf/.json)',
    shownDefault: (d) => d.cniConfDir,
    apply: lastWins('cniConfDir', absolutePath),
  },
  {
    name: '--cni-bin-dir',
    arg: 'DIR',
    help: 'CNI plugin dirs; repeatable or comma-separated',
    shownDefault: (d) => d.cniBinDirs.join(','),
    apply: (out, values, flag) => {
      const dirs: string[] = [];
      for (const value of values) {
        for (const part of value.split(',')) dirs.push(absolutePath(part, flag));
      }
      out.cniBinDirs = dirs;
    },
  },
  {
    name: '--netns-dir',
    arg: 'DIR',
    help: 'where pod network namespaces are pinned',
    shownDefault: (d) => d.netnsDir,
    apply: lastWins('netnsDir', absolutePath),
  },
  {
    name: '--registry-config',
    arg: 'PATH',
    help: 'registry mirrors, insecure hosts and credentials (TOML; a missing file is fine)',
    shownDefault: (d) => d.registryConfig,
    apply: lastWins('registryConfig', absolutePath),
  },
  {
    name: '--runtime',
    arg: 'PATH',
    help: 'OCI runtime: absolute path or name in PATH',
    shownDefault: (d) => d.runtime,
    apply: lastWins('runtime', runtimePath),
  },
  {
    name: '--monitor',
    arg: 'PATH',
    help: 'container monitor (conmon): absolute path or name in PATH',
    shownDefault: (d) => d.monitor,
    apply: lastWins('monitor', runtimePath),
  },
  {
    name: '--cgroup-driver',
    arg: 'DRIVER',
    help: `${CGROUP_DRIVERS.join('|')}; systemd only on a systemd host`,
    shownDefault: (d) => d.cgroupDriver,
    apply: lastWins('cgroupDriver', (v, where) => oneOf(v, CGROUP_DRIVERS, where)),
  },
  {
    name: '--log-level',
    arg: 'LEVEL',
    help: LOG_LEVELS.join('|'),
    shownDefault: (d) => d.logLevel,
    apply: lastWins('logLevel', (v, where) => oneOf(v, LOG_LEVELS, where)),
  },
  {
    name: '--streaming-address',
    arg: 'HOST:PORT',
    help: 'exec/attach/port-forward server; port 0 picks a free one',
    shownDefault: (d) => d.streamingAddress,
    apply: lastWins('streamingAddress', hostPort),
  },
  {
    name: '--streaming-idle-timeout',
    arg: 'DURATION',
    help: 'close a stream with no traffic after this; 0s for never',
    shownDefault: (d) => formatDuration(d.streamingIdleTimeoutMs),
    apply: lastWins('streamingIdleTimeoutMs', (v, where) => parseDuration(v, 0, where)),
  },
  {
    name: '--streaming-tls-cert',
    arg: 'PATH',
    help: 'PEM certificate: serve streams over HTTPS (with --streaming-tls-key)',
    apply: lastWins('streamingTlsCert', absolutePath),
  },
  {
    name: '--streaming-tls-key',
    arg: 'PATH',
    help: 'PEM private key of --streaming-tls-cert',
    apply: lastWins('streamingTlsKey', absolutePath),
  },
  { name: '--help', short: '-h', help: 'print this help and exit' },
  { name: '--version', help: 'print the version and exit' },
];

interface ParsedArgs {
  help: boolean;
  version: boolean;
  /** Raw values of each value flag, in command-line order. */
  values: Map<string, string[]>;
}

/** Syntax only (known flags, values present); values are checked after --help/--version. */
function parseArgs(argv: readonly string[]): ParsedArgs {
  const out: ParsedArgs = { help: false, version: false, values: new Map() };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (arg === '--') {
      const rest = argv[i + 1];
      if (rest !== undefined) throw new ConfigError(`unexpected argument "${rest}": berthd takes only flags`);
      break;
    }
    if (!arg.startsWith('-') || arg === '-') {
      throw new ConfigError(`unexpected argument "${arg}": berthd takes only flags (see --help)`);
    }
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const name = eq === -1 ? arg : arg.slice(0, eq);
    const def = FLAGS.find((f) => f.name === name || f.short === name);
    if (def === undefined) throw new ConfigError(`unknown flag ${name} (see --help)`);

    if (def.arg === undefined) {
      if (eq !== -1) throw new ConfigError(`${def.name} takes no value`);
      if (def.name === '--help') out.help = true;
      else out.version = true;
      continue;
    }
    let value: string;
    if (eq !== -1) {
      value = arg.slice(eq + 1);
    } else {
      const next = argv[i + 1];
      if (next === undefined || (next.startsWith('-') && next !== '-')) {
        throw new ConfigError(`${def.name} needs a value: ${def.name} ${def.arg} or ${def.name}=${def.arg}`);
      }
      value = next;
      i++;
    }
    const list = out.values.get(def.name) ?? [];
    list.push(value);
    out.values.set(def.name, list);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Config file

interface FileLayer {
  path: string;
  values: Partial<BerthConfig>;
}

/** Reads one key's TOML value into the file layer; `where` is "file: dotted.key". */
type KeyReader = (out: Partial<BerthConfig>, value: unknown, where: string) => void;
type Section = { [key: string]: KeyReader };

function key<K extends keyof BerthConfig>(
  field: K,
  read: (value: unknown, where: string) => BerthConfig[K],
): KeyReader {
  return (out, value, where) => {
    out[field] = read(value, where);
  };
}

function str<T>(read: (value: string, where: string) => T): (value: unknown, where: string) => T {
  return (value, where) => {
    if (typeof value !== 'string')
      throw new ConfigError(`${where}: expected a string, got ${describe(value)}`);
    return read(value, where);
  };
}

function duration(min: number): (value: unknown, where: string) => number {
  return (value, where) => {
    if (typeof value !== 'string') {
      throw new ConfigError(`${where}: expected a duration string such as "30s", got ${describe(value)}`);
    }
    return parseDuration(value, min, where);
  };
}

/** The file scheme. Top-level keys, then one table per subsystem. */
const FILE_SCHEME: { [key: string]: KeyReader | Section } = {
  socket: key('socket', str(socketPath)),
  root: key('rootDir', str(absolutePath)),
  state: key('stateDir', str(absolutePath)),
  log_level: key(
    'logLevel',
    str((v, where) => oneOf(v, LOG_LEVELS, where)),
  ),
  cgroup_driver: key(
    'cgroupDriver',
    str((v, where) => oneOf(v, CGROUP_DRIVERS, where)),
  ),
  cni: {
    conf_dir: key('cniConfDir', str(absolutePath)),
    bin_dirs: key('cniBinDirs', (value, where) => {
      if (!Array.isArray(value)) {
        throw new ConfigError(`${where}: expected an array of strings, got ${describe(value)}`);
      }
      if (value.length === 0) throw new ConfigError(`${where}: must list at least one directory`);
      return value.map((item: unknown, i) => str(absolutePath)(item, `${where}[${i}]`));
    }),
    timeout: key('cniTimeoutMs', duration(1)),
  },
  netns: {
    dir: key('netnsDir', str(absolutePath)),
  },
  image: {
    registry_config: key('registryConfig', str(absolutePath)),
    registry_timeout: key('registryTimeoutMs', duration(1)),
  },
  runtime: {
    path: key('runtime', str(runtimePath)),
    monitor: key('monitor', str(runtimePath)),
    timeout: key('runtimeTimeoutMs', duration(1)),
  },
  pod: {
    stop_grace_period: key('stopGraceMs', duration(0)),
  },
  streaming: {
    address: key('streamingAddress', str(hostPort)),
    idle_timeout: key('streamingIdleTimeoutMs', duration(0)),
    tls_cert: key('streamingTlsCert', str(absolutePath)),
    tls_key: key('streamingTlsKey', str(absolutePath)),
  },
};

function readConfigFile(path: string, explicit: boolean): FileLayer | undefined {
  let text: string;
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
    text = readFileSync(fd, 'utf8');
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`${path}: cannot read config file: ${errorMessage(err)}`);
  } finally {
    closeSync(fd);
  }

  let doc: { [key: string]: unknown };
  try {
    doc = parseToml(text, { integersAsBigInt: 'asNeeded' });
  } catch (err) {
    if (err instanceof TomlError) {
      const first = err.message.split('\n')[0] ?? err.message;
      throw new ConfigError(`${path}: invalid TOML at line ${err.line}, column ${err.column}: ${first}`);
    }
    throw new ConfigError(`${path}: invalid TOML: ${errorMessage(err)}`);
  }

  const values: Partial<BerthConfig> = {};
  for (const [name, value] of Object.entries(doc)) {
    const entry = Object.hasOwn(FILE_SCHEME, name) ? FILE_SCHEME[name] : undefined;
    if (entry === undefined) throw new ConfigError(`${path}: unknown key "${name}"${suggest(FILE_SCHEME)}`);
    if (typeof entry === 'function') {
      entry(values, value, `${path}: ${name}`);
      continue;
    }
    if (!isTable(value))
      throw new ConfigError(`${path}: ${name}: expected a table [${name}], got ${describe(value)}`);
    for (const [sub, subValue] of Object.entries(value)) {
      const reader = Object.hasOwn(entry, sub) ? entry[sub] : undefined;
      if (reader === undefined) {
        throw new ConfigError(`${path}: unknown key "${name}.${sub}"${suggest(entry, `${name}.`)}`);
      }
      reader(values, subValue, `${path}: ${name}.${sub}`);
    }
  }
  return { path, values };
}

function suggest(section: { [key: string]: unknown }, prefix = ''): string {
  return ` (known: ${Object.keys(section)
    .map((k) => prefix + k)
    .join(', ')})`;
}

// ---------------------------------------------------------------------------------------------
// Values (shared by flags and file; `where` names the flag or the file and key)

function absolutePath(value: string, where: string): string {
  if (value === '') throw new ConfigError(`${where}: empty path`);
  if (value.includes('\0')) throw new ConfigError(`${where}: path contains a NUL byte`);
  if (!posix.isAbsolute(value)) throw new ConfigError(`${where}: path must be absolute, got "${value}"`);
  const normal = posix.normalize(value);
  return normal.length > 1 && normal.endsWith('/') ? normal.slice(0, -1) : normal;
}

function socketPath(value: string, where: string): string {
  let path = value;
  if (value.startsWith('unix://')) path = value.slice('unix://'.length);
  else if (/^[a-zA-Z][a-zA-Z0-9+.-]*:\/\//.test(value)) {
    throw new ConfigError(
      `${where}: only unix sockets are supported (a path or unix:///path), got "${value}"`,
    );
  }
  const abs = absolutePath(path, where);
  if (Buffer.byteLength(abs) > MAX_SOCKET_PATH_BYTES) {
    throw new ConfigError(`${where}: socket path is longer than ${MAX_SOCKET_PATH_BYTES} bytes: ${abs}`);
  }
  return abs;
}

/** host:port, IPv6 hosts in brackets; an empty host listens on every address. */
function hostPort(value: string, where: string): string {
  try {
    parseHostPort(value);
  } catch (err) {
    throw new ConfigError(`${where}: ${errorMessage(err)}`);
  }
  return value;
}

/** An absolute path, or a bare program name looked up in PATH; never a relative path. */
function runtimePath(value: string, where: string): string {
  if (value.includes('/')) return absolutePath(value, where);
  if (value.trim() === '' || /\s|\0/.test(value)) {
    throw new ConfigError(`${where}: expected an absolute path or a program name, got "${value}"`);
  }
  return value;
}

function oneOf<T extends string>(value: string, allowed: readonly T[], where: string): T {
  const found = allowed.find((a) => a === value);
  if (found === undefined) {
    throw new ConfigError(`${where}: "${value}" is not one of ${allowed.join(', ')}`);
  }
  return found;
}

const DURATION_UNITS: { [unit: string]: number } = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Go-style durations: "500ms", "30s", "1m30s", "1.5h". */
export function parseDuration(value: string, minMs: number, where: string): number {
  const whole = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$/;
  if (!whole.test(value)) {
    throw new ConfigError(`${where}: "${value}" is not a duration such as "500ms", "30s" or "1m30s"`);
  }
  let ms = 0;
  for (const m of value.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)) {
    ms += Number(m[1]) * (DURATION_UNITS[m[2] ?? ''] ?? 0);
  }
  ms = Math.round(ms);
  if (ms < minMs) throw new ConfigError(`${where}: duration must be at least ${formatDuration(minMs)}`);
  if (ms > MAX_DURATION_MS) throw new ConfigError(`${where}: duration must be at most 24h`);
  return ms;
}

export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  let rest = ms;
  let out = '';
  for (const [unit, size] of [
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
    ['ms', 1],
  ] as const) {
    const n = Math.floor(rest / size);
    if (n > 0) out += `${n}${unit}`;
    rest -= n * size;
  }
  return out;
}

function describe(value: unknown): string {
  if (Array.isArray(value)) return 'an array';
  if (value instanceof Date) return 'a date-time';
  if (typeof value === 'bigint') return `integer ${value}`;
  if (typeof value === 'number') return Number.isInteger(value) ? `integer ${value}` : `float ${value}`;
  if (typeof value === 'boolean') return `boolean ${value}`;
  if (typeof value === 'string') return `string "${value}"`;
  if (isTable(value)) return 'a table';
  return typeof value;
}

function isTable(value: unknown): value is { [key: string]: unknown } {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Date);
}

function isErrno(err: unknown, code: string): boolean {
  return err instanceof Error && 'code' in err && err.code === code;
}

function hostRunsSystemd(): boolean {
  try {
    return statSync(SYSTEMD_MARKER).isDirectory();
  } catch {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------
// Help and version

function helpText(defaultConfigPath: string): string {
  const d = defaultConfig();
  const rows = FLAGS.map((f) => {
    const names = f.short ? `${f.short}, ${f.name}` : `    ${f.name}`;
    const left = f.arg ? `${names} ${f.arg}` : names;
    const def = f.shownDefault ? ` (default ${f.shownDefault(d, defaultConfigPath)})` : '';
    return `  ${left.padEnd(28)}${f.help}${def}`;
  });
  return `Usage: berthd [flags]

berthd serves the Kubernetes CRI (runtime.v1) on a unix socket.
Settings come from built-in defaults, then the config file, then flags; later wins.

Flags (--flag value or --flag=value):
${rows.join('\n')}

Config file (TOML; every key optional; unknown keys are errors; paths absolute;
durations like "500ms", "30s", "1m30s"), with the defaults:
  socket = "${d.socket}"    # or "unix://${d.socket}"
  root = "${d.rootDir}"
  state = "${d.stateDir}"
  log_level = "${d.logLevel}"
  cgroup_driver = "${d.cgroupDriver}"

  [cni]
  conf_dir = "${d.cniConfDir}"
  bin_dirs = [${d.cniBinDirs.map((b) => `"${b}"`).join(', ')}]
  timeout = "${formatDuration(d.cniTimeoutMs)}"    # per CNI plugin call

  [netns]
  dir = "${d.netnsDir}"

  [image]
  registry_config = "${d.registryConfig}"    # mirrors, insecure hosts, credentials
  registry_timeout = "${formatDuration(d.registryTimeoutMs)}"    # per request; also the longest stall of a download

  [runtime]
  path = "${d.runtime}"      # absolute path, or a name looked up in PATH
  monitor = "${d.monitor}"      # conmon: holds each container's stdio, log and exit code
  timeout = "${formatDuration(d.runtimeTimeoutMs)}"    # per runtime call

  [pod]
  stop_grace_period = "${formatDuration(d.stopGraceMs)}"    # SIGTERM to SIGKILL when stopping a pod

  [streaming]
  address = "${d.streamingAddress}"    # exec, attach, port-forward; port 0 picks a free one
  idle_timeout = "${formatDuration(d.streamingIdleTimeoutMs)}"    # close a silent stream; "0s" for never
  # tls_cert = "/etc/berth/streaming.crt"    # PEM files: set both to serve streams over HTTPS
  # tls_key = "/etc/berth/streaming.key"`;
}
