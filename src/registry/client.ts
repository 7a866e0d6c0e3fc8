/**
 * Pulls manifests and blobs over the registry HTTP API (OCI distribution spec), trying each
 * endpoint for the registry in turn: its mirrors, then the registry itself.
 */
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { BerthError, errorMessage } from '../errors.js';
import { formatReference, isDigest, referenceName, type ImageReference } from './reference.js';
import { MANIFEST_MEDIA_TYPES, manifestMediaType, type Descriptor } from './manifest.js';
import type { Logger } from '../log.js';
import {
  basicHeader,
  detail,
  parseWwwAuthenticate,
  pullScope,
  resolveCredentials,
  TokenSource,
  type Challenge,
  type ResolvedCredentials,
} from './auth.js';
import {
  ManifestTooLargeError,
  RegistryAuthError,
  RegistryError,
  RegistryNotFoundError,
  RegistryConnectError,
  RegistryUnavailableError,
  MirrorsNotFoundError,
  type EndpointFailure,
} from './errors.js';
import { endpointsFor, isMirrorsOnly, type RegistryHosts } from './hosts.js';
import { drain, HttpTransport, readBody, type HttpResponse } from './http.js';
import type { Endpoint, RegistryCredentials } from './types.js';

export type { Endpoint, RegistryCredentials } from './types.js';
export type { RegistryHosts } from './hosts.js';

export interface RegistryClientOptions {
  hosts: RegistryHosts;
  /** Deadline for each request's response headers, and for token requests. */
  timeoutMs: number;
  /** Longest silence while a body streams (default: timeoutMs). Blobs have no total deadline. */
  idleTimeoutMs?: number;
  logger?: Logger;
}

export interface FetchOptions {
  /** Endpoint URL to try first, e.g. the one that served the index this manifest belongs to. */
  preferEndpoint?: string;
  signal?: AbortSignal;
}

export interface FetchedManifest {
  /** Digest of `bytes` (sha256, or the algorithm of the requested digest). */
  digest: string;
  /** One of the four MEDIA_TYPES manifest/index types. */
  mediaType: string;
  bytes: Buffer;
  /** Base URL of the endpoint that served it; pass as preferEndpoint for its children. */
  endpoint: string;
}

export interface FetchedBlob {
  /** The blob's bytes, unverified: the caller checks digest and size while writing. */
  stream: Readable;
  endpoint: string;
  /** Content-Length when the server sent one (already checked against descriptor.size). */
  size: number | null;
}

/** containerd's limit: a manifest is metadata, and anything bigger is an attack or a mistake. */
const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
const manifestTooLarge = (message: string, url: string): Error => new ManifestTooLargeError(message, url);
const MAX_ERROR_BODY_BYTES = 64 * 1024;
const MAX_REDIRECTS = 5;

/** An endpoint's auth state: the last challenge it sent, so later requests authenticate up front. */
interface KnownChallenge {
  challenge: Challenge;
}

export class RegistryClient {
  private readonly transport = new HttpTransport();
  private readonly tokens: TokenSource;
  private readonly challenges = new Map<string, KnownChallenge>();
  private readonly hosts: RegistryHosts;
  private readonly timeoutMs: number;
  private readonly idleTimeoutMs: number;
  private readonly logger: Logger | undefined;

  constructor(opts: RegistryClientOptions) {
    this.hosts = opts.hosts;
    this.timeoutMs = opts.timeoutMs;
    this.idleTimeoutMs = opts.idleTimeoutMs ?? opts.timeoutMs;
    this.logger = opts.logger;
    this.tokens = new TokenSource(this.transport);
  }

  /** The manifest or index `ref` names: by digest when it has one (the digest wins over a tag). */
  async fetchManifest(
    ref: ImageReference,
    auth?: RegistryCredentials,
    opts: FetchOptions = {},
  ): Promise<FetchedManifest> {
    if (ref.digest !== null) return this.fetchManifestByDigest(ref, ref.digest, auth, opts);
    if (ref.tag === null) {
      throw new RegistryError(`${referenceName(ref)}: reference has neither tag nor digest`);
    }
    return this.manifest(ref, ref.tag, null, formatReference(ref), auth, opts);
  }

