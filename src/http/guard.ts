/**
 * What berthd's HTTP listeners (the streaming server and the metrics server) do alike to stay up
 * whatever a client sends, and to keep answering everyone else meanwhile:
 *
 * - node's own limits (HTTP_SERVER_OPTIONS): header size, the time to send the headers and the
 *   whole request, how long a kept-alive connection may idle, how long a connection may go without
 *   a byte moving either way;
 * - a cap on open connections, upgraded ones included, so that idle sockets cannot use up berthd's
 *   file descriptors. A connection past the cap closes the oldest one that is not busy (no request
 *   being answered; upgraded, only if its protocol says it is idle, as a SPDY connection with no
 *   stream open): held-open idle sockets cannot lock a real client out;
 * - a bound on requests a connection may have waiting for their answers (pipelining): a client
 *   that sends thousands without reading the answers is cut off instead of queueing them all;
 * - malformed requests answered with the status HTTP defines for them, then the connection closed;
 * - a throw or rejection inside one request's or upgrade's handling ends that connection, logged.
 */
import type { IncomingMessage, Server, ServerOptions, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';

/**
 * Node's HTTP server options both listeners use. Requests here are a line and a few headers with
 * no body, so every bound is far above what a real client needs.
 */
export const HTTP_SERVER_OPTIONS = {
  maxHeaderSize: 16 * 1024,
  headersTimeout: 10_000,
  requestTimeout: 30_000,
  keepAliveTimeout: 5_000,
  // How often node looks for connections past headersTimeout or requestTimeout (default 30 s).
  connectionsCheckingInterval: 1_000,
  requireHostHeader: true,
} satisfies ServerOptions;

/** Headers past this many are dropped by node; the size bound above applies anyway. */
const MAX_HEADERS_COUNT = 100;
/** A connection with no byte moving either way this long is closed (before any upgrade). */
const INACTIVITY_MS = 60_000;
/** Unanswered requests one connection may have at once; more is a client not reading its answers. */
export const MAX_PENDING_REQUESTS = 8;
/** An error answer goes out with a FIN; a client that does not close its side is cut off after this. */
const ERROR_LINGER_MS = 2_000;

export interface GuardOptions {
  /** Which listener, in log lines: 'streaming' or 'metrics'. */
  name: string;
  maxConnections: number;
  logger: Logger;
}

interface Connection {
  key: string;
  socket: Duplex;
  /** Requests received whose responses have not closed yet. */
  pending: number;
  upgraded: boolean;
  /** Set by the upgraded protocol where it can tell: whether the connection serves nothing now. */
  idle?: () => boolean;
}

export type RequestHandler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;
export type UpgradeHandler = (req: IncomingMessage, socket: Duplex, head: Buffer) => void | Promise<void>;

export class ConnectionGuard {
  /** By peer address and port (the raw socket's and a TLS socket's alike); oldest first. */
  private readonly connections = new Map<string, Connection>();

  constructor(
    private readonly server: Server,
    private readonly opts: GuardOptions,
  ) {
    server.maxHeadersCount = MAX_HEADERS_COUNT;
    server.setTimeout(INACTIVITY_MS);
    // Before node's own listener: the cap is enforced before any parser is set up.
    server.prependListener('connection', (socket: Socket) => this.admit(socket));
    server.on('clientError', (err: Error, socket: Duplex) => this.clientError(err, socket));
    // CONNECT asks for a tunnel, which neither listener offers; node would drop it unanswered.
    server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
      socket.on('error', () => undefined);
      socket.end(statusOnly(405));
      setTimeout(() => socket.destroy(), ERROR_LINGER_MS).unref();
    });
    // Listening failures after start-up (accept errors): logged, the server keeps going.
    server.on('error', (err) =>
      opts.logger.error({ server: opts.name, err: errorMessage(err) }, 'listener error'),
    );
  }

  /** Serves every request with `handler`. */
  onRequest(handler: RequestHandler): void {
    this.server.on('request', (req: IncomingMessage, res: ServerResponse) => this.request(req, res, handler));
  }

  /** Serves every upgrade request with `handler`, which owns the socket from then on. */
  onUpgrade(handler: UpgradeHandler): void {
    this.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
      this.upgrade(req, socket, head, handler),
    );
  }

  /**
   * Lets the cap close upgraded connection `socket` whenever `idle` says it serves nothing: an
   * upgraded connection is otherwise busy for as long as it is open.
   */
  closableWhen(socket: Duplex, idle: () => boolean): void {
    const connection = this.connectionOf(socket);
    if (connection) connection.idle = idle;
  }

  /** Ends every connection, upgraded ones included. */
  destroyAll(): void {
    for (const { socket } of this.connections.values()) socket.destroy();
  }

  private admit(socket: Socket): void {
    const key = peerKey(socket);
    if (key === undefined) {
      // Already gone: nothing to serve.
      socket.destroy();
      return;
    }
    const connection: Connection = { key, socket, pending: 0, upgraded: false };
    this.connections.set(key, connection);
    socket.once('close', () => {
      if (this.connections.get(key) === connection) this.connections.delete(key);
    });
    if (this.connections.size <= this.opts.maxConnections) return;
    const victim = this.oldestIdle(connection) ?? connection;
    this.opts.logger.debug(
      {
        server: this.opts.name,
        max: this.opts.maxConnections,
        closed: victim === connection ? 'new' : 'idle',
      },
      'connection limit reached',
    );
    // Out of the count at once, not at its 'close': the next connection must not close another.
    this.connections.delete(victim.key);
    victim.socket.destroy();
  }

  private oldestIdle(except: Connection): Connection | undefined {
    for (const c of this.connections.values()) {
      if (c !== except && (c.upgraded ? (c.idle?.() ?? false) : c.pending === 0)) return c;
    }
    return undefined;
  }

  private request(req: IncomingMessage, res: ServerResponse, handler: RequestHandler): void {
    // A socket closed while node still parses the rest of its pipelined bytes: nothing to answer.
    if (req.socket.destroyed) return;
    req.on('error', () => undefined);
    res.on('error', (err) =>
      this.opts.logger.debug({ server: this.opts.name, err: errorMessage(err) }, 'response failed'),
    );
    const connection = this.connectionOf(req.socket);
    if (connection) {
      connection.pending++;
      res.once('close', () => connection.pending--);
      if (connection.pending > MAX_PENDING_REQUESTS) {
        this.opts.logger.debug(
          { server: this.opts.name, pending: connection.pending },
          'closing a connection that does not read its answers',
        );
        req.socket.destroy();
        return;
      }
    }
    if (req.httpVersionMajor !== 1) {
      refuse(res, 505, `HTTP/${req.httpVersion} is not supported`);
      return;
    }
    this.run(
      () => handler(req, res),
      req.socket,
      () => {
        if (res.headersSent) req.socket.destroy();
        else refuse(res, 500, 'internal error');
      },
    );
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, handler: UpgradeHandler): void {
    const connection = this.connectionOf(socket);
    if (connection) connection.upgraded = true;
    // Node has taken its own listeners off: an error before the handler's own would be unheard.
    socket.on('error', (err) =>
      this.opts.logger.debug(
        { server: this.opts.name, err: errorMessage(err) },
        'upgraded connection failed',
      ),
    );
    // The inactivity bound was for the HTTP exchange; the upgraded protocol sets its own.
    if ('setTimeout' in socket) (socket as Socket).setTimeout(0);
    this.run(
      () => handler(req, socket, head),
      socket,
      () => socket.destroy(),
    );
  }

  /**
   * Runs one connection's handling: whatever it throws ends that connection, never the daemon.
   * `onFailure` answers what it can; if that throws too, the socket is destroyed.
   */
  private run(work: () => void | Promise<void>, socket: Duplex, onFailure: () => void): void {
    const fail = (err: unknown): void => {
      this.opts.logger.warn({ server: this.opts.name, err: errorMessage(err) }, 'request handling failed');
      try {
        onFailure();
      } catch {
        socket.destroy();
      }
    };
    try {
      const done = work();
      if (done) done.catch(fail);
    } catch (err) {
      fail(err);
    }
  }

  private connectionOf(socket: Duplex): Connection | undefined {
    const key = peerKey(socket);
    return key === undefined ? undefined : this.connections.get(key);
  }

  /** A request node's parser refused, or a socket error before any request: answered as HTTP says. */
  private clientError(err: Error, socket: Duplex): void {
    const code = (err as NodeJS.ErrnoException).code ?? '';
    const answer = clientErrorStatus(err);
    this.opts.logger.debug({ server: this.opts.name, code, err: err.message }, 'malformed request');
    if (answer && socket.writable && (socket as Partial<Socket>).bytesWritten === 0) {
      socket.end(statusOnly(answer));
      setTimeout(() => socket.destroy(), ERROR_LINGER_MS).unref();
    } else {
      socket.destroy();
    }
  }
}

