/**
 * A TCP connection to localhost inside a network namespace, for port forwarding. Node cannot enter
 * a namespace itself (setns needs a native call on the calling thread), so the connection is made
 * by `socat` started in the namespace with `nsenter --net=<pinned path>`, and its stdio is the
 * connection. socat reports on stderr when it has connected ("starting data transfer loop"), which
 * tells a refused IPv4 connection apart from a working one, so IPv6 localhost can be tried next,
 * as kubelet's runtimes do. Without a namespace (host-network pods) berthd connects itself.
 *
 * A connection's process lives exactly as long as the returned stream: destroying the stream
 * kills it.
 */
import { spawn } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { checkSpawned } from '../process/spawn.js';

export interface DialOptions {
  signal: AbortSignal;
  /** How long connecting may take, per address family. */
  timeoutMs: number;
  nsenter?: string;
  socat?: string;
}

const CONNECTED = 'starting data transfer loop';
/** Enough of socat's stderr to hold its reason for failing. */
const STDERR_KEEP = 4096;

/** Connects to `port` on 127.0.0.1, else [::1], inside `netnsPath` (null: the host's network). */
export async function dialLocalhost(
  netnsPath: string | null,
  port: number,
  opts: DialOptions,
): Promise<Duplex> {
  const attempts = [
    { family: 4, host: '127.0.0.1', socat: `TCP4:127.0.0.1:${port}` },
    { family: 6, host: '::1', socat: `TCP6:[::1]:${port}` },
  ];
  const errors: string[] = [];
  for (const a of attempts) {
    opts.signal.throwIfAborted();
    try {
      return netnsPath === null
        ? await connectHost(a.host, port, opts)
        : await connectInNetns(netnsPath, a.socat, opts);
    } catch (err) {
      errors.push(`${a.host}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  throw new Error(`cannot connect to localhost:${port} (${errors.join('; ')})`);
}

function connectHost(host: string, port: number, opts: DialOptions): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port, timeout: opts.timeoutMs });
    const fail = (err: Error): void => {
      socket.destroy();
      reject(err);
    };
    socket.once('connect', () => {
      socket.setTimeout(0);
      socket.off('error', fail);
      resolve(socket);
    });
    socket.once('timeout', () => fail(new Error(`no connection within ${opts.timeoutMs} ms`)));
    socket.once('error', fail);
    opts.signal.addEventListener('abort', () => socket.destroy(), { once: true });
  });
}

function connectInNetns(netnsPath: string, address: string, opts: DialOptions): Promise<Duplex> {
  return new Promise((resolve, reject) => {
    const nsenter = opts.nsenter ?? 'nsenter';
    // -t: after one side ended, wait this long for the other (the reply to a half-closed request).
    // prettier-ignore
    const child = checkSpawned(spawn(nsenter, [
      `--net=${netnsPath}`, '--', opts.socat ?? 'socat', '-d', '-d', '-t', '30', 'STDIO', address,
    ], { stdio: ['pipe', 'pipe', 'pipe'] }), nsenter);
    let stderr = '';
    let settled = false;
    const timer = setTimeout(
      () => finish(new Error(`no connection within ${opts.timeoutMs} ms`)),
      opts.timeoutMs,
    );
    const kill = (): void => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    };
    const onAbort = (): void => {
      kill();
      finish(new Error('cancelled'));
    };
    opts.signal.addEventListener('abort', onAbort, { once: true });
    const finish = (err: Error | null): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) {
        opts.signal.removeEventListener('abort', onAbort);
        kill();
        reject(err);
        return;
      }
      const stream = Duplex.from({ readable: child.stdout, writable: child.stdin });
      stream.once('close', () => {
        opts.signal.removeEventListener('abort', onAbort);
        kill();
      });
      resolve(stream);
    };
    child.stdin.on('error', () => undefined);
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk: string) => {
      if (settled) return;
      stderr = (stderr + chunk).slice(-STDERR_KEEP);
      if (stderr.includes(CONNECTED)) finish(null);
    });
    child.once('error', (err) => finish(err));
    child.once('exit', (code) => {
      const reason = stderr
        .split('\n')
        .filter((l) => / [EF] /.test(l))
        .map((l) => l.replace(/^.*? [EF] /, ''))
        .join('; ');
      finish(new Error(reason || `socat exited with code ${code ?? 'unknown'}`));
    });
  });
}
