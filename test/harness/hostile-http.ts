/**
 * Hostile bytes for berthd's HTTP listeners (test/e2e/hostile-streaming-http.test.ts and
 * hostile-metrics.test.ts): request lines and headers no client library would write, and a raw
 * client that sends them over a socket of its own on loopback and reads what comes back. WebSocket
 * frames are in hostile-websocket.ts. The cases come from fixed lists plus a few built from the suite's seeded
 * Rng (test/harness/hostile.ts), so a failure reproduces from the seed the suite prints.
 */
import { connect, type Socket } from 'node:net';
import type { Rng } from './hostile.js';

// --- A raw HTTP exchange ----------------------------------------------------------------------

/** How long a refused connection may take to be answered and closed: a bound for a hang. */
export const CLOSE_WINDOW_MS = 20_000;
/** A case this big may be cut off by a reset before its answer arrives: a close alone will do. */
export const RESET_MAY_LOSE_ANSWER_BYTES = 64 * 1024;

export interface RawResponse {
  /** The status of the first response, undefined when none came. */
  status: number | undefined;
  /** The first response's head, as text; '' when none came. */
  head: string;
  /** Bytes after the head: a body, or frames after a 101. */
  rest: Buffer;
  /** The server closed (or reset) the connection within the window. */
  closed: boolean;
  ms: number;
}

export interface ExchangeOptions {
  /** How long to wait for a response and the server's close; a bound for a hang. */
  windowMs?: number;
  /** Stop waiting once a whole response is in, rather than for the server's close. */
  untilResponse?: boolean;
  /** Keep the socket open and hand it back (for frames after a 101). */
  keepOpen?: boolean;
}

/** Writes `bytes` on a fresh connection to 127.0.0.1:`port` and reads what comes back. */
export function rawExchange(
  port: number,
  bytes: Buffer | string,
  opts: ExchangeOptions = {},
): Promise<RawResponse & { socket: Socket }> {
  const windowMs = opts.windowMs ?? 5_000;
  return new Promise((resolve) => {
    const started = performance.now();
    const socket = connect(port, '127.0.0.1');
    let received = Buffer.alloc(0);
    let done = false;
    const finish = (closed: boolean): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      const parsed = parseResponse(received);
      if (!opts.keepOpen || closed) socket.destroy();
      else {
        // What comes next waits in the socket for the caller's own reader.
        socket.off('data', onData);
        socket.pause();
      }
      resolve({ ...parsed, closed, ms: Math.round(performance.now() - started), socket });
    };
    const timer = setTimeout(() => finish(false), windowMs);
    const onData = (chunk: Buffer): void => {
      // Enough to see a status and a head; a body past this is not what a case checks.
      if (received.length < 256 * 1024) received = Buffer.concat([received, chunk]);
      if ((opts.untilResponse || opts.keepOpen) && responseComplete(received)) finish(false);
    };
    socket.on('data', onData);
    socket.on('error', () => finish(true));
    socket.on('close', () => finish(true));
    socket.write(bytes);
  });
}

function parseResponse(all: Buffer): Omit<RawResponse, 'closed' | 'ms'> {
  // An interim 100 Continue comes before the response that counts.
  const bytes = all.subarray(
    /^HTTP\/1\.1 100 [^\r]*\r\n\r\n/.exec(all.toString('latin1', 0, 64))?.[0].length ?? 0,
  );
  const end = bytes.indexOf('\r\n\r\n');
  if (end === -1) return { status: undefined, head: '', rest: Buffer.alloc(0) };
  const head = bytes.subarray(0, end).toString('latin1');
  const status = /^HTTP\/1\.[01] (\d{3}) /.exec(head)?.[1];
  return { status: status === undefined ? undefined : Number(status), head, rest: bytes.subarray(end + 4) };
}

function responseComplete(bytes: Buffer): boolean {
  const { status, head, rest } = parseResponse(bytes);
  if (status === undefined) return false;
  if (status === 101) return true;
  const length = /^content-length:\s*(\d+)/im.exec(head)?.[1];
  return length !== undefined && rest.length >= Number(length);
}

// --- Request lines and headers ----------------------------------------------------------------

