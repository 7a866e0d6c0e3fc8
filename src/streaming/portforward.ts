/**
 * Port forwarding (portforward.k8s.io). Over SPDY the client opens a pair of streams per
 * connection, an error stream then a data stream, both carrying the `port` and `requestID`
 * headers; the data stream is bridged to a TCP connection to that port inside the pod, and a
 * failure is written as text on the error stream. Both streams are closed when the connection
 * is done: the client waits for the error stream's end before it reports the forward finished.
 *
 * Over WebSocket the ports are fixed by the URL (`?port=80&port=443`); port i gets data channel
 * 2i and error channel 2i+1, each first sending the port number as two little-endian bytes.
 */
import type { Duplex, Readable, Writable } from 'node:stream';
import type { WebSocket } from 'ws';
import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';
import type { SpdyConnection, SpdyStream } from '../spdy/connection.js';
import { channelSocket } from './channels.js';
import type { StreamRuntime } from './types.js';

export const SPDY_PORTFORWARD_PROTOCOL = 'portforward.k8s.io';
export const WS_PORTFORWARD_PROTOCOLS = ['v4.channel.k8s.io', 'v4.base64.channel.k8s.io'] as const;

export interface ForwardTarget {
  podSandboxId: string;
  /** Ports the request allowed; empty allows any. */
  ports: number[];
}

interface Pair {
  error?: SpdyStream;
  data?: SpdyStream;
  timer: NodeJS.Timeout;
}

export function servePortForwardSpdy(
  conn: SpdyConnection,
  target: ForwardTarget,
  runtime: StreamRuntime,
  pairTimeoutMs: number,
  logger: Logger,
): void {
  const pairs = new Map<string, Pair>();
  const aborter = new AbortController();
  conn.on('close', () => {
    aborter.abort(new Error('client went away'));
    for (const pair of pairs.values()) clearTimeout(pair.timer);
    pairs.clear();
  });
  conn.on('stream', (stream) => {
    const type = stream.header('streamtype');
    // Clients before requestID existed pair an error stream n with data stream n+2.
    const requestId = stream.header('requestid') ?? String(type === 'data' ? stream.id - 2 : stream.id);
    if (type !== 'error' && type !== 'data') {
      stream.destroy();
      return;
    }
    let pair = pairs.get(requestId);
    if (!pair) {
      const timer = setTimeout(() => {
        pairs.delete(requestId);
        pair?.error?.destroy();
        pair?.data?.destroy();
      }, pairTimeoutMs);
      pair = { timer };
      pairs.set(requestId, pair);
    }
    if (pair[type]) {
      stream.destroy();
      return;
    }
    pair[type] = stream;
    if (!pair.error || !pair.data) return;
    clearTimeout(pair.timer);
    pairs.delete(requestId);
    const { error, data } = pair;
    error.resume();
    void forwardOne(data, error, data.header('port'), target, runtime, aborter.signal, logger);
  });
}

async function forwardOne(
  data: SpdyStream,
  error: Writable,
  portHeader: string | undefined,
  target: ForwardTarget,
  runtime: StreamRuntime,
  signal: AbortSignal,
  logger: Logger,
): Promise<void> {
  try {
    const port = parsePort(portHeader);
    if (target.ports.length > 0 && !target.ports.includes(port)) {
      throw new Error(`port ${port} was not requested (requested: ${target.ports.join(', ')})`);
    }
    const conn = await runtime.dialPod(target.podSandboxId, port, signal);
    await bridge(data, data, conn);
  } catch (err) {
    const message = `error forwarding port ${portHeader ?? '?'} to pod ${target.podSandboxId}: ${errorMessage(err)}`;
    logger.debug({ pod: target.podSandboxId, err: errorMessage(err) }, 'port forward failed');
    if (!error.writableEnded) error.write(message);
  } finally {
    if (!data.writableEnded) data.end();
    if (!error.writableEnded) error.end();
  }
}

/** Copies both ways until both directions ended; half-closes are passed on. */
function bridge(from: Readable, to: Writable, conn: Duplex): Promise<void> {
  return new Promise((resolve) => {
    let open = 2;
    const done = (): void => {
      if (--open === 0) {
        conn.destroy();
        resolve();
      }
    };
    const fail = (): void => {
      open = 1;
      done();
    };
    conn.on('error', fail);
    from.on('error', fail);
    to.on('error', fail);
    from.pipe(conn, { end: true });
    conn.pipe(to, { end: false });
    from.once('end', done);
    conn.once('end', () => {
      to.end();
      done();
    });
    conn.once('close', () => {
      if (open > 0) fail();
    });
  });
}

export function parsePort(value: string | undefined): number {
  if (value === undefined || !/^\d{1,5}$/.test(value))
    throw new Error(`invalid port ${JSON.stringify(value ?? '')}`);
  const port = Number(value);
  if (port < 1 || port > 65535) throw new Error(`port ${port} is out of range 1-65535`);
  return port;
}

export function servePortForwardWebSocket(
  ws: WebSocket,
  protocol: string,
  ports: number[],
  target: ForwardTarget,
  runtime: StreamRuntime,
  logger: Logger,
): void {
  const channels = channelSocket(ws, protocol.includes('base64'), false, 2 * ports.length);
  const aborter = new AbortController();
  ws.on('close', () => aborter.abort(new Error('client went away')));
  let remaining = ports.length;
  ports.forEach((port, i) => {
    const portBytes = Buffer.alloc(2);
    portBytes.writeUInt16LE(port);
    const dataChannel = 2 * i;
    const errorChannel = 2 * i + 1;
    // Made now: what the client sends while the connection is being dialled waits in it.
    const input = channels.readable(dataChannel);
    void (async () => {
      try {
        await channels.send(dataChannel, portBytes);
        await channels.send(errorChannel, portBytes);
        const conn = await runtime.dialPod(target.podSandboxId, port, aborter.signal);
        await bridge(input, channels.writable(dataChannel), conn);
      } catch (err) {
        logger.debug({ pod: target.podSandboxId, port, err: errorMessage(err) }, 'port forward failed');
        // Logged just above; telling the client fails only when it has gone already.
        await channels
          .send(
            errorChannel,
            Buffer.from(`error forwarding port ${port} to pod ${target.podSandboxId}: ${errorMessage(err)}`),
          )
          .catch(() => undefined);
      } finally {
        if (--remaining === 0) ws.close(1000);
      }
    })();
  });
}
