/**
 * Registry authentication: WWW-Authenticate challenges, the docker token protocol (Bearer, with the
 * OAuth2 refresh-token variant for identity tokens), Basic auth, and a token cache.
 */
import { createHash } from 'node:crypto';
import { errorMessage } from '../errors.js';
import { SingleFlight } from '../kit/single-flight.js';
import { RegistryAuthError, RegistryError } from './errors.js';
import { drain, readBody, type HttpTransport } from './http.js';
import type { RegistryCredentials } from './types.js';

export interface Challenge {
  /** Lowercase: 'bearer', 'basic', ... */
  scheme: string;
  /** Parameter names lowercased; values unquoted. */
  params: Record<string, string>;
}

/**
 * Parses a WWW-Authenticate header (RFC 7235): one or more challenges, each a scheme followed by
 * comma-separated name=value or name="quoted value" parameters.
 */
export function parseWwwAuthenticate(header: string): Challenge[] {
  const challenges: Challenge[] = [];
  let i = 0;
  const skip = (chars: string): void => {
    while (i < header.length && chars.includes(header.charAt(i))) i++;
  };
  const token = (): string => {
    const start = i;
    while (i < header.length && /[!#$%&'*+\-.^_`|~0-9A-Za-z]/.test(header.charAt(i))) i++;
    return header.slice(start, i);
  };
  const quoted = (): string => {
    let out = '';
    i++; // opening quote
    while (i < header.length && header.charAt(i) !== '"') {
      if (header.charAt(i) === '\\' && i + 1 < header.length) i++;
      out += header.charAt(i);
      i++;
    }
    i++; // closing quote
    return out;
  };

  let current: Challenge | null = null;
  while (i < header.length) {
    skip(' \t,');
    if (i >= header.length) break;
    const start = i;
    const name = token();
    if (name === '') {
      i++; // not a token character: skip it rather than loop forever
      continue;
    }
    skip(' \t');
    if (header.charAt(i) === '=' && current !== null) {
      i++;
      skip(' \t');
      const value = header.charAt(i) === '"' ? quoted() : token();
      current.params[name.toLowerCase()] = value;
      continue;
    }
    // A bare token starts a new challenge.
    i = start + name.length;
    current = { scheme: name.toLowerCase(), params: {} };
    challenges.push(current);
  }
  return challenges;
}

/** Credentials in the one form used, after choosing among the CRI AuthConfig fields. */
export type ResolvedCredentials =
  | { kind: 'basic'; username: string; password: string }
  | { kind: 'refresh'; refreshToken: string }
  | { kind: 'bearer'; token: string };

/** Picks the credentials form: registry token, identity token, username/password, auth. Null: anonymous. */
export function resolveCredentials(c: RegistryCredentials | null | undefined): ResolvedCredentials | null {
  if (!c) return null;
  if (c.registryToken) return { kind: 'bearer', token: c.registryToken };
  if (c.identityToken) return { kind: 'refresh', refreshToken: c.identityToken };
  if (c.username) return { kind: 'basic', username: c.username, password: c.password ?? '' };
  if (c.auth) {
    const decoded = Buffer.from(c.auth, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon <= 0) {
      throw new RegistryAuthError('auth is not base64 of "username:password"', 'unauthenticated');
    }
    return { kind: 'basic', username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
  }
  return null;
}

export function basicHeader(username: string, password: string): string {
  return `Basic ${Buffer.from(`${username}:${password}`, 'utf8').toString('base64')}`;
}

/** The scope a pull needs. */
export function pullScope(repository: string): string {
  return `repository:${repository}:pull`;
}

interface CachedToken {
  token: string;
  /** ms since the epoch. */
  expiresAt: number;
}

/** Token lifetime when the server does not say (the docker token spec's default). */
const DEFAULT_EXPIRES_IN_S = 60;
/** Stop using a token this long before it expires: the request must arrive while it is valid. */
const EXPIRY_MARGIN_MS = 5_000;
const MAX_TOKEN_RESPONSE_BYTES = 1024 * 1024;
const MAX_CACHED_TOKENS = 512;

export interface TokenRequest {
  challenge: Challenge;
  /** Used when the challenge has no scope of its own. */
  scope: string;
  credentials: ResolvedCredentials | null;
  /** Whether a cached token may answer; false after the registry refused the cached one. */
  useCache: boolean;
  /** Skip TLS verification for the token endpoint (only when it is on the registry's own host). */
  skipVerify: boolean;
  timeoutMs: number;
}

/**
 * Bearer tokens, cached per (realm, service, scope, credentials) until shortly before they expire.
 * The credentials are part of the key: a token fetched with one pod's pull secret must never
 * authorize another pod's anonymous pull.
 */
export class TokenSource {
  private readonly cache = new Map<string, CachedToken>();
  private readonly inflight = new SingleFlight<CachedToken>();

  constructor(
    private readonly transport: HttpTransport,
    private readonly now: () => number = Date.now,
  ) {}

  async token(req: TokenRequest): Promise<string> {
    const realm = req.challenge.params.realm;
    if (!realm) throw new RegistryError('Bearer challenge without a realm');
    const service = req.challenge.params.service ?? '';
    const scope = req.challenge.params.scope ?? req.scope;
    const key = [realm, service, scope, credentialsKey(req.credentials)].join('\n');
    const cached = this.cache.get(key);
    if (req.useCache && cached && cached.expiresAt > this.now()) return cached.token;

    // Layers are fetched in parallel: let them share one token request instead of racing. It
    // takes no abort signal, so one pull giving up cannot fail another's; timeoutMs bounds it.
    const fetched = await this.inflight.run(key, async () => {
      const token = await this.fetch(realm, service, scope, req);
      this.remember(key, token);
      return token;
    });
    return fetched.token;
  }

  /** Drops a token the registry refused, so the next request fetches a fresh one. */
  forget(token: string): void {
    for (const [key, value] of this.cache) if (value.token === token) this.cache.delete(key);
  }

  private remember(key: string, token: CachedToken): void {
    if (this.cache.size >= MAX_CACHED_TOKENS) {
      const now = this.now();
      for (const [k, v] of this.cache) if (v.expiresAt <= now) this.cache.delete(k);
      // Still full: drop the oldest entry (Map keeps insertion order).
      const oldest = this.cache.keys().next();
      if (this.cache.size >= MAX_CACHED_TOKENS && !oldest.done) this.cache.delete(oldest.value);
    }
    this.cache.set(key, token);
  }

  private async fetch(
    realm: string,
    service: string,
    scope: string,
    req: TokenRequest,
  ): Promise<CachedToken> {
    let realmUrl: URL;
    try {
      realmUrl = new URL(realm);
    } catch {
      throw new RegistryError(`token realm "${realm}" is not a URL`);
    }
    if (realmUrl.protocol !== 'http:' && realmUrl.protocol !== 'https:') {
      throw new RegistryError(`token realm "${realm}" is not an http(s) URL`);
    }
    const creds = req.credentials;
    if (creds?.kind === 'refresh') {
      const viaOAuth = await this.post(realmUrl, service, scope, creds.refreshToken, req);
      if (viaOAuth) return viaOAuth;
      // No OAuth2 endpoint: send the identity token as a password, as docker does.
      return this.get(realmUrl, service, scope, basicHeader('<token>', creds.refreshToken), req);
    }
    const authorization = creds?.kind === 'basic' ? basicHeader(creds.username, creds.password) : undefined;
    return this.get(realmUrl, service, scope, authorization, req);
  }

  private async get(
    realm: URL,
    service: string,
    scope: string,
    authorization: string | undefined,
    req: TokenRequest,
  ): Promise<CachedToken> {
    const url = new URL(realm);
    if (service) url.searchParams.set('service', service);
    for (const s of scope.split(' ').filter(Boolean)) url.searchParams.append('scope', s);
    const res = await this.transport
      .request({
        url: url.toString(),
        headers: authorization ? { authorization } : {},
        skipVerify: req.skipVerify,
        timeoutMs: req.timeoutMs,
        idleTimeoutMs: req.timeoutMs,
        maxRedirects: 3,
      })
      .catch((err: unknown) => {
        throw new RegistryError(`token endpoint ${realm.origin}: ${errorMessage(err)}`, realm.origin);
      });
    return this.parse(res.status, await readBody(res, MAX_TOKEN_RESPONSE_BYTES, 'token response'), realm);
  }

  /** OAuth2 refresh-token grant; null when the realm does not speak it (404/405). */
  private async post(
    realm: URL,
    service: string,
    scope: string,
    refreshToken: string,
    req: TokenRequest,
  ): Promise<CachedToken | null> {
    const form = new URLSearchParams({
      grant_type: 'refresh_token',
      refresh_token: refreshToken,
      service,
      scope,
      client_id: 'berth',
    });
    const res = await this.transport
      .request({
        url: realm.toString(),
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: form.toString(),
        skipVerify: req.skipVerify,
        timeoutMs: req.timeoutMs,
        idleTimeoutMs: req.timeoutMs,
      })
      .catch((err: unknown) => {
        throw new RegistryError(`token endpoint ${realm.origin}: ${errorMessage(err)}`, realm.origin);
      });
    if (res.status === 404 || res.status === 405) {
      drain(res.body);
      return null;
    }
    return this.parse(res.status, await readBody(res, MAX_TOKEN_RESPONSE_BYTES, 'token response'), realm);
  }

  private parse(status: number, body: Buffer, realm: URL): CachedToken {
    if (status === 401 || status === 403) {
      throw new RegistryAuthError(
        `token endpoint ${realm.origin} refused the credentials (HTTP ${status})${detail(body)}`,
        status === 401 ? 'unauthenticated' : 'denied',
        realm.origin,
        status,
      );
    }
    if (status !== 200) {
      throw new RegistryError(
        `token endpoint ${realm.origin} answered HTTP ${status}${detail(body)}`,
        realm.origin,
        status,
      );
    }
    let doc: unknown;
    try {
      doc = JSON.parse(body.toString('utf8'));
    } catch {
      throw new RegistryError(
        `token endpoint ${realm.origin} sent a response that is not JSON`,
        realm.origin,
      );
    }
    const field = (name: string): unknown =>
      typeof doc === 'object' && doc !== null ? (doc as Record<string, unknown>)[name] : undefined;
    const tokenValue = field('token') ?? field('access_token');
    if (typeof tokenValue !== 'string' || tokenValue === '') {
      throw new RegistryError(`token endpoint ${realm.origin} sent no token`, realm.origin);
    }
    const expiresIn = field('expires_in');
    const seconds = typeof expiresIn === 'number' && expiresIn > 0 ? expiresIn : DEFAULT_EXPIRES_IN_S;
    // Counted from receipt, not issued_at: a registry clock behind ours must not make every token stale.
    const lifetime = seconds * 1000;
    return { token: tokenValue, expiresAt: this.now() + lifetime - Math.min(EXPIRY_MARGIN_MS, lifetime / 2) };
  }
}

/** Identifies credentials in the cache key without keeping the secret itself there. */
function credentialsKey(c: ResolvedCredentials | null): string {
  if (c === null) return 'anonymous';
  return createHash('sha256').update(JSON.stringify(c)).digest('hex');
}

/** A short excerpt of an error body, for messages. */
export function detail(body: Buffer): string {
  const text = body.toString('utf8').trim().replace(/\s+/g, ' ');
  return text === '' ? '' : `: ${text.length > 300 ? `${text.slice(0, 300)}...` : text}`;
}