export interface HttpCase {
  label: string;
  bytes: Buffer;
  /** Statuses this case must get, when it is known exactly; else any refusal will do. */
  expect?: readonly number[];
  /** Not a whole request: the server waits for more (until its header timeout), so no answer is due. */
  incomplete?: boolean;
}

const CRLF = '\r\n';

/** A request: its line, its headers, then `tail` (the blank line, and a body if any). */
export function request(line: string, headers: readonly string[] = ['Host: berth'], tail = CRLF): Buffer {
  return Buffer.from(line + CRLF + headers.map((h) => h + CRLF).join('') + tail, 'latin1');
}

/**
 * Request lines berth's listeners must refuse without falling over, around a path on the server
 * (`path`, e.g. /exec/<an unknown token> or /metrics). Exact statuses where HTTP defines them.
 */
export function requestLineCases(rng: Rng, path: string, randomCount = 12): HttpCase[] {
  const cases: HttpCase[] = [
    { label: 'double-slash', bytes: request('GET // HTTP/1.1'), expect: [404] },
    { label: 'double-slash+path', bytes: request(`GET /${path} HTTP/1.1`), expect: [404] },
    { label: 'bad-percent', bytes: request('GET /%zz HTTP/1.1'), expect: [404] },
    { label: 'bad-percent-in-path', bytes: request(`GET ${path}%zz HTTP/1.1`), expect: [404] },
    { label: 'encoded-slash', bytes: request('GET /exec%2F..%2F..%2Fetc HTTP/1.1'), expect: [404] },
    { label: 'dot-segments', bytes: request(`GET /../..${path} HTTP/1.1`), expect: [404] },
    { label: 'path-5k', bytes: request(`GET /${'a'.repeat(5_000)} HTTP/1.1`), expect: [414] },
    { label: 'path-20k', bytes: request(`GET /${'a'.repeat(20_000)} HTTP/1.1`), expect: [414] },
    { label: 'path-100k', bytes: request(`GET /${'b'.repeat(100_000)} HTTP/1.1`), expect: [414] },
    { label: 'query-20k', bytes: request(`GET ${path}?${'q'.repeat(20_000)} HTTP/1.1`), expect: [414] },
    { label: 'absolute-form', bytes: request(`GET http://127.0.0.1${path}x HTTP/1.1`), expect: [404] },
    {
      label: 'absolute-form-other-host',
      bytes: request('GET https://berth.invalid/ HTTP/1.1'),
      expect: [404],
    },
    { label: 'absolute-form-no-path', bytes: request('GET http://127.0.0.1 HTTP/1.1'), expect: [404] },
    { label: 'asterisk', bytes: request('OPTIONS * HTTP/1.1'), expect: [400] },
    { label: 'no-leading-slash', bytes: request('GET exec/abc HTTP/1.1'), expect: [400] },
    { label: 'connect-authority', bytes: request('CONNECT 127.0.0.1:22 HTTP/1.1'), expect: [400, 405] },
    { label: 'http-1.0-no-host', bytes: request(`GET /nothing-here HTTP/1.0`, []), expect: [404] },
    { label: 'http-1.1-no-host', bytes: request(`GET ${path} HTTP/1.1`, []), expect: [400] },
    { label: 'http-2.0', bytes: request('GET / HTTP/2.0'), expect: [400, 505] },
    { label: 'http-9.9', bytes: request('GET / HTTP/9.9'), expect: [400, 505] },
    { label: 'bad-protocol', bytes: request('GET / FOO/1.1'), expect: [400] },
    // A request line without a version reads as HTTP/0.9, a version berth does not speak.
    { label: 'no-version', bytes: request('GET /'), expect: [400, 505] },
    { label: 'http-1.1-lowercase', bytes: request('GET / http/1.1'), expect: [400] },
    { label: 'unknown-method', bytes: request('BREW / HTTP/1.1'), expect: [400, 501] },
    { label: 'malformed-method', bytes: request('G@T / HTTP/1.1'), expect: [400] },
    { label: 'lowercase-method', bytes: request('get / HTTP/1.1'), expect: [400, 501] },
    { label: 'delete-on-route', bytes: request(`DELETE ${path} HTTP/1.1`), expect: [404, 405] },
    { label: 'put-on-route', bytes: request(`PUT ${path} HTTP/1.1`), expect: [404, 405] },
    { label: 'trace', bytes: request('TRACE / HTTP/1.1'), expect: [404, 405] },
    { label: 'empty-lines', bytes: Buffer.from(CRLF + CRLF), incomplete: true },
    { label: 'nul-in-path', bytes: request('GET /a\0b HTTP/1.1'), expect: [400] },
    { label: 'nul-line', bytes: Buffer.from('\0\0\0\0' + CRLF + CRLF), expect: [400] },
    { label: 'tab-in-line', bytes: request('GET\t/\tHTTP/1.1'), expect: [400] },
    { label: 'lf-only', bytes: Buffer.from(`GET //x HTTP/1.1\nHost: berth\n\n`), expect: [400] },
    { label: 'high-bytes-path', bytes: request('GET /\xff\xfe\x80 HTTP/1.1'), expect: [400, 404] },
    { label: 'tls-hello', bytes: Buffer.from('160301020001', 'hex'), expect: [400] },
    { label: 'spdy-frame-first', bytes: Buffer.from('80030001000000', 'hex'), expect: [400] },
    { label: 'half-line', bytes: Buffer.from('GET /exec/'), incomplete: true },
  ];
  for (let i = 0; i < randomCount; i++) cases.push(randomRequestLine(rng, i, path));
  return cases;
}

