/**
 * The remotecommand protocol of exec and attach, over SPDY or WebSocket: which streams a session
 * has, how the client's terminal size arrives, and how the session ends (output streams closed,
 * then the status on the error stream, then the connection).
 *
 * SPDY versions: channel.k8s.io (v1) and v2 report failures as text; v3 adds the resize stream;
 * v4 reports a JSON metav1.Status. WebSocket: channel.k8s.io and base64.channel.k8s.io behave as
 * v1 does; v4.channel.k8s.io and v4.base64.channel.k8s.io as v4; v5.channel.k8s.io adds closing
 * stdin. Channels: 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize.
 */
import type { Readable, Writable } from 'node:stream';
import type { WebSocket } from 'ws';
import type { SpdyConnection, SpdyStream } from '../spdy/connection.js';
import { channelSocket } from './channels.js';
import { encodeStatus, type RemoteStatus } from './status.js';
import { TerminalResizes, type StreamIo } from './types.js';

/** Server preference order, as kubelet's streaming server lists them. */
export const SPDY_REMOTECOMMAND_PROTOCOLS = [
  'v4.channel.k8s.io',
  'v3.channel.k8s.io',
  'v2.channel.k8s.io',
  'channel.k8s.io',
] as const;

export const WS_REMOTECOMMAND_PROTOCOLS = [
  'v5.channel.k8s.io',
  'v4.channel.k8s.io',
  'v4.base64.channel.k8s.io',
  'channel.k8s.io',
  'base64.channel.k8s.io',
] as const;

export interface SessionOptions {
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  tty: boolean;
}

export interface RemoteSession {
  io: StreamIo;
  /** Ends the session: output streams closed, `status` sent, connection closed. Never throws. */
  finish(status: RemoteStatus): Promise<void>;
}

const CHANNEL = { stdin: 0, stdout: 1, stderr: 2, error: 3, resize: 4 } as const;

/** Longest a resize message may be; a client sending more is not sending terminal sizes. */
const MAX_RESIZE_BUFFER = 4096;

/**
 * Waits for the streams a SPDY client opens for this session (error first, then the rest, each
 * named by its streamType header) and builds the session. Attach it before feeding the
 * connection any bytes, so that no stream is missed.
 */
export function spdySession(
  conn: SpdyConnection,
  protocol: string,
  opts: SessionOptions,
  timeoutMs: number,
): Promise<RemoteSession> {
  const hasResize = opts.tty && protocol !== 'channel.k8s.io' && protocol !== 'v2.channel.k8s.io';
  const expected = new Set<string>(['error']);
  if (opts.stdin) expected.add('stdin');
  if (opts.stdout) expected.add('stdout');
  if (opts.stderr && !opts.tty) expected.add('stderr');
  if (hasResize) expected.add('resize');
  const jsonStatus = protocol === 'v4.channel.k8s.io';

  return new Promise((resolve, reject) => {
    const got = new Map<string, SpdyStream>();
    const timer = setTimeout(() => {
      cleanup();
      conn.destroy();
      reject(
        new Error(`timed out waiting for client streams (have ${[...got.keys()].join(', ') || 'none'})`),
      );
    }, timeoutMs);
    const onClose = (): void => {
      cleanup();
      reject(new Error('client closed the connection before opening its streams'));
    };
    const onStream = (stream: SpdyStream): void => {
      const type = stream.header('streamtype') ?? '';
      if (!expected.has(type) || got.has(type)) {
        stream.destroy();
        return;
      }
      got.set(type, stream);
      if (got.size < expected.size) return;
      cleanup();
      resolve(buildSpdySession(conn, got, opts, jsonStatus));
    };
    const cleanup = (): void => {
      clearTimeout(timer);
      conn.off('stream', onStream);
      conn.off('close', onClose);
    };
    conn.on('stream', onStream);
    conn.on('close', onClose);
  });
}

