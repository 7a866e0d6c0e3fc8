/**
 * berth's streaming server: the URLs that Exec, Attach and PortForward answer with point here.
 * Each URL carries a single-use token for the request the RPC validated; the client upgrades the
 * connection to SPDY/3.1 (crictl, kubelet's proxy, kubectl before 1.30) or to WebSocket (newer
 * clients), negotiating a sub-protocol, and the session runs on the upgraded socket.
 * Unknown or expired token: 404, as kubelet's streaming package answers. What any connection may
 * hold is bounded by src/http/guard.ts, as for the metrics server.
 */
import { readFile } from 'node:fs/promises';
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import { parseHostPort } from '../address.js';
import { errorMessage } from '../errors.js';
import { beforeDeadline } from '../kit/deadline.js';
import { ConnectionGuard, HTTP_SERVER_OPTIONS, reasonPhrase, refuse } from '../http/guard.js';
import { isRefusal, parseTarget } from '../http/target.js';
import type { Logger } from '../log.js';
import { SpdyConnection } from '../spdy/connection.js';
import {
  SPDY_PORTFORWARD_PROTOCOL,
  WS_PORTFORWARD_PROTOCOLS,
  parsePort,
  servePortForwardSpdy,
  servePortForwardWebSocket,
} from './portforward.js';
import {
  SPDY_REMOTECOMMAND_PROTOCOLS,
  WS_REMOTECOMMAND_PROTOCOLS,
  spdySession,
  webSocketSession,
  type RemoteSession,
} from './remotecommand.js';
import { exitCodeStatus, internalErrorStatus, successStatus, type RemoteStatus } from './status.js';
import { TokenCache } from './tokens.js';
import type { StreamRequest, StreamRuntime } from './types.js';

export interface StreamingServerOptions {
  /** host:port to listen on; port 0 picks a free one. IPv6 hosts in brackets. */
  address: string;
  /** A stream with no traffic either way for this long is closed; 0 for never. */
  idleTimeoutMs: number;
  /** PEM files; both or neither. With them the server speaks HTTPS. */
  tlsCertFile?: string;
  tlsKeyFile?: string;
  /** How long a token stays usable (kubelet's streaming package: 1 minute). */
  tokenTtlMs?: number;
  /** How long a client may take to open the streams of a session (kubelet: 30 s). */
  streamCreationTimeoutMs?: number;
  /** Open connections at most, streams included; past it the oldest idle one is closed. */
  maxConnections: number;
}

const DEFAULT_TOKEN_TTL_MS = 60_000;
const DEFAULT_STREAM_CREATION_TIMEOUT_MS = 30_000;
/**
 * ws's bounds on what a WebSocket client sends; a breach closes the connection with the close code
 * for it (1009 a message too big, 1008 too many fragments, 1002 a malformed frame). A message is
 * at most a stdin chunk. No compression: nothing to inflate. A client that does not answer our
 * close frame is cut off after closeTimeout (ws reads it, its typings lack it), so that its
 * session's process is not kept waiting.
 */
const WS_SERVER_OPTIONS = {
  maxPayload: 4 * 1024 * 1024,
  maxFragments: 1024,
  perMessageDeflate: false,
  closeTimeout: 2_000,
};
/** /<kind>/<token>: a token is URL-safe base64; other paths never reach the token cache. */
const ROUTE = /^\/(exec|attach|portforward)\/([A-Za-z0-9_-]{1,64})$/;
const METHODS = ['GET', 'POST'];
/** A session's streams: error, stdin, stdout, stderr, resize, with room for a client that retries. */
const MAX_REMOTECOMMAND_STREAMS = 16;
/** Port-forward opens two streams per forwarded connection (each one a process dialing the pod). */
const MAX_PORTFORWARD_STREAMS = 256;
/** How long close() waits for sessions to kill their processes (a kill waits 2 s for runc at most). */
const SESSION_CLOSE_WAIT_MS = 5_000;

/** Where a request goes: its prepared stream request, or the HTTP refusal to answer with. */
type Routed =
  | { request: StreamRequest; query: string }
  | { status: number; message: string; headers?: Record<string, string> };