const METHODS = ['GET', 'POST', 'HEAD', 'PUT', 'OPTIONS', 'PATCH', 'CONNECT', 'X', ''];
const VERSIONS = ['HTTP/1.1', 'HTTP/1.0', 'HTTP/1.2', 'HTTP/0.9', 'http/1.1', 'HTTP/11', ''];

function randomRequestLine(rng: Rng, i: number, path: string): HttpCase {
  const segments = Array.from({ length: 1 + rng.int(6) }, () => randomToken(rng, 1 + rng.int(30)));
  const target = rng.pick([
    `/${segments.join('/')}`,
    `${path}/${segments.join('')}`,
    `/${segments.join('//')}`,
    segments.join('/'),
    `/${segments.join('/')}?${segments.join('&')}`,
    `http://${segments[0] ?? 'x'}/${segments.join('/')}`,
  ]);
  const line = `${rng.pick(METHODS)} ${target} ${rng.pick(VERSIONS)}`;
  return { label: `random-line-${i}`, bytes: request(line) };
}

/** Printable, control and 8-bit bytes, as a hostile client strings them together. */
function randomToken(rng: Rng, length: number): string {
  let out = '';
  for (let i = 0; i < length; i++) {
    const pool = rng.int(10);
    out += String.fromCharCode(pool < 7 ? 0x21 + rng.int(94) : pool < 9 ? 0x80 + rng.int(128) : rng.int(32));
  }
  return out;
}

