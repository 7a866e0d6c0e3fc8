/**
 * The HTTP server Prometheus scrapes: GET /metrics in the text exposition format, and GET /healthz,
 * 200 "ok" while berthd is healthy, 503 with the reason otherwise.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseHostPort } from '../address.js';
import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';

export interface MetricsEndpoints {
  metrics(): Promise<string>;
  contentType: string;
  /** Why berthd is unhealthy, or undefined when it is healthy; a throw is a reason too. */
  unhealthy(): string | undefined;
}

export class MetricsServer {
  private constructor(
    private readonly server: Server,
    readonly url: string,
  ) {}

  /** Listens on `address` (host:port, port 0 for a free one) and logs the URL it serves. */
  static async start(address: string, endpoints: MetricsEndpoints, logger: Logger): Promise<MetricsServer> {
    const { host, port } = parseHostPort(address);
    const server = createServer((req, res) => {
      answer(req, res, endpoints).catch((err: unknown) => {
        logger.warn({ err: errorMessage(err) }, 'metrics request failed');
        if (!res.headersSent) reply(res, 500, 'text/plain', `${errorMessage(err)}\n`);
        else res.destroy();
      });
    });
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
    return new MetricsServer(server, url);
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }
}

async function answer(req: IncomingMessage, res: ServerResponse, endpoints: MetricsEndpoints): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://metrics').pathname;
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.setHeader('Allow', 'GET, HEAD');
    reply(res, 405, 'text/plain', 'method not allowed\n');
  } else if (path === '/metrics') {
    reply(res, 200, endpoints.contentType, await endpoints.metrics());
  } else if (path === '/healthz') {
    const reason = healthProblem(endpoints);
    reply(res, reason === undefined ? 200 : 503, 'text/plain', `${reason ?? 'ok'}\n`);
  } else {
    reply(res, 404, 'text/plain', 'not found: try /metrics or /healthz\n');
  }
}

function healthProblem(endpoints: MetricsEndpoints): string | undefined {
  try {
    return endpoints.unhealthy();
  } catch (err) {
    return errorMessage(err);
  }
}

function reply(res: ServerResponse, code: number, contentType: string, body: string): void {
  res.writeHead(code, { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}