const NOT_FOUND = { status: 404, message: '404 page not found' } as const;

export class StreamingServer {
  private readonly tokens: TokenCache<StreamRequest>;
  private readonly guard: ConnectionGuard;
  /** Exec and attach sessions still running, so that close() can wait for their processes to go. */
  private readonly sessions = new Set<Promise<void>>();

  private constructor(
    private readonly server: Server,
    readonly baseUrl: string,
    private readonly runtime: StreamRuntime,
    private readonly opts: StreamingServerOptions,
    private readonly logger: Logger,
  ) {
    this.tokens = new TokenCache(opts.tokenTtlMs ?? DEFAULT_TOKEN_TTL_MS, { weigh: requestBytes });
    this.guard = new ConnectionGuard(server, {
      name: 'streaming',
      maxConnections: opts.maxConnections,
      logger,
    });
    this.guard.onRequest((req, res) => this.onRequest(req, res));
    this.guard.onUpgrade((req, socket, head) => this.onUpgrade(req, socket, head));
  }

  static async start(
    opts: StreamingServerOptions,
    runtime: StreamRuntime,
    logger: Logger,
  ): Promise<StreamingServer> {
    const parsed = parseHostPort(opts.address);
    const host = parsed.host === '' ? '0.0.0.0' : parsed.host;
    const port = parsed.port;
    const tls = opts.tlsCertFile && opts.tlsKeyFile;
    const server = tls
      ? createHttpsServer({
          ...HTTP_SERVER_OPTIONS,
          cert: await readFile(opts.tlsCertFile ?? ''),
          key: await readFile(opts.tlsKeyFile ?? ''),
          handshakeTimeout: HTTP_SERVER_OPTIONS.headersTimeout,
        })
      : createHttpServer(HTTP_SERVER_OPTIONS);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const bound = server.address() as AddressInfo;
    // A wildcard address is reachable on loopback, where kubelet on the same node connects.
    const urlHost = isWildcard(host) ? '127.0.0.1' : host;
    const baseUrl = `${tls ? 'https' : 'http'}://${urlHost.includes(':') ? `[${urlHost}]` : urlHost}:${bound.port}`;
    logger.info({ url: baseUrl, tls: Boolean(tls) }, 'serving streams');
    return new StreamingServer(server, baseUrl, runtime, opts, logger);
  }

  /** The URL a client connects to for `req`; usable once, within the token TTL. */
  url(req: StreamRequest): string {
    return `${this.baseUrl}/${req.kind}/${this.tokens.insert(req)}`;
  }