function buildSpdySession(
  conn: SpdyConnection,
  streams: Map<string, SpdyStream>,
  opts: SessionOptions,
  jsonStatus: boolean,
): RemoteSession {
  const aborter = new AbortController();
  let finished = false;
  conn.on('close', () => {
    if (!finished) aborter.abort(new Error('client went away'));
  });
  const resize = new TerminalResizes();
  const resizeStream = streams.get('resize');
  if (resizeStream) feedResizes(resizeStream, resize);
  const stdin = streams.get('stdin');
  // What a client sends on the streams it should only read is dropped, so it cannot stall the
  // connection (a stream's full buffer stops the connection's reading).
  for (const type of ['error', 'stdout', 'stderr']) streams.get(type)?.resume();
  const io: StreamIo = {
    stdin: stdin ?? null,
    stdout: streams.get('stdout') ?? null,
    stderr: streams.get('stderr') ?? null,
    tty: opts.tty,
    resize,
    signal: aborter.signal,
  };
  return {
    io,
    finish: async (status) => {
      finished = true;
      await Promise.all([endWritable(io.stdout), endWritable(io.stderr)]);
      const error = streams.get('error');
      if (error && !conn.isClosed) {
        const bytes = encodeStatus(status, jsonStatus);
        if (bytes.length > 0) error.write(bytes);
        await endWritable(error);
      }
      stdin?.destroy();
      resizeStream?.destroy();
      conn.close();
    },
  };
}

/** A session on an accepted WebSocket whose subprotocol is one of WS_REMOTECOMMAND_PROTOCOLS (or none). */
export function webSocketSession(ws: WebSocket, protocol: string, opts: SessionOptions): RemoteSession {
  const base64 = protocol.includes('base64');
  const v5 = protocol === 'v5.channel.k8s.io';
  const jsonStatus = v5 || protocol.startsWith('v4.');
  const channels = channelSocket(ws, base64, v5, Object.keys(CHANNEL).length);
  const aborter = new AbortController();
  let finished = false;
  ws.on('close', () => {
    if (!finished) aborter.abort(new Error('client went away'));
  });
  const resize = new TerminalResizes();
  // Each resize message is one JSON object.
  channels.readable(CHANNEL.resize).on('data', (chunk: Buffer) => emitSize(resize, chunk.toString('utf8')));
  const io: StreamIo = {
    stdin: opts.stdin ? channels.readable(CHANNEL.stdin) : null,
    stdout: opts.stdout ? channels.writable(CHANNEL.stdout) : null,
    stderr: opts.stderr && !opts.tty ? channels.writable(CHANNEL.stderr) : null,
    tty: opts.tty,
    resize,
    signal: aborter.signal,
  };
  // kubelet announces an established session with an empty message on the first output channel.
  const first = opts.stdout ? CHANNEL.stdout : opts.stderr ? CHANNEL.stderr : CHANNEL.error;
  // Fails only when the client has gone already; the session then ends through the closed socket.
  channels.send(first, Buffer.alloc(0)).catch(() => undefined);
  return {
    io,
    finish: async (status) => {
      finished = true;
      await Promise.all([endWritable(io.stdout), endWritable(io.stderr)]);
      const bytes = encodeStatus(status, jsonStatus);
      // Fails only when the client has gone already: nobody is left to tell how the command ended.
      if (bytes.length > 0) await channels.send(CHANNEL.error, bytes).catch(() => undefined);
      ws.close(1000);
    },
  };
}

function endWritable(w: Writable | null): Promise<void> {
  if (!w || w.writableEnded || w.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    w.end(() => resolve());
    w.once('error', () => resolve());
    w.once('close', () => resolve());
  });
}

/** The SPDY resize stream carries JSON objects back to back, e.g. {"Width":80,"Height":24}. */
function feedResizes(stream: Readable, resize: TerminalResizes): void {
  let buffer = '';
  stream.on('data', (chunk: Buffer) => {
    buffer += chunk.toString('utf8');
    let end: number;
    while ((end = buffer.indexOf('}')) !== -1) {
      emitSize(resize, buffer.slice(0, end + 1));
      buffer = buffer.slice(end + 1);
    }
    if (buffer.length > MAX_RESIZE_BUFFER) stream.destroy();
  });
}

function emitSize(resize: TerminalResizes, text: string): void {
  try {
    const value = JSON.parse(text.slice(text.indexOf('{'))) as { Width?: unknown; Height?: unknown };
    const width = Number(value.Width);
    const height = Number(value.Height);
    if (
      Number.isInteger(width) &&
      Number.isInteger(height) &&
      width > 0 &&
      height > 0 &&
      width < 65536 &&
      height < 65536
    ) {
      resize.push({ width, height });
    }
  } catch {
    // Not a size: ignored, as kubelet ignores a resize it cannot decode.
  }
}
