/**
 * The HTTP layer under the registry client: node:http/https (so TLS verification can be turned
 * off per endpoint, which global fetch cannot do without the undici package), deadlines, redirects.
 */
import http, { type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import https from 'node:https';
import type { Readable } from 'node:stream';
import { BERTH_VERSION } from '../version.js';
import { RegistryError } from './errors.js';

export interface HttpRequest {
  url: string;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: string;
  /** Skip certificate verification, for requests to this URL's origin only (not after a redirect elsewhere). */
  skipVerify?: boolean;
  /** Deadline for connecting and receiving the response headers. */
  timeoutMs: number;
  /**
   * Longest silence on the connection while the body streams. A large blob may take any time in
   * total; it only fails when it stops moving (or the reader stops reading) for this long.
   */
  idleTimeoutMs: number;
  /** Redirects to follow; registries send blobs to object storage this way. */
  maxRedirects?: number;
  signal?: AbortSignal;
}

export interface HttpResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** The URL that answered, after redirects. */
  url: string;
  body: Readable;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/**
 * Credentials meant for one origin, dropped on a redirect to another, as undici (global fetch)
 * drops them: presigned storage URLs carry their own authorization and reject ours, and no other
 * origin may see them.
 */
const ORIGIN_CREDENTIALS = new Set(['authorization', 'proxy-authorization', 'cookie']);

/** Keep-alive connection pools; one per TLS policy so a skip-verify socket never serves a verified request. */
export class HttpTransport {
  private readonly httpAgent = new http.Agent({ keepAlive: true });
  private readonly httpsAgent = new https.Agent({ keepAlive: true });
  private readonly insecureAgent = new https.Agent({ keepAlive: true, rejectUnauthorized: false });

  /** Sends the request, following redirects. The caller must consume or discard (`drain`) the body. */
  async request(req: HttpRequest): Promise<HttpResponse> {
    const origin = new URL(req.url).origin;
    let url = new URL(req.url);
    let method = req.method ?? 'GET';
    let body = req.body;
    let headers: Record<string, string> = { 'user-agent': `berth/${BERTH_VERSION}`, ...req.headers };
    for (let hops = 0; ; hops++) {
      const sameOrigin = url.origin === origin;
      const res = await this.once(req, url, method, headers, body, sameOrigin && req.skipVerify === true);
      const status = res.statusCode ?? 0;
      const location = res.headers.location;
      if (!REDIRECTS.has(status) || location === undefined) {
        return { status, headers: res.headers, url: url.toString(), body: res };
      }
      drain(res);
      if (hops >= (req.maxRedirects ?? 0)) {
        throw new RegistryError(`too many redirects (last to ${location})`, origin, status);
      }
      const next = new URL(location, url);
      if (next.protocol !== 'http:' && next.protocol !== 'https:') {
        throw new RegistryError(`redirect to unsupported URL ${next.protocol}//${next.host}`, origin, status);
      }
      if (next.origin !== url.origin) {
        headers = Object.fromEntries(
          Object.entries(headers).filter(([k]) => !ORIGIN_CREDENTIALS.has(k.toLowerCase())),
        );
      }
      if (status === 303 && method === 'POST') {
        method = 'GET';
        body = undefined;
      }
      url = next;
    }
  }

  private once(
    req: HttpRequest,
    url: URL,
    method: string,
    headers: Record<string, string>,
    body: string | undefined,
    skipVerify: boolean,
  ): Promise<IncomingMessage> {
    const tls = url.protocol === 'https:';
    const agent = tls ? (skipVerify ? this.insecureAgent : this.httpsAgent) : this.httpAgent;
    const send = tls ? https.request : http.request;
    return new Promise((resolve, reject) => {
      let response: IncomingMessage | undefined;
      const outgoing = send(url, { method, headers, agent, signal: req.signal }, (res) => {
        clearTimeout(deadline);
        response = res;
        outgoing.setTimeout(req.idleTimeoutMs);
        resolve(res);
      });
      const deadline = setTimeout(() => {
        // Plain Error: the client wraps it with what it was fetching.
        outgoing.destroy(new Error(`no response within ${req.timeoutMs} ms`));
      }, req.timeoutMs);
      outgoing.on('timeout', () => {
        const err = new RegistryError(
          `transfer from ${url.origin} stalled: no data for ${req.idleTimeoutMs} ms`,
          url.origin,
        );
        if (response) response.destroy(err);
        else outgoing.destroy(err);
      });
      outgoing.on('error', (err) => {
        clearTimeout(deadline);
        reject(err);
      });
      outgoing.end(body);
    });
  }

  close(): void {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
    this.insecureAgent.destroy();
  }
}

/** Reads a whole (small) body; refuses more than `limit` bytes instead of buffering whatever comes. */
export async function readBody(
  res: HttpResponse,
  limit: number,
  what: string,
  /** The error for a body over `limit`: by default the registry's fault, a RegistryError. */
  tooLarge: (message: string, endpoint: string) => Error = (message, endpoint) =>
    new RegistryError(message, endpoint),
): Promise<Buffer> {
  const declared = Number(res.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    drain(res.body);
    throw tooLarge(`${what} is ${declared} bytes, more than the ${limit} allowed`, originOf(res.url));
  }
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of res.body) {
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string);
    total += buf.length;
    if (total > limit) {
      res.body.destroy();
      throw tooLarge(`${what} is more than the ${limit} bytes allowed`, originOf(res.url));
    }
    chunks.push(buf);
  }
  return Buffer.concat(chunks);
}

/** Discards a body we don't need, so the connection can go back to the pool. */
export function drain(body: Readable): void {
  body.on('error', () => {});
  body.resume();
}

function originOf(url: string): string {
  return new URL(url).origin;
}