  /**
   * Stops listening and closes every stream: their clients see the connection end, and each
   * session kills its process; close() waits for that (bounded), so none outlives berthd.
   */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.guard.destroyAll();
    this.tokens.clear();
    await beforeDeadline(Promise.allSettled([...this.sessions]), SESSION_CLOSE_WAIT_MS, undefined, {
      ref: false,
    });
    await closed;
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const routed = this.route(req);
    if ('status' in routed) {
      refuse(res, routed.status, routed.message, routed.headers);
      return;
    }
    refuse(res, 400, 'unable to upgrade: the request is not an upgrade to SPDY/3.1 or websocket');
  }

  /**
   * Consumes the token of GET or POST /<kind>/<token>. A path that is no route is a 404 (the token
   * untouched), another method on a route a 405, an unknown, used or expired token a 404.
   */
  private route(req: IncomingMessage): Routed {
    const target = parseTarget(req.url);
    if (isRefusal(target)) return target;
    const [, kind, token] = ROUTE.exec(target.path) ?? [];
    if (kind === undefined || token === undefined) return NOT_FOUND;
    if (!METHODS.includes(req.method ?? '')) {
      return {
        status: 405,
        message: `method ${req.method ?? ''} not allowed`,
        headers: { Allow: METHODS.join(', ') },
      };
    }
    const request = this.tokens.consume(token);
    return request?.kind === kind ? { request, query: target.query } : NOT_FOUND;
  }

  private async onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const routed = this.route(req);
    if ('status' in routed) {
      rejectUpgrade(socket, routed.status, routed.message, headerLines(routed.headers));
      return;
    }
    const { request, query } = routed;
    const upgrade = (req.headers.upgrade ?? '').toLowerCase();
    if (upgrade === 'websocket') {
      await this.upgradeWebSocket(req, socket, head, request, query);
    } else if (upgrade === 'spdy/3.1') {
      this.upgradeSpdy(req, socket, head, request);
    } else {
      rejectUpgrade(
        socket,
        400,
        `unable to upgrade: unsupported upgrade ${JSON.stringify(req.headers.upgrade ?? '')}`,
      );
    }
  }

  private upgradeSpdy(req: IncomingMessage, socket: Duplex, head: Buffer, request: StreamRequest): void {
    const offered = listHeader(req.headers['x-stream-protocol-version']);
    const supported: readonly string[] =
      request.kind === 'portforward' ? [SPDY_PORTFORWARD_PROTOCOL] : SPDY_REMOTECOMMAND_PROTOCOLS;
    if (offered.length === 0) {
      rejectUpgrade(socket, 400, 'unable to upgrade: X-Stream-Protocol-Version is required');
      return;
    }
    const protocol = offered.find((p) => supported.includes(p));
    if (!protocol) {
      rejectUpgrade(
        socket,
        403,
        `unable to upgrade: unable to negotiate protocol: client supports [${offered.join(' ')}], server accepts [${supported.join(' ')}]`,
        supported.map((p) => `X-Accepted-Stream-Protocol-Versions: ${p}`),
      );
      return;
    }
    socket.write(
      'HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n' +
        `X-Stream-Protocol-Version: ${protocol}\r\n\r\n`,
    );
    const conn = new SpdyConnection(socket, {
      role: 'server',
      idleTimeoutMs: this.opts.idleTimeoutMs,
      maxStreams: request.kind === 'portforward' ? MAX_PORTFORWARD_STREAMS : MAX_REMOTECOMMAND_STREAMS,
    });
    conn.on('error', (err) => this.logger.debug({ err: errorMessage(err) }, 'SPDY connection failed'));
    // Upgraded but with no stream open, a connection holds no session's work yet (or any more):
    // past the cap it may go, or clients that upgrade and stay silent lock every exec out.
    this.guard.closableWhen(socket, () => conn.openStreams === 0);
    if (request.kind === 'portforward') {
      servePortForwardSpdy(conn, request, this.runtime, this.streamCreationTimeoutMs(), this.logger);
    } else {
      const session = spdySession(conn, protocol, request, this.streamCreationTimeoutMs());
      this.trackSession(this.runSession(request, session));
    }
    conn.feed(head);
  }

  private async upgradeWebSocket(
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    request: StreamRequest,
    query: string,
  ): Promise<void> {
    const offered = listHeader(req.headers['sec-websocket-protocol']);
    const supported: readonly string[] =
      request.kind === 'portforward' ? WS_PORTFORWARD_PROTOCOLS : WS_REMOTECOMMAND_PROTOCOLS;
    // No sub-protocol at all is kubelet's "" protocol: binary channels, v1 behaviour.
    const protocol = offered.length === 0 ? '' : offered.find((p) => supported.includes(p));
    if (protocol === undefined) {
      rejectUpgrade(
        socket,
        400,
        `unable to upgrade: requested protocol(s) are not supported: [${offered.join(' ')}]; supports [${supported.join(' ')}]`,
      );
      return;
    }
    let ports: number[] = [];
    if (request.kind === 'portforward') {
      try {
        ports = queryPorts(query, request.ports);
      } catch (err) {
        rejectUpgrade(socket, 400, errorMessage(err));
        return;
      }
    }
    // ws is loaded by the first WebSocket client: a berthd nobody execs into does not hold it.
    let ws: typeof import('ws');
    try {
      ws = await import('ws');
    } catch (err) {
      rejectUpgrade(socket, 500, `websocket support did not load: ${errorMessage(err)}`);
      return;
    }
    // ws picks the protocol through this hook; the choice was made above.
    const wss = new ws.WebSocketServer({
      ...WS_SERVER_OPTIONS,
      noServer: true,
      handleProtocols: () => protocol || false,
    });
    // A handshake ws refuses (bad key or version, not GET) is answered and closed by ws itself.
    wss.handleUpgrade(req, socket, head, (conn: WebSocket) => {
      wss.close();
      if (this.opts.idleTimeoutMs > 0 && 'setTimeout' in socket) {
        (socket as Socket).setTimeout(this.opts.idleTimeoutMs, () => conn.terminate());
      }
      conn.on('error', (err) => this.logger.debug({ err: errorMessage(err) }, 'websocket failed'));
      if (request.kind === 'portforward') {
        servePortForwardWebSocket(conn, protocol, ports, request, this.runtime, this.logger);
      } else {
        this.trackSession(
          this.runSession(request, Promise.resolve(webSocketSession(conn, protocol, request))),
        );
      }
    });
  }

  private trackSession(session: Promise<void>): void {
    this.sessions.add(session);
    void session.finally(() => this.sessions.delete(session));
  }

  private async runSession(
    request: Extract<StreamRequest, { kind: 'exec' | 'attach' }>,
    pending: Promise<RemoteSession>,
  ): Promise<void> {
    let session: RemoteSession;
    try {
      session = await pending;
    } catch (err) {
      this.logger.debug({ err: errorMessage(err) }, 'stream session not established');
      return;
    }
    const started = Date.now();
    let status: RemoteStatus;
    try {
      if (request.kind === 'exec') {
        const { exitCode } = await this.runtime.exec(request, session.io);
        status = exitCode === 0 ? successStatus() : exitCodeStatus(exitCode);
      } else {
        await this.runtime.attach(request, session.io);
        status = successStatus();
      }
    } catch (err) {
      const what = request.kind === 'exec' ? 'executing command in container' : 'attaching to container';
      status = internalErrorStatus(`error ${what}: ${errorMessage(err)}`);
    }
    this.logger.debug(
      {
        kind: request.kind,
        container: request.containerId,
        ms: Date.now() - started,
        status: status.reason ?? status.status,
      },
      'stream session ended',
    );
    await session.finish(status);
  }

  private streamCreationTimeoutMs(): number {
    return this.opts.streamCreationTimeoutMs ?? DEFAULT_STREAM_CREATION_TIMEOUT_MS;
  }
}