/** `address:port` of the peer; undefined once the socket is closed. */
function peerKey(socket: Duplex): string | undefined {
  const { remoteAddress, remotePort } = socket as Partial<Socket>;
  return remoteAddress === undefined || remotePort === undefined
    ? undefined
    : `${remoteAddress}|${remotePort}`;
}

/** The status for a parse error of node's (llhttp's HPE_* codes, node's timeouts); undefined for a network error. */
function clientErrorStatus(err: Error): number | undefined {
  const {
    code = '',
    bytesParsed,
    rawPacket,
  } = err as Error & {
    code?: string;
    bytesParsed?: number;
    rawPacket?: Buffer;
  };
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      // Still within the request line when the bound was hit: the target is what is too long.
      return rawPacket && !rawPacket.subarray(0, bytesParsed).includes('\n') ? 414 : 431;
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return 408;
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return 413;
    case 'HPE_INVALID_VERSION':
      // A well-formed version other than 1.x is one berth does not speak; anything else is malformed.
      return rawPacket && /^[^\r\n]* HTTP\/[02-9]\.\d\r\n/.test(rawPacket.toString('latin1', 0, 8192))
        ? 505
        : 400;
    case 'HPE_INVALID_METHOD':
      // A well-formed method token berth does not know is "not implemented"; anything else is malformed.
      return rawPacket && /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ /.test(rawPacket.toString('latin1', 0, 64))
        ? 501
        : 400;
    default:
      return code.startsWith('HPE_') ? 400 : undefined;
  }
}

const REASONS: Readonly<Record<number, string>> = {
  400: 'Bad Request',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  413: 'Content Too Large',
  414: 'URI Too Long',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  501: 'Not Implemented',
  505: 'HTTP Version Not Supported',
};

export function reasonPhrase(status: number): string {
  return REASONS[status] ?? 'Error';
}

function statusOnly(status: number): string {
  return `HTTP/1.1 ${status} ${reasonPhrase(status)}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`;
}

/** A plain-text error answer; the connection closes after it. */
export function refuse(
  res: ServerResponse,
  status: number,
  message: string,
  headers: Record<string, string> = {},
): void {
  // The client left already: nothing to write to.
  if (res.destroyed) return;
  const body = `${message}\n`;
  res.shouldKeepAlive = false;
  res.writeHead(status, {
    ...headers,
    'Content-Type': 'text/plain; charset=utf-8',
    'Content-Length': Buffer.byteLength(body),
  });
  res.end(body);
}
