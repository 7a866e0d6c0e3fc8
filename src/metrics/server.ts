/**
 * The HTTP server Prometheus scrapes: GET /metrics in the text exposition format, and GET /healthz,
 * 200 "ok" while berthd is healthy, 503 with the reason otherwise. Scrapes that arrive while a
 * collection runs share it, so a burst of them costs berthd one.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseHostPort } from '../address.js';
import { errorMessage } from '../errors.js';
import { ConnectionGuard, HTTP_SERVER_OPTIONS, refuse } from '../http/guard.js';
import { isRefusal, parseTarget } from '../http/target.js';
import type { Logger } from '../log.js';
import { SingleFlight } from '../kit/single-flight.js';

export interface MetricsEndpoints {
  metrics(): Promise<string>;
  contentType: string;
  /** Why berthd is unhealthy, or undefined when it is healthy; a throw is a reason too. */
  unhealthy(): string | undefined;
}

export interface MetricsServerOptions {
  /** host:port; port 0 for a free one. */
  address: string;
  /** Open connections at most; past it the oldest idle one is closed. */
  maxConnections: number;
}

const METHODS = ['GET', 'HEAD'];

export class MetricsServer {
  private constructor(
    private readonly server: Server,
    private readonly guard: ConnectionGuard,
    readonly url: string,
  ) {}

  /** Listens on `opts.address` and logs the URL it serves. */
  static async start(
    opts: MetricsServerOptions,
    endpoints: MetricsEndpoints,
    logger: Logger,
  ): Promise<MetricsServer> {
    const { host, port } = parseHostPort(opts.address);
    const server = createServer(HTTP_SERVER_OPTIONS);
    const guard = new ConnectionGuard(server, {
      name: 'metrics',
      maxConnections: opts.maxConnections,
      logger,
    });
    const collections = new SingleFlight<Buffer>();
    // One collection at a time: a scrape that arrives while one runs gets its result. A finished
    // one is never reused, so that a scrape always sees what happened before it was sent.
    const scrape = (): Promise<Buffer> =>
      collections.run('metrics', async () => Buffer.from(await endpoints.metrics()));
    guard.onRequest((req, res) => answer(req, res, endpoints, scrape, logger));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host === '' ? '0.0.0.0' : host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const bound = server.address() as AddressInfo;
    const urlHost = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
    const url = `http://${urlHost}:${bound.port}`;
    logger.info({ url }, 'serving metrics');
    return new MetricsServer(server, guard, url);
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      this.guard.destroyAll();
    });
  }
}

async function answer(
  req: IncomingMessage,
  res: ServerResponse,
  endpoints: MetricsEndpoints,
  scrape: () => Promise<Buffer>,
  logger: Logger,
): Promise<void> {
  const target = parseTarget(req.url);
  if (isRefusal(target)) {
    refuse(res, target.status, target.message);
  } else if (target.path !== '/metrics' && target.path !== '/healthz') {
    refuse(res, 404, 'not found: try /metrics or /healthz');
  } else if (!METHODS.includes(req.method ?? '')) {
    refuse(res, 405, 'method not allowed', { Allow: METHODS.join(', ') });
  } else if (target.path === '/metrics') {
    let body: Buffer;
    try {
      body = await scrape();
    } catch (err) {
      logger.warn({ err: errorMessage(err) }, 'metrics collection failed');
      refuse(res, 500, errorMessage(err));
      return;
    }
    reply(res, 200, endpoints.contentType, body);
  } else {
    const reason = healthProblem(endpoints);
    reply(res, reason === undefined ? 200 : 503, 'text/plain', Buffer.from(`${reason ?? 'ok'}\n`));
  }
}

function healthProblem(endpoints: MetricsEndpoints): string | undefined {
  try {
    return endpoints.unhealthy();
  } catch (err) {
    return errorMessage(err);
  }
}

function reply(res: ServerResponse, code: number, contentType: string, body: Buffer): void {
  // The client left while the body was being collected: nothing to write to.
  if (res.destroyed) return;
  res.writeHead(code, { 'Content-Type': contentType, 'Content-Length': body.length });
  res.end(body);
}