function rejectUpgrade(socket: Duplex, code: number, message: string, extraHeaders: string[] = []): void {
  const body = `${message}\n`;
  socket.end(
    [
      `HTTP/1.1 ${code} ${reasonPhrase(code)}`,
      'Content-Type: text/plain; charset=utf-8',
      `Content-Length: ${Buffer.byteLength(body)}`,
      'Connection: close',
      ...extraHeaders,
      '',
      body,
    ].join('\r\n'),
  );
}

function headerLines(headers: Record<string, string> = {}): string[] {
  return Object.entries(headers).map(([name, value]) => `${name}: ${value}`);
}

/** A header that may be repeated or comma-joined (Node joins repeats with ", "). */
function listHeader(value: string | string[] | undefined): string[] {
  const joined = Array.isArray(value) ? value.join(',') : (value ?? '');
  return joined
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/** WebSocket port-forward ports: the URL's `port` parameters, else the ports the RPC named. */
function queryPorts(query: string, requested: number[]): number[] {
  const values = new URLSearchParams(query).getAll('port');
  const ports = values.flatMap((v) => v.split(',')).map((p) => parsePort(p.trim()));
  const chosen = ports.length > 0 ? ports : requested;
  if (chosen.length === 0) throw new Error('query parameter "port" is required');
  for (const p of chosen) {
    if (requested.length > 0 && !requested.includes(p)) throw new Error(`port ${p} was not requested`);
  }
  return chosen;
}

function isWildcard(host: string): boolean {
  return host === '0.0.0.0' || host === '::' || host === '[::]';
}

/** About what a prepared request holds, for the token cache's bound: an exec's command line. */
function requestBytes(req: StreamRequest): number {
  if (req.kind === 'exec') return req.cmd.reduce((n, arg) => n + arg.length + 16, 0);
  return req.kind === 'portforward' ? req.ports.length * 8 : 0;
}
