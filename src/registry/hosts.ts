/**
 * Where to pull from and how: the registries TOML file (like containerd's hosts.toml and CRI-O's
 * registries.conf), checked once when loaded so the client can trust a RegistryHosts.
 */
import { readFile, stat } from 'node:fs/promises';
import { parse as parseToml, TomlError } from 'smol-toml';
import { ConfigError } from '../config/error.js';
import { errorMessage } from '../errors.js';
import { DOCKER_HUB, isRegistryHost } from './reference.js';
import type { Endpoint, RegistryCredentials } from './types.js';

export const DEFAULT_REGISTRIES_PATH = '/etc/berth/registries.toml';
/** Docker Hub's API is not served at docker.io itself. */
export const DOCKER_HUB_ORIGIN = 'https://registry-1.docker.io';
/** The section that applies to every registry without a section of its own. */
export const WILDCARD = '*';

interface HostSettings {
  /** Plain HTTP. null: the default, which is true for loopback hosts only. */
  insecure: boolean | null;
  /** HTTPS without certificate verification. */
  skipVerify: boolean;
  credentials: RegistryCredentials | null;
}

export interface MirrorConfig extends HostSettings {
  /** As written: `http://127.0.0.1:5000`, `mirror.example:5000`, `https://m.example/v2`. */
  url: string;
}

export interface RegistryConfig extends HostSettings {
  /** Tried in order before the origin. */
  mirrors: MirrorConfig[];
  /** Replaces the origin's URL (containerd's `server`); null: derived from the registry name. */
  server: string | null;
  /**
   * Never contact the origin, only the mirrors (an air-gapped node). null: unset, so the "*"
   * section decides for a registry with a section of its own.
   */
  mirrorsOnly: boolean | null;
}

export interface RegistryHosts {
  /** The file these came from; null for built-in defaults. */
  source: string | null;
  /** Keyed by lowercase registry host[:port]; `index.docker.io` is filed as `docker.io`. */
  registries: ReadonlyMap<string, RegistryConfig>;
  wildcard: RegistryConfig | null;
}

export function defaultRegistryHosts(): RegistryHosts {
  return { source: null, registries: new Map(), wildcard: null };
}

/** Reads the registries file. A missing file means defaults; anything wrong is a ConfigError naming file and key. */
export async function loadRegistryHosts(path: string = DEFAULT_REGISTRIES_PATH): Promise<RegistryHosts> {
  let text: string;
  try {
    const st = await stat(path);
    if (!st.isFile()) throw new ConfigError(`${path}: registries file is not a regular file`);
    // It can hold credentials and decides where images come from: nobody else may edit it.
    if ((st.mode & 0o002) !== 0 && process.geteuid?.() === 0) {
      throw new ConfigError(`${path}: registries file is writable by every user; refusing it (chmod o-w)`);
    }
    text = await readFile(path, 'utf8');
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    if (isErrno(err, 'ENOENT')) return defaultRegistryHosts();
    throw new ConfigError(`${path}: cannot read registries file: ${errorMessage(err)}`);
  }
  return parseRegistryHosts(text, path);
}

/** Parses the registries TOML text; `source` names the file in errors. */
export function parseRegistryHosts(text: string, source: string): RegistryHosts {
  let doc: Record<string, unknown>;
  try {
    doc = parseToml(text);
  } catch (err) {
    if (err instanceof TomlError) {
      const first = err.message.split('\n')[0] ?? err.message;
      throw new ConfigError(`${source}: invalid TOML at line ${err.line}, column ${err.column}: ${first}`);
    }
    throw new ConfigError(`${source}: invalid TOML: ${errorMessage(err)}`);
  }
  const fail = (key: string, problem: string): never => {
    throw new ConfigError(`${source}: ${key}: ${problem}`);
  };

  const registries = new Map<string, RegistryConfig>();
  let wildcard: RegistryConfig | null = null;
  for (const [key, value] of Object.entries(doc)) {
    if (key !== 'registry') fail(key, 'unknown key (expected [registry."<host>"] sections)');
    const table = asTable(value, 'registry', fail);
    for (const [name, section] of Object.entries(table)) {
      const where = `registry.${JSON.stringify(name)}`;
      const config = parseRegistrySection(section, where, fail);
      if (name === WILDCARD) {
        // One server for every registry would silently replace all their origins.
        if (config.server !== null) fail(`${where}.server`, 'not allowed in the "*" section (use mirrors)');
        wildcard = config;
        continue;
      }
      const host = registryKey(name);
      if (!isRegistryHost(host)) {
        fail(where, 'expected a registry host, optionally with a port (e.g. "docker.io")');
      }
      if (registries.has(host)) {
        fail(where, `duplicate section: "${name}" is the same registry as another section`);
      }
      registries.set(host, config);
    }
  }
  return { source, registries, wildcard };
}

