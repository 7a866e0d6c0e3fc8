/**
 * Clients of berth's streaming server for tests and benchmarks: SPDY (as client-go's remotecommand
 * and portforward executors speak it) and WebSocket (channel.k8s.io), plus crictl, the reference
 * client, where the machine has it.
 */
import { spawn } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import { WebSocket } from 'ws';
import { SpdyConnection, type SpdyStream } from '../../src/spdy/connection.js';
import {
  FrameType,
  controlFrame,
  encodeHeaderBlock,
  synStreamBody,
  type Frame,
  type StoredHeaderWriter,
} from '../../src/spdy/frames.js';
import { FrameReader, type OversizedData } from '../../src/spdy/reader.js';
import { sharedTool, toolSkip } from './tools.js';
import { waitFor } from './wait.js';

/** crictl v1.29 from $CRICTL or the shared tools beside the project; null where there is none. */
export const CRICTL: string | null = sharedTool('CRICTL', 'crictl');

export const crictlSkip: string | false = toolSkip(CRICTL, 'CRICTL', 'crictl');

export interface UpgradeFailure {
  statusCode: number;
  body: string;
  headers: Record<string, string | string[] | undefined>;
}

export class UpgradeRefused extends Error {
  constructor(readonly failure: UpgradeFailure) {
    super(`upgrade refused: ${failure.statusCode} ${failure.body.trim()}`);
  }
}

export interface SpdyClient {
  conn: SpdyConnection;
  protocol: string;
  socket: Socket;
}

export interface SpdyUpgrade {
  socket: Socket;
  /** Bytes the server sent after its 101 response (SPDY frames already). */
  head: Buffer;
  protocol: string;
}

/**
 * Upgrades a connection to `url` to SPDY/3.1 offering `protocols`, in order of preference, and
 * hands over the raw socket (for clients that speak hand-made frames).
 */