  /** A manifest by digest, e.g. an index's child; its bytes must hash to `digest`. */
  async fetchManifestByDigest(
    ref: ImageReference,
    digest: string,
    auth?: RegistryCredentials,
    opts: FetchOptions = {},
  ): Promise<FetchedManifest> {
    checkDigest(digest, referenceName(ref));
    return this.manifest(ref, digest, digest, `${referenceName(ref)}@${digest}`, auth, opts);
  }

  /**
   * Streams a blob. Redirects (to object storage) are followed. Only the start of the transfer
   * moves between endpoints; a failure mid-stream is the reader's to handle.
   */
  async fetchBlob(
    ref: ImageReference,
    descriptor: Descriptor,
    auth?: RegistryCredentials,
    opts: FetchOptions = {},
  ): Promise<FetchedBlob> {
    const what = `${referenceName(ref)}@${descriptor.digest}`;
    checkDigest(descriptor.digest, referenceName(ref));
    if (!Number.isSafeInteger(descriptor.size) || descriptor.size < 0) {
      throw new RegistryError(`${what}: descriptor size ${descriptor.size} is not a byte count`);
    }
    return this.tryEndpoints(ref.registry, what, opts, async (endpoint) => {
      const res = await this.get(endpoint, ref.repository, `blobs/${descriptor.digest}`, {}, auth, opts);
      if (res.status === 404) {
        drain(res.body);
        return this.notFound(endpoint, 'blob', what);
      }
      if (res.status !== 200) return this.unexpected(endpoint, res, what);
      const length = contentLength(res);
      if (length !== null && length !== descriptor.size) {
        drain(res.body);
        throw new RegistryError(
          `${what}: ${endpoint.url} sent ${length} bytes, the descriptor says ${descriptor.size}`,
          endpoint.url,
        );
      }
      return { stream: res.body, endpoint: endpoint.url, size: length };
    });
  }

  /** Closes pooled connections. */
  close(): void {
    this.transport.close();
  }

  private async manifest(
    ref: ImageReference,
    reference: string,
    expectedDigest: string | null,
    what: string,
    auth: RegistryCredentials | undefined,
    opts: FetchOptions,
  ): Promise<FetchedManifest> {
    const headers = { accept: MANIFEST_MEDIA_TYPES.join(', ') };
    return this.tryEndpoints(ref.registry, what, opts, async (endpoint) => {
      const res = await this.get(endpoint, ref.repository, `manifests/${reference}`, headers, auth, opts);
      if (res.status === 404) {
        drain(res.body);
        return this.notFound(endpoint, 'manifest', what);
      }
      if (res.status !== 200) return this.unexpected(endpoint, res, what);
      const bytes = await readBody(res, MAX_MANIFEST_BYTES, `manifest ${what}`, manifestTooLarge);
      const algorithm = expectedDigest?.split(':')[0] ?? 'sha256';
      const digest = `${algorithm}:${createHash(algorithm).update(bytes).digest('hex')}`;
      if (expectedDigest !== null && digest !== expectedDigest) {
        throw new RegistryError(
          `${what}: ${endpoint.url} sent a manifest whose digest is ${digest}`,
          endpoint.url,
        );
      }
      const mediaType = manifestMediaType(bytes, res.headers['content-type'], what, endpoint.url);
      return { digest, mediaType, bytes, endpoint: endpoint.url };
    });
  }

  /**
   * Runs `attempt` against each endpoint in order until one succeeds. Auth failures and the
   * origin's "not found" are final; anything else moves on to the next endpoint.
   */
  private async tryEndpoints<T>(
    registry: string,
    what: string,
    opts: FetchOptions,
    attempt: (endpoint: Endpoint) => Promise<T>,
  ): Promise<T> {
    const endpoints = endpointsFor(this.hosts, registry);
    if (opts.preferEndpoint !== undefined) {
      const i = endpoints.findIndex((e) => e.url === opts.preferEndpoint);
      if (i > 0) endpoints.unshift(...endpoints.splice(i, 1));
    }
    const failures: EndpointFailure[] = [];
    for (const endpoint of endpoints) {
      opts.signal?.throwIfAborted();
      try {
        return await attempt(endpoint);
      } catch (err) {
        if (opts.signal?.aborted || isFinal(err, endpoint)) throw err;
        // Socket errors (ECONNREFUSED, TLS) become RegistryErrors that say what was being fetched.
        const error =
          err instanceof BerthError
            ? err
            : new RegistryConnectError(`${what}: ${endpoint.url}: ${errorMessage(err)}`, endpoint.url);
        failures.push({ endpoint: endpoint.url, error });
        this.logger?.warn(
          { endpoint: endpoint.url, role: endpoint.role, err: error.message },
          `registry: ${what}`,
        );
      }
    }
    if (isMirrorsOnly(this.hosts, registry)) throw mirrorsOnlyFailure(registry, what, failures);
    const [only] = failures;
    if (failures.length === 1 && only) throw only.error;
    throw new RegistryUnavailableError(what, failures);
  }