type Fail = (key: string, problem: string) => never;

const CREDENTIAL_KEYS = ['username', 'password', 'auth', 'identity_token'] as const;
const MIRROR_KEYS = new Set(['url', 'insecure', 'skip_verify', ...CREDENTIAL_KEYS]);
const REGISTRY_KEYS = new Set([
  'mirrors',
  'mirrors_only',
  'server',
  'insecure',
  'skip_verify',
  ...CREDENTIAL_KEYS,
]);

function parseRegistrySection(value: unknown, where: string, fail: Fail): RegistryConfig {
  const table = asTable(value, where, fail);
  for (const key of Object.keys(table)) {
    if (!REGISTRY_KEYS.has(key)) {
      fail(`${where}.${key}`, `unknown key (expected one of ${[...REGISTRY_KEYS].join(', ')})`);
    }
  }
  const settings = parseHostSettings(table, where, fail);
  const mirrorsValue = table.mirrors ?? [];
  if (!Array.isArray(mirrorsValue)) fail(`${where}.mirrors`, 'expected an array of { url = "..." } tables');
  const mirrors = (mirrorsValue as unknown[]).map((m, i) => parseMirror(m, `${where}.mirrors[${i}]`, fail));
  let server: string | null = null;
  if (table.server !== undefined) {
    server = asString(table.server, `${where}.server`, fail);
    checkUrl(server, settings, `${where}.server`, fail);
  }
  const mirrorsOnly =
    table.mirrors_only === undefined ? null : asBoolean(table.mirrors_only, `${where}.mirrors_only`, fail);
  // `server` is the origin's address; with the origin never contacted it would be dead config.
  if (mirrorsOnly === true && server !== null) {
    fail(`${where}.mirrors_only`, 'contradicts server (the origin is never contacted with mirrors_only)');
  }
  return { ...settings, mirrors, server, mirrorsOnly };
}

function parseMirror(value: unknown, where: string, fail: Fail): MirrorConfig {
  // A bare string is the common case: mirrors = ["http://127.0.0.1:5000"].
  const table = typeof value === 'string' ? { url: value } : asTable(value, where, fail);
  for (const key of Object.keys(table)) {
    if (!MIRROR_KEYS.has(key)) {
      fail(`${where}.${key}`, `unknown key (expected one of ${[...MIRROR_KEYS].join(', ')})`);
    }
  }
  if (table.url === undefined) fail(`${where}.url`, 'missing (every mirror needs a url)');
  const url = asString(table.url, `${where}.url`, fail);
  const settings = parseHostSettings(table, where, fail);
  checkUrl(url, settings, `${where}.url`, fail);
  return { ...settings, url };
}

function parseHostSettings(table: Record<string, unknown>, where: string, fail: Fail): HostSettings {
  const insecure = table.insecure === undefined ? null : asBoolean(table.insecure, `${where}.insecure`, fail);
  const skipVerify =
    table.skip_verify === undefined ? false : asBoolean(table.skip_verify, `${where}.skip_verify`, fail);
  const str = (key: string): string | undefined =>
    table[key] === undefined ? undefined : asString(table[key], `${where}.${key}`, fail);
  const username = str('username');
  const password = str('password');
  const auth = str('auth');
  const identityToken = str('identity_token');

  let credentials: RegistryCredentials | null = null;
  if (username !== undefined || password !== undefined) {
    if (username === undefined || username === '') fail(`${where}.username`, 'missing (password is set)');
    if (password === undefined) fail(`${where}.password`, 'missing (username is set)');
    if (auth !== undefined) fail(`${where}.auth`, 'set either auth or username/password, not both');
    credentials = { username, password };
  } else if (auth !== undefined) {
    const decoded = Buffer.from(auth, 'base64').toString('utf8');
    if (!decoded.includes(':') || decoded.startsWith(':')) {
      fail(`${where}.auth`, 'expected base64 of "username:password"');
    }
    credentials = { auth };
  }
  if (identityToken !== undefined) credentials = { ...credentials, identityToken };
  return { insecure, skipVerify, credentials };
}

