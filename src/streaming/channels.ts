/**
 * Kubernetes' WebSocket channel framing (channel.k8s.io and its versions): every message starts
 * with a channel number; base64 variants send text whose first character is the channel digit.
 * From v5 a message [255, n] closes channel n (the client's way to close stdin). A message naming a
 * channel the session does not have breaks the protocol: the connection is closed with 1002.
 */
import { Readable, Writable } from 'node:stream';
import type { WebSocket } from 'ws';

export const STREAM_CLOSE = 255;
/** RFC 6455's close code for a peer that broke the protocol. */
export const PROTOCOL_ERROR = 1002;
/**
 * While the socket is not read (a channel's reader is full: a command that leaves its stdin
 * unread), a client that goes away is not seen: its FIN waits behind the bytes we do not take. A
 * ping this often is a write, and a dead client's kernel answers it with a reset, which closes the
 * session and kills its command.
 */
const PAUSED_PROBE_MS = 2_000;

export interface ChannelSocket {
  /** One readable per channel the client may write to (stdin, resize, port-forward data). */
  readable(channel: number): Readable;
  /** One writable per channel we write to; ending it sends nothing (kubelet's channels neither). */
  writable(channel: number): Writable;
  /** Sends one message on a channel, resolving when it left. */
  send(channel: number, data: Buffer): Promise<void>;
}

/** `channels`: how many the session has (0 to channels-1); any other channel number is refused. */
export function channelSocket(
  ws: WebSocket,
  base64: boolean,
  supportsClose: boolean,
  channels: number,
): ChannelSocket {
  const readables = new Map<number, Readable>();
  const paused = new Set<number>();
  /** Channels the client closed (v5): later data on them is dropped, not pushed after the end. */
  const closed = new Set<number>();

  let probe: NodeJS.Timeout | undefined;
  const pause = (): void => {
    ws.pause();
    probe ??= setInterval(() => {
      if (ws.readyState === ws.OPEN) ws.ping();
    }, PAUSED_PROBE_MS);
  };
  const resume = (): void => {
    clearInterval(probe);
    probe = undefined;
    ws.resume();
  };

  const readable = (channel: number): Readable => {
    let r = readables.get(channel);
    if (!r) {
      r = new Readable({
        read: () => {
          if (paused.delete(channel) && paused.size === 0) resume();
        },
      });
      // A misbehaving client must not be able to raise an error nobody listens to.
      r.on('error', () => undefined);
      readables.set(channel, r);
    }
    return r;
  };

  const send = (channel: number, data: Buffer): Promise<void> =>
    new Promise((resolve, reject) => {
      if (ws.readyState !== ws.OPEN) {
        reject(new Error('websocket closed'));
        return;
      }
      const message = base64
        ? String.fromCharCode(48 + channel) + data.toString('base64')
        : Buffer.concat([Buffer.from([channel]), data]);
      ws.send(message, { binary: !base64 }, (err) => (err ? reject(err) : resolve()));
    });

  let broken = false;
  const refuse = (reason: string): void => {
    broken = true;
    ws.close(PROTOCOL_ERROR, reason);
  };

  ws.on('message', (raw: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
    if (broken) return;
    const bytes = Buffer.isBuffer(raw) ? raw : Array.isArray(raw) ? Buffer.concat(raw) : Buffer.from(raw);
    if (bytes.length === 0) return;
    let channel: number;
    let data: Buffer;
    if (base64 && !isBinary) {
      channel = (bytes[0] ?? 48) - 48;
      data = Buffer.from(bytes.subarray(1).toString('latin1'), 'base64');
    } else {
      channel = bytes[0] ?? 0;
      data = bytes.subarray(1);
    }
    if (supportsClose && channel === STREAM_CLOSE) {
      const which = data[0];
      if (data.length !== 1 || which === undefined || which >= channels) {
        refuse('stream close must name one channel of the session');
        return;
      }
      if (!closed.has(which)) {
        closed.add(which);
        readables.get(which)?.push(null);
      }
      return;
    }
    if (!Number.isInteger(channel) || channel < 0 || channel >= channels) {
      refuse(`no channel ${channel}: this session has channels 0 to ${channels - 1}`);
      return;
    }
    const r = readables.get(channel);
    if (!r || closed.has(channel) || r.readableEnded || data.length === 0) return;
    if (!r.push(data)) {
      paused.add(channel);
      pause();
    }
  });
  ws.on('close', () => {
    clearInterval(probe);
    for (const [channel, r] of readables) {
      if (closed.has(channel)) continue;
      closed.add(channel);
      r.push(null);
    }
  });

  return {
    readable,
    writable: (channel) =>
      new Writable({
        write: (chunk: Buffer, _enc, done) => {
          send(channel, chunk).then(() => done(), done);
        },
      }),
    send,
  };
}