  private notFound(endpoint: Endpoint, kind: 'manifest' | 'blob', what: string): never {
    throw new RegistryNotFoundError(kind, what, endpoint.url);
  }

  private async unexpected(endpoint: Endpoint, res: HttpResponse, what: string): Promise<never> {
    const body = await readBody(res, MAX_ERROR_BODY_BYTES, 'error response').catch(() => Buffer.alloc(0));
    throw new RegistryError(
      `${what}: ${endpoint.url} answered HTTP ${res.status}${registryErrorText(body)}`,
      endpoint.url,
      res.status,
    );
  }

  /**
   * GET `${endpoint}/v2/<repository>/<path>`, authenticating as the registry asks. Throws
   * RegistryAuthError when the registry refuses the credentials we have.
   */
  private async get(
    endpoint: Endpoint,
    repository: string,
    path: string,
    headers: Record<string, string>,
    auth: RegistryCredentials | undefined,
    opts: FetchOptions,
  ): Promise<HttpResponse> {
    const url = `${endpoint.url}/v2/${repository}/${path}`;
    // Request credentials are for the registry the image names; a mirror is another host and
    // gets only what the hosts file gives it.
    // Empty request credentials (an AuthConfig with no field set) leave the configured ones in force.
    const creds =
      (endpoint.role === 'origin' ? resolveCredentials(auth) : null) ??
      resolveCredentials(endpoint.credentials);
    const scope = pullScope(repository);

    let authorization = await this.upFront(endpoint, creds, scope);
    let res = await this.send(url, endpoint, headers, authorization, opts);
    if (res.status === 401 && creds?.kind !== 'bearer') {
      const challenges = parseWwwAuthenticate(String(res.headers['www-authenticate'] ?? ''));
      drain(res.body);
      if (authorization?.startsWith('Bearer ')) this.tokens.forget(authorization.slice('Bearer '.length));
      authorization = await this.answer(endpoint, challenges, creds, scope, authorization === undefined);
      res = await this.send(url, endpoint, headers, authorization, opts);
    }
    if (res.status === 401 || res.status === 403) {
      const body = await readBody(res, MAX_ERROR_BODY_BYTES, 'error response').catch(() => Buffer.alloc(0));
      const who = creds === null ? 'anonymous pull' : 'the credentials';
      const hint =
        res.status === 401
          ? creds === null
            ? ' (the repository may not exist, or needs credentials)'
            : ' (wrong credentials, or the repository does not exist)'
          : '';
      throw new RegistryAuthError(
        `${endpoint.url}/v2/${repository}: ${who} refused with HTTP ${res.status}${hint}${registryErrorText(body)}`,
        res.status === 401 ? 'unauthenticated' : 'denied',
        endpoint.url,
        res.status,
      );
    }
    return res;
  }

  private async send(
    url: string,
    endpoint: Endpoint,
    headers: Record<string, string>,
    authorization: string | undefined,
    opts: FetchOptions,
  ): Promise<HttpResponse> {
    const res = await this.transport.request({
      url,
      headers: authorization ? { ...headers, authorization } : headers,
      skipVerify: endpoint.skipVerify,
      timeoutMs: this.timeoutMs,
      idleTimeoutMs: this.idleTimeoutMs,
      maxRedirects: MAX_REDIRECTS,
      signal: opts.signal,
    });
    this.logger?.debug({ url, status: res.status, from: res.url }, 'registry request');
    return res;
  }

  /** Authorization to send before being asked: a given bearer token, or what the endpoint asked for last time. */
  private async upFront(
    endpoint: Endpoint,
    creds: ResolvedCredentials | null,
    scope: string,
  ): Promise<string | undefined> {
    if (creds?.kind === 'bearer') return `Bearer ${creds.token}`;
    const known = this.challenges.get(endpoint.url);
    if (!known) return undefined;
    return this.answer(endpoint, [known.challenge], creds, scope, true);
  }