/** Headers around a request for `path` that must be refused or ignored, never crash the listener. */
export function headerCases(rng: Rng, path: string, randomCount = 12): HttpCase[] {
  const line = `GET ${path} HTTP/1.1`;
  const many = (n: number, size: number): string[] =>
    Array.from({ length: n }, (_, i) => `X-Filler-${i}: ${'v'.repeat(size)}`);
  const cases: HttpCase[] = [
    {
      label: 'header-20k',
      bytes: request(line, ['Host: berth', `X-Big: ${'h'.repeat(20_000)}`]),
      expect: [431],
    },
    {
      label: 'header-1M',
      bytes: request(line, ['Host: berth', `X-Big: ${'h'.repeat(1_000_000)}`]),
      expect: [431],
    },
    { label: 'headers-5000', bytes: request(line, ['Host: berth', ...many(5_000, 1)]), expect: [431] },
    { label: 'headers-150', bytes: request(line, ['Host: berth', ...many(150, 8)]) },
    { label: 'no-colon', bytes: request(line, ['Host: berth', 'NoColonHere']), expect: [400] },
    { label: 'space-before-colon', bytes: request(line, ['Host : berth']), expect: [400] },
    { label: 'obs-fold', bytes: request(line, ['Host: berth', 'X-A: a', ' folded']), expect: [400] },
    { label: 'nul-in-value', bytes: request(line, ['Host: berth', 'X-A: a\0b']), expect: [400] },
    { label: 'cr-in-value', bytes: request(line, ['Host: berth', 'X-A: a\rb']), expect: [400] },
    { label: 'two-hosts', bytes: request(line, ['Host: a', 'Host: b']) },
    {
      label: 'cl-and-te',
      bytes: request(line, ['Host: berth', 'Content-Length: 5', 'Transfer-Encoding: chunked']),
      expect: [400],
    },
    { label: 'negative-cl', bytes: request(line, ['Host: berth', 'Content-Length: -1']), expect: [400] },
    {
      label: 'two-cls',
      bytes: request(line, ['Host: berth', 'Content-Length: 1', 'Content-Length: 2']),
      expect: [400],
    },
    {
      label: 'huge-cl',
      bytes: request(line, ['Host: berth', 'Content-Length: 99999999999999999999']),
      expect: [400],
    },
    {
      label: 'bad-chunked',
      bytes: request(line, ['Host: berth', 'Transfer-Encoding: chunked'], `${CRLF}zz${CRLF}`),
      expect: [400, 404],
    },
    {
      label: 'te-unknown',
      bytes: request(line, ['Host: berth', 'Transfer-Encoding: gzip, x']),
      expect: [400, 404, 501],
    },
    { label: 'upgrade-without-connection', bytes: request(line, ['Host: berth', 'Upgrade: websocket']) },
    { label: 'connection-without-upgrade', bytes: request(line, ['Host: berth', 'Connection: Upgrade']) },
    {
      label: 'upgrade-h2c',
      bytes: request(line, [
        'Host: berth',
        'Connection: Upgrade, HTTP2-Settings',
        'Upgrade: h2c',
        'HTTP2-Settings: AAMAAABkAAQAAP__',
      ]),
    },
    { label: 'upgrade-empty', bytes: request(line, ['Host: berth', 'Connection: Upgrade', 'Upgrade: ']) },
    {
      label: 'upgrade-spdy-no-version',
      bytes: request(line, ['Host: berth', 'Connection: Upgrade', 'Upgrade: SPDY/3.1']),
    },
    {
      label: 'upgrade-ws-no-key',
      bytes: request(line, [
        'Host: berth',
        'Connection: Upgrade',
        'Upgrade: websocket',
        'Sec-WebSocket-Version: 13',
      ]),
    },
    {
      label: 'upgrade-ws-garbage-protocol',
      bytes: request(line, [
        'Host: berth',
        'Connection: Upgrade',
        'Upgrade: websocket',
        'Sec-WebSocket-Key: x',
        'Sec-WebSocket-Protocol: ,,, ;;;',
      ]),
    },
    {
      label: 'upgrade-with-body',
      bytes: request(
        line,
        ['Host: berth', 'Connection: Upgrade', 'Upgrade: websocket', 'Content-Length: 4'],
        `${CRLF}abcd`,
      ),
    },
    {
      label: 'expect-100',
      bytes: request(line, ['Host: berth', 'Expect: 100-continue', 'Content-Length: 10']),
    },
    { label: 'header-8bit', bytes: request(line, ['Host: berth', 'X-A: \xff\xfe\x80']) },
    { label: 'body-pending', bytes: request(line, ['Host: berth', 'Content-Length: 1000000']) },
    {
      label: 'headers-unfinished',
      bytes: Buffer.from(`${line}${CRLF}Host: berth${CRLF}X-A: `),
      incomplete: true,
    },
  ];
  for (let i = 0; i < randomCount; i++) {
    const headers = Array.from(
      { length: 1 + rng.int(8) },
      () =>
        `${randomToken(rng, 1 + rng.int(20))}: ${randomToken(rng, rng.int(rng.next() < 0.1 ? 20_000 : 60))}`,
    );
    cases.push({ label: `random-headers-${i}`, bytes: request(line, ['Host: berth', ...headers]) });
  }
  return cases;
}

/** The statuses a refused request may get: an error of the client's or, for a bug of ours, the server's. */
export function isRefusal(status: number | undefined): boolean {
  return status !== undefined && status >= 400 && status <= 599;
}