/** A URL's scheme and `insecure` must agree; without a scheme, `insecure` picks it. */
function checkUrl(url: string, settings: HostSettings, where: string, fail: Fail): void {
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(url)?.[1]?.toLowerCase();
  if (scheme !== undefined && scheme !== 'http' && scheme !== 'https') {
    fail(where, `unsupported scheme "${scheme}"`);
  }
  let parsed: URL;
  try {
    parsed = new URL(scheme === undefined ? `https://${url}` : url);
  } catch {
    return fail(where, `"${url}" is not a URL`);
  }
  if (parsed.search !== '' || parsed.hash !== '' || parsed.username !== '' || parsed.password !== '') {
    fail(where, `"${url}" must not carry credentials, a query or a fragment`);
  }
  if (scheme === 'https' && settings.insecure === true) {
    fail(where, 'https URL with insecure = true (plain HTTP)');
  }
}

/** Turns configured settings into an endpoint; without a scheme, loopback hosts default to HTTP. */
function toEndpoint(url: string, settings: HostSettings, role: Endpoint['role']): Endpoint {
  let full = url;
  if (!/^https?:\/\//i.test(url)) {
    const insecure = settings.insecure ?? isLoopbackHost(hostOf(`https://${url}`));
    full = `${insecure ? 'http' : 'https'}://${url}`;
  }
  return { url: apiBase(full), role, skipVerify: settings.skipVerify, credentials: settings.credentials };
}

/** The URL the `/v2/` API hangs under: a configured path ending in /v2 is the API root itself. */
function apiBase(url: string): string {
  const parsed = new URL(url);
  let path = parsed.pathname.replace(/\/+$/, '');
  if (path.endsWith('/v2')) path = path.slice(0, -3);
  return `${parsed.protocol}//${parsed.host}${path}`;
}

/**
 * The endpoints to try for `registry`, in order: its mirrors, then the origin unless
 * `mirrors_only` is in force. The registry's own section applies, else the "*" section, else
 * defaults. `docker.io`'s origin is registry-1.docker.io; loopback registries default to plain HTTP.
 */
export function endpointsFor(hosts: RegistryHosts, registry: string): Endpoint[] {
  const key = registryKey(registry);
  const config = hosts.registries.get(key) ?? hosts.wildcard;
  const endpoints: Endpoint[] = [];
  const add = (e: Endpoint): void => {
    if (!endpoints.some((x) => x.url === e.url)) endpoints.push(e);
  };
  for (const m of config?.mirrors ?? []) add(toEndpoint(m.url, m, 'mirror'));
  if (isMirrorsOnly(hosts, registry)) return endpoints;

  const settings: HostSettings = config ?? { insecure: null, skipVerify: false, credentials: null };
  if (config?.server != null) {
    add(toEndpoint(config.server, settings, 'origin'));
  } else if (key === DOCKER_HUB) {
    add(toEndpoint(DOCKER_HUB_ORIGIN, settings, 'origin'));
  } else {
    add(toEndpoint(key, settings, 'origin'));
  }
  return endpoints;
}

/**
 * Whether `registry`'s origin is off limits: its own section's `mirrors_only` when it sets one,
 * else the "*" section's, so one line in "*" keeps a whole node off the internet.
 */
export function isMirrorsOnly(hosts: RegistryHosts, registry: string): boolean {
  return hosts.registries.get(registryKey(registry))?.mirrorsOnly ?? hosts.wildcard?.mirrorsOnly ?? false;
}

/** Lowercase; the legacy Docker Hub name is Docker Hub. */
function registryKey(registry: string): string {
  const key = registry.toLowerCase();
  return key === 'index.docker.io' ? DOCKER_HUB : key;
}

function hostOf(url: string): string {
  return new URL(url).hostname.replace(/^\[|\]$/g, '');
}

/** localhost, 127.0.0.0/8 and ::1 (any port): plain HTTP unless configured otherwise. */
export function isLoopbackHost(hostname: string): boolean {
  const h = hostname.toLowerCase().replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

function asTable(value: unknown, where: string, fail: Fail): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value) || value instanceof Date) {
    return fail(where, 'expected a table');
  }
  return value as Record<string, unknown>;
}

function asString(value: unknown, where: string, fail: Fail): string {
  return typeof value === 'string' ? value : fail(where, `expected a string, got ${describe(value)}`);
}

function asBoolean(value: unknown, where: string, fail: Fail): boolean {
  return typeof value === 'boolean' ? value : fail(where, `expected true or false, got ${describe(value)}`);
}

function describe(value: unknown): string {
  return Array.isArray(value) ? 'an array' : typeof value;
}

function isErrno(err: unknown, code: string): boolean {
  return err instanceof Error && (err as NodeJS.ErrnoException).code === code;
}
