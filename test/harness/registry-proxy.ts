/**
 * A loopback HTTP proxy in front of a test registry: it counts the requests it forwards (to tell
 * whether berthd contacted a registry at all), can stall chosen responses mid-body (headers
 * and the first bytes, then silence), as a registry or a network that hangs would, and can serve
 * chosen paths itself, with what no real registry would store.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';

export interface ProxyOptions {
  /** Responses whose request path contains this are cut to `stallAfterBytes`, then kept open silently. */
  stallPathContaining?: string;
  stallAfterBytes?: number;
  /**
   * Requests whose path contains `pathContaining` are answered with this 200 instead of being
   * forwarded: what a registry would serve if it stored anything (docker-registry refuses
   * manifests over 4 MiB).
   */
  serve?: { pathContaining: string; body: Buffer; contentType: string };
}

export interface RegistryProxy {
  /** `http://127.0.0.1:<port>` */
  url: string;
  /** `127.0.0.1:<port>`: the registry part of image references. */
  host: string;
  /** Paths of the requests received, in order. */
  readonly requests: readonly string[];
  /** Responses currently held stalled. */
  stalled(): number;
  stop(): Promise<void>;
}

/** Forwards everything to `target` (`http://127.0.0.1:<port>`). */
export async function startRegistryProxy(target: string, opts: ProxyOptions = {}): Promise<RegistryProxy> {
  const upstream = new URL(target);
  const requests: string[] = [];
  const held = new Set<ServerResponse>();
  const server = http.createServer((req, res) => {
    requests.push(req.url ?? '');
    const served = opts.serve;
    if (served !== undefined && (req.url ?? '').includes(served.pathContaining)) {
      req.resume();
      res.writeHead(200, { 'content-type': served.contentType, 'content-length': served.body.length });
      res.end(req.method === 'HEAD' ? undefined : served.body);
      return;
    }
    forward(req, res);
  });

  function forward(req: IncomingMessage, res: ServerResponse): void {
    const out = http.request(
      target + (req.url ?? '/'),
      { method: req.method, headers: { ...req.headers, host: upstream.host } },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        const stall =
          opts.stallPathContaining !== undefined && (req.url ?? '').includes(opts.stallPathContaining);
        if (!stall) {
          answer.pipe(res);
          return;
        }
        held.add(res);
        res.on('close', () => held.delete(res));
        let left = opts.stallAfterBytes ?? 0;
        answer.on('data', (chunk: Buffer) => {
          if (left <= 0) return;
          res.write(chunk.subarray(0, left));
          left -= chunk.length;
        });
      },
    );
    out.on('error', () => res.destroy());
    req.pipe(out);
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    requests,
    stalled: () => held.size,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