export function spdyUpgrade(url: string, protocols: string[]): Promise<SpdyUpgrade> {
  return new Promise((resolve, reject) => {
    // Test servers use self-signed certificates: the tests check that TLS is spoken, not who speaks it.
    const req = (url.startsWith('https:') ? httpsRequest : httpRequest)(url, {
      rejectUnauthorized: false,
      method: 'POST',
      headers: {
        Connection: 'Upgrade',
        Upgrade: 'SPDY/3.1',
        ...(protocols.length > 0 ? { 'X-Stream-Protocol-Version': protocols } : {}),
      },
    });
    req.on('upgrade', (res, socket: Socket, head: Buffer) => {
      resolve({ socket, head, protocol: String(res.headers['x-stream-protocol-version'] ?? '') });
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () =>
        reject(new UpgradeRefused({ statusCode: res.statusCode ?? 0, body, headers: res.headers })),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

/** Upgrades a connection to `url` to SPDY/3.1 offering `protocols`, in order of preference. */
export async function spdyConnect(url: string, protocols: string[]): Promise<SpdyClient> {
  const { socket, head, protocol } = await spdyUpgrade(url, protocols);
  const conn = new SpdyConnection(socket, { role: 'client' });
  conn.on('error', () => undefined);
  conn.feed(head);
  return { conn, protocol, socket };
}

/** A SYN_STREAM frame whose header block continues `writer`'s zlib stream (one per connection). */
export function synStreamFrame(
  writer: StoredHeaderWriter,
  id: number,
  headers: Record<string, string>,
  flags = 0,
): Buffer {
  const block = writer.compress(encodeHeaderBlock(new Map(Object.entries(headers))));
  return controlFrame(FrameType.SYN_STREAM, flags, synStreamBody(id, block));
}

/**
 * Reads frames off a raw socket until `count` have arrived, or rejects when the socket closes
 * first (the message says how many came, and `frames` on the error holds them).
 */
export function readFrames(socket: Socket, count: number): Promise<Frame[]> {
  return new Promise((resolve, reject) => {
    const reader = new FrameReader();
    const frames: Frame[] = [];
    const done = (): void => {
      socket.off('data', onData);
      socket.off('close', onClose);
    };
    const onData = (chunk: Buffer): void => {
      reader.push(chunk);
      for (let f: Frame | OversizedData | null; frames.length < count && (f = reader.next());) {
        if (f.kind !== 'too-large') frames.push(f);
      }
      if (frames.length >= count) {
        done();
        resolve(frames);
      }
    };
    const onClose = (): void => {
      done();
      reject(Object.assign(new Error(`socket closed after ${frames.length} frames`), { frames }));
    };
    socket.on('data', onData);
    socket.on('close', onClose);
  });
}

/** Every frame the peer sends until it ends or closes the socket. */
export function framesUntilEnd(socket: Socket): Promise<Frame[]> {
  return new Promise((resolve) => {
    const reader = new FrameReader();
    const frames: Frame[] = [];
    const onData = (chunk: Buffer): void => {
      reader.push(chunk);
      for (let f: Frame | OversizedData | null; (f = reader.next());)
        if (f.kind !== 'too-large') frames.push(f);
    };
    const onEnd = (): void => {
      socket.off('data', onData);
      resolve(frames);
    };
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('close', onEnd);
  });
}

export interface RemoteCommandOptions {
  protocols?: string[];
  /** Bytes for the command's stdin, then its end; a Readable is piped with backpressure. */
  stdin?: Buffer | Readable | null;
  stdout?: boolean;
  stderr?: boolean;
  tty?: boolean;
  resize?: { width: number; height: number };
  /** Called with each stdout chunk as it arrives (the chunk is kept too unless `discard`). */
  onStdout?: (chunk: Buffer) => void;
  discardOutput?: boolean;
  /** Let the stdout stream sit unread this long before reading it (backpressure tests). */
  readDelayMs?: number;
  /** Sent with every stream's SYN_STREAM besides its streamType. */
  streamHeaders?: Record<string, string>;
}

export interface RemoteCommandResult {
  protocol: string;
  stdout: Buffer;
  stderr: Buffer;
  stdoutBytes: number;
  /** The error stream's bytes: JSON from v4 on, text before. */
  errorText: string;
}

/** Runs an exec or attach session over SPDY the way client-go does: error stream first. */
export async function spdyRemoteCommand(
  url: string,
  opts: RemoteCommandOptions = {},
): Promise<RemoteCommandResult> {
  const { conn, protocol } = await spdyConnect(url, opts.protocols ?? ['v4.channel.k8s.io']);
  return runOnConnection(conn, protocol, opts);
}

export async function runOnConnection(
  conn: SpdyConnection,
  protocol: string,
  opts: RemoteCommandOptions,
): Promise<RemoteCommandResult> {
  const open = (streamType: string): Promise<SpdyStream> =>
    conn.openStream({ ...opts.streamHeaders, streamType });
  const error = await open('error');
  const stdin = opts.stdin !== undefined && opts.stdin !== null ? await open('stdin') : null;
  const stdout = opts.stdout === false ? null : await open('stdout');
  const stderr = opts.stderr && !opts.tty ? await open('stderr') : null;
  const resize =
    opts.tty && protocol !== 'channel.k8s.io' && protocol !== 'v2.channel.k8s.io'
      ? await open('resize')
      : null;
  if (resize && opts.resize)
    resize.write(JSON.stringify({ Width: opts.resize.width, Height: opts.resize.height }));
  const input = opts.stdin ?? null;
  if (stdin && input instanceof Readable) input.pipe(stdin);
  else if (stdin && input) stdin.end(input);
  error.end();
  const outChunks: Buffer[] = [];
  let stdoutBytes = 0;
  const [errorBytes, , errBytes] = await Promise.all([
    collect(error),
    stdout
      ? drain(
          stdout,
          (c) => {
            stdoutBytes += c.length;
            opts.onStdout?.(c);
            if (!opts.discardOutput) outChunks.push(c);
          },
          opts.readDelayMs ?? 0,
        )
      : Promise.resolve(),
    stderr ? collect(stderr) : Promise.resolve(Buffer.alloc(0)),
  ]);
  resize?.end();
  conn.close();
  return {
    protocol,
    stdout: Buffer.concat(outChunks),
    stderr: errBytes,
    stdoutBytes,
    errorText: errorBytes.toString('utf8'),
  };
}

function collect(stream: SpdyStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  return new Promise((resolve) => {
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve(Buffer.concat(chunks)));
    stream.on('close', () => resolve(Buffer.concat(chunks)));
  });
}

function drain(stream: SpdyStream, each: (c: Buffer) => void, delayMs: number): Promise<void> {
  return new Promise((resolve) => {
    const start = (): void => {
      stream.on('data', each);
      stream.on('end', () => resolve());
      stream.on('close', () => resolve());
    };
    if (delayMs > 0) setTimeout(start, delayMs);
    else start();
  });
}

export interface WsSession {
  ws: WebSocket;
  protocol: string;
  /** Messages by channel, in arrival order (the channel byte removed, base64 decoded). */
  received: Map<number, Buffer[]>;
  closed: Promise<void>;
  send(channel: number, data: Buffer | string): void;
}

/** Opens a WebSocket session on `url` (http: scheme is turned into ws:). */
export function wsConnect(url: string, protocols: string[]): Promise<WsSession> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url.replace(/^http/, 'ws'), protocols, { rejectUnauthorized: false });
    const received = new Map<number, Buffer[]>();
    const base64 = (): boolean => ws.protocol.includes('base64');
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      let channel: number;
      let bytes: Buffer;
      if (base64() && !isBinary) {
        const text = data.toString('latin1');
        channel = text.charCodeAt(0) - 48;
        bytes = Buffer.from(text.slice(1), 'base64');
      } else {
        channel = data[0] ?? -1;
        bytes = data.subarray(1);
      }
      const list = received.get(channel) ?? [];
      list.push(bytes);
      received.set(channel, list);
    });
    const closed = new Promise<void>((r) => ws.once('close', () => r()));
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () =>
        reject(new UpgradeRefused({ statusCode: res.statusCode ?? 0, body, headers: res.headers })),
      );
    });
    ws.once('error', reject);
    ws.once('open', () =>
      resolve({
        ws,
        protocol: ws.protocol,
        received,
        closed,
        send: (channel, data) => {
          const bytes = typeof data === 'string' ? Buffer.from(data) : data;
          if (base64()) ws.send(String.fromCharCode(48 + channel) + bytes.toString('base64'));
          else ws.send(Buffer.concat([Buffer.from([channel]), bytes]));
        },
      }),
    );
  });
}