  /** Answers a challenge: a token from the realm for Bearer, our credentials for Basic. */
  private async answer(
    endpoint: Endpoint,
    challenges: Challenge[],
    creds: ResolvedCredentials | null,
    scope: string,
    useCache: boolean,
  ): Promise<string> {
    const bearer = challenges.find((c) => c.scheme === 'bearer');
    const basic = challenges.find((c) => c.scheme === 'basic');
    if (bearer) {
      // Remembered without its scope and error: those belong to this request's repository only.
      const { realm: knownRealm, service } = bearer.params;
      this.challenges.set(endpoint.url, {
        challenge: {
          scheme: 'bearer',
          params: {
            ...(knownRealm !== undefined ? { realm: knownRealm } : {}),
            ...(service !== undefined ? { service } : {}),
          },
        },
      });
      const realm = bearer.params.realm;
      const sameHost =
        realm !== undefined && URL.canParse(realm) && new URL(realm).origin === new URL(endpoint.url).origin;
      const token = await this.tokens.token({
        challenge: bearer,
        scope,
        credentials: creds,
        useCache,
        skipVerify: endpoint.skipVerify && sameHost,
        timeoutMs: this.timeoutMs,
      });
      return `Bearer ${token}`;
    }
    if (basic) {
      this.challenges.set(endpoint.url, { challenge: basic });
      if (creds?.kind === 'basic') return basicHeader(creds.username, creds.password);
      if (creds?.kind === 'refresh') return basicHeader('<token>', creds.refreshToken);
      throw new RegistryAuthError(
        `${endpoint.url} requires credentials (Basic auth) and none were given`,
        'unauthenticated',
        endpoint.url,
        401,
      );
    }
    const offered = challenges.map((c) => c.scheme).join(', ') || 'none';
    throw new RegistryAuthError(
      `${endpoint.url} answered 401 with no challenge berth supports (offered: ${offered})`,
      'unauthenticated',
      endpoint.url,
      401,
    );
  }
}

/** Digests come from registry-served JSON and end up in URL paths: only well-formed ones pass. */
function checkDigest(digest: string, name: string): void {
  if (!isDigest(digest)) throw new RegistryError(`${name}: invalid digest ${JSON.stringify(digest)}`);
}

/**
 * Failures after which no other endpoint is tried: a refusal (trying elsewhere would not make the
 * credentials right), and the origin's "not found". A mirror that lacks something says nothing
 * about the origin.
 */
function isFinal(err: unknown, endpoint: Endpoint): boolean {
  return (
    err instanceof RegistryAuthError || (err instanceof RegistryNotFoundError && endpoint.role === 'origin')
  );
}

/**
 * Every mirror failed and the origin is off limits: the error must say so, or whoever reads it
 * goes looking for why the origin refused.
 */
function mirrorsOnlyFailure(registry: string, what: string, failures: readonly EndpointFailure[]): Error {
  const note = ` (mirrors_only is set for ${registry}, so its origin was not tried)`;
  if (failures.length === 0) {
    return new RegistryError(`${what}: no mirror is configured${note}`);
  }
  if (failures.every((f) => f.error instanceof RegistryNotFoundError)) {
    return new MirrorsNotFoundError(what, failures, note);
  }
  return new RegistryUnavailableError(what, failures, note);
}

function contentLength(res: HttpResponse): number | null {
  const value = res.headers['content-length'];
  if (value === undefined) return null;
  const n = Number(value);
  return Number.isSafeInteger(n) && n >= 0 ? n : null;
}

/** The registry's JSON error list ({"errors":[{"code","message"}]}) as text, else the body's start. */
function registryErrorText(body: Buffer): string {
  try {
    const doc = JSON.parse(body.toString('utf8')) as { errors?: { code?: unknown; message?: unknown }[] };
    if (Array.isArray(doc.errors) && doc.errors.length > 0) {
      return `: ${doc.errors.map((e) => [e.code, e.message].filter((x) => typeof x === 'string').join(' ')).join('; ')}`;
    }
  } catch {
    // Not the JSON error format: show the text instead.
  }
  return detail(body);
}