export function channelText(session: WsSession, channel: number): string {
  return Buffer.concat(session.received.get(channel) ?? []).toString('utf8');
}

export interface CrictlResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs crictl against `socket` with a deadline; `input` is written to its stdin and closed. */
export function crictl(socket: string, args: string[], opts: ProgramOptions = {}): Promise<CrictlResult> {
  if (!CRICTL) throw new Error(String(crictlSkip));
  return runProgram(CRICTL, ['--runtime-endpoint', `unix://${socket}`, '--timeout', '20s', ...args], opts);
}

/**
 * Runs crictl under a pseudo-terminal made by util-linux `script`, for `exec -it`: the inner shell
 * sets the terminal's size first, so crictl has a real size to send.
 */
export function crictlTty(
  socket: string,
  args: string[],
  opts: ProgramOptions & { rows?: number; cols?: number } = {},
): Promise<CrictlResult> {
  if (!CRICTL) throw new Error(String(crictlSkip));
  const quoted = [CRICTL, '--runtime-endpoint', `unix://${socket}`, ...args].map(shellQuote).join(' ');
  const inner = `stty rows ${opts.rows ?? 24} cols ${opts.cols ?? 80}; exec ${quoted}`;
  return runProgram('script', ['-q', '-e', '-c', inner, '/dev/null'], opts);
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

export interface ProgramOptions {
  input?: string;
  /** Wait this long before writing the input (a terminal program must first be in raw mode). */
  inputDelayMs?: number;
  /**
   * Write the input once this holds (polled, within the program's timeout): e.g. once the command
   * runs in the container, by which time crictl has its terminal in raw mode, however slow the
   * machine. A fixed delay is a guess that a busy machine can beat.
   */
  inputWhen?: () => Promise<boolean>;
  /** Leave stdin open after the input: `script` turns its stdin's end into input of its own. */
  keepStdinOpen?: boolean;
  timeoutMs?: number;
  /** The program's environment, when not this process's. */
  env?: NodeJS.ProcessEnv;
}

export function runProgram(file: string, args: string[], opts: ProgramOptions = {}): Promise<CrictlResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: ['pipe', 'pipe', 'pipe'], env: opts.env ?? process.env });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (c: string) => (stdout += c));
    child.stderr.on('data', (c: string) => (stderr += c));
    const timeoutMs = opts.timeoutMs ?? 30_000;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${file} ${args.join(' ')} timed out; stdout: ${stdout} stderr: ${stderr}`));
    }, timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.on('error', () => undefined);
    const write = (): void => {
      if (opts.input !== undefined) child.stdin.write(opts.input);
      if (!opts.keepStdinOpen) child.stdin.end();
    };
    const { inputWhen } = opts;
    if (inputWhen) {
      // A program that ended meanwhile stops the polling too.
      const ended = (): boolean => child.exitCode !== null || child.signalCode !== null;
      const due = async (): Promise<boolean> => ended() || (await inputWhen());
      waitFor(due, timeoutMs, { pollMs: 200, what: 'the moment to write the input' }).then(
        write,
        (err: unknown) => {
          child.kill('SIGKILL');
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
    } else if (opts.inputDelayMs) setTimeout(write, opts.inputDelayMs);
    else write();
    child.on('exit', () => child.stdin.destroy());
  });
}
