/**
 * Hostile request values for the CRI fuzz suite (test/e2e/hostile-cri-*.test.ts), and a CRI client
 * whose every call carries a deadline. The values come from a fixed list (control characters,
 * unicode edge cases, path traversal, numeric edges, huge strings) plus a few seeded random ones,
 * so a failure reproduces from the seed the suite prints.
 */
import {
  credentials,
  loadPackageDefinition,
  status,
  type Client,
  type ClientReadableStream,
  type GrpcObject,
  type MethodDefinition,
  type ServiceClientConstructor,
  type ServiceError,
} from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { PROTO_LOADER_OPTIONS, PROTO_PATH } from '../../src/cri/loader.js';

// --- Seeded randomness ------------------------------------------------------------------------

/** Used unless BERTH_HOSTILE_SEED is set; any failure it finds reproduces with the same seed. */
export const DEFAULT_SEED = 0x62657274;

export function hostileSeed(): number {
  const raw = process.env.BERTH_HOSTILE_SEED;
  if (!raw) return DEFAULT_SEED;
  const seed = Number(raw);
  if (!Number.isSafeInteger(seed)) throw new Error(`BERTH_HOSTILE_SEED=${raw} is not an integer`);
  return seed >>> 0;
}

/** mulberry32: small, fast and the same on every Node version. */
export class Rng {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  pick<T>(items: readonly T[]): T {
    const item = items[this.int(items.length)];
    if (item === undefined) throw new Error('pick from an empty list');
    return item;
  }

  /** `k` items in their original order, chosen without replacement. */
  sample<T>(items: readonly T[], k: number): T[] {
    const chosen = new Set<number>();
    while (chosen.size < Math.min(k, items.length)) chosen.add(this.int(items.length));
    return [...chosen].sort((a, b) => a - b).map((i) => items[i] as T);
  }
}

// --- Values -----------------------------------------------------------------------------------

export interface Hostile<T = unknown> {
  /** Short and printable: what the failure list names the value by. */
  label: string;
  value: T;
}

export const HUGE_110K = 'x'.repeat(110_000);
export const HUGE_1M = 'y'.repeat(1_000_000);

/** Labels of the strings every field gets, even in the reduced sets of expensive RPCs. */
const CORE_LABELS = new Set([
  'empty',
  'space',
  'newline',
  'nul',
  'rtl-override',
  'emoji',
  'lone-surrogate',
  'traversal',
  'absolute',
  'dotdot',
  'int32-overflow',
  '__proto__',
  '256-chars',
  '110k-chars',
  '1M-chars',
]);

const LIGHT_LABELS = new Set(['newline', 'nul', 'rtl-override', 'lone-surrogate', '__proto__', '1M-chars']);

const FIXED_STRINGS: readonly Hostile<string>[] = [
  { label: 'empty', value: '' },
  { label: 'space', value: ' ' },
  { label: 'tab', value: '\t' },
  { label: 'newline', value: '\n' },
  { label: 'cr', value: '\r' },
  { label: 'crlf-header', value: 'a\r\nX-Injected: 1' },
  { label: 'nul', value: '\0' },
  { label: 'inner-nul', value: 'a\0b' },
  { label: 'esc', value: '\x1b[31mred\x1b[0m\x1b]0;title\x07' },
  { label: 'del', value: '\x7f' },
  { label: 'nel', value: '\u0085' },
  { label: 'line-separator', value: 'a\u2028b' },
  { label: 'rtl-override', value: '\u202eevil\u202c.txt' },
  { label: 'hebrew', value: 'שלום' },
  { label: 'arabic', value: 'مرحبا بالعالم' },
  { label: 'emoji', value: '😀' },
  { label: 'zwj-emoji', value: '👩‍👩‍👧‍👦' },
  { label: 'lone-surrogate', value: 'a\ud800b' },
  { label: 'lone-low-surrogate', value: '\udfff' },
  { label: 'bom', value: '\ufeff' },
  { label: 'noncharacter', value: '\uffff' },
  { label: 'combining', value: 'e\u0301\u0301\u0301' },
  { label: 'traversal', value: '../../etc/passwd' },
  { label: 'absolute', value: '/etc/passwd' },
  { label: 'root', value: '/' },
  { label: 'dot', value: '.' },
  { label: 'dotdot', value: '..' },
  { label: 'absolute-traversal', value: '/var/log/../../etc/shadow' },
  { label: 'inner-traversal', value: 'a/../../b' },
  { label: 'backslash', value: '..\\..\\windows' },
  { label: 'proc-root', value: '/proc/self/root/etc' },
  { label: 'shell', value: '$(touch /tmp/berth-hostile-pwned)' },
  { label: 'backtick', value: '`id`' },
  { label: 'semicolon', value: 'a; rm -rf /' },
  { label: 'format', value: '%s%n%x%p' },
  { label: 'template', value: '{{.}}${HOME}' },
  { label: 'quotes', value: `"'` },
  { label: 'glob', value: '*?[a]' },
  { label: 'json', value: '{"a":[1]}' },
  { label: 'sql', value: "' OR '1'='1" },
  { label: 'minus-one', value: '-1' },
  { label: 'zero', value: '0' },
  { label: 'int32-max', value: '2147483647' },
  { label: 'int32-overflow', value: '2147483648' },
  { label: '2^53', value: '9007199254740992' },
  { label: 'int64-min', value: '-9223372036854775808' },
  { label: 'NaN', value: 'NaN' },
  { label: '-Infinity', value: '-Infinity' },
  { label: 'exponent', value: '1e308' },
  { label: 'hex', value: '0x7f' },
  { label: '__proto__', value: '__proto__' },
  { label: 'constructor', value: 'constructor' },
  { label: '255-chars', value: 'a'.repeat(255) },
  { label: '256-chars', value: 'a'.repeat(256) },
  { label: '4097-chars', value: 'a'.repeat(4097) },
  { label: '64k-chars', value: 'a'.repeat(65_536) },
  { label: '110k-chars', value: HUGE_110K },
  { label: '1M-chars', value: HUGE_1M },
  { label: 'newline+110k', value: `\n${HUGE_110K}` },
];

/** Code points random strings are built from: printable ASCII, controls, path characters, RTL, astral. */
const RANDOM_POOLS: readonly (readonly [number, number])[] = [
  [0x20, 0x7e],
  [0x00, 0x1f],
  [0x2e, 0x2f],
  [0x80, 0x9f],
  [0x590, 0x6ff],
  [0x200b, 0x202e],
  [0xd800, 0xdfff],
  [0x1f300, 0x1f64f],
];

function randomString(rng: Rng): string {
  const length = 1 + rng.int(rng.next() < 0.2 ? 2000 : 40);
  let out = '';
  for (let i = 0; i < length; i++) {
    const [lo, hi] = rng.pick(RANDOM_POOLS);
    out += String.fromCodePoint(lo + rng.int(hi - lo + 1));
  }
  return out;
}

export interface StringSets {
  /** Every fixed value plus the random ones. */
  full: Hostile<string>[];
  /** The core values plus a seeded few others: for RPCs where an accepted value costs a pod. */
  reduced: Hostile<string>[];
  /** What a stored-but-unused field of such an rpc gets: encoding and size trouble only. */
  light: Hostile<string>[];
}

/** Built once per run from the seed, so every field sees the same random strings. */
export function hostileStrings(rng: Rng, randomCount = 6, reducedExtra = 2): StringSets {
  const random = Array.from({ length: randomCount }, (_, i) => ({
    label: `random-${i}`,
    value: randomString(rng),
  }));
  const full = [...FIXED_STRINGS, ...random];
  const others = full.filter((h) => !CORE_LABELS.has(h.label));
  const reduced = [
    ...FIXED_STRINGS.filter((h) => CORE_LABELS.has(h.label)),
    ...rng.sample(others, reducedExtra),
  ];
  const light = FIXED_STRINGS.filter((h) => LIGHT_LABELS.has(h.label));
  return { full, reduced, light };
}

/** Variations of a real id: prefixes that do match it, and near-misses that must not. */
export function idVariants(id: string): Hostile<string>[] {
  return [
    { label: 'id-prefix-1', value: id.slice(0, 1) },
    { label: 'id-prefix-2', value: id.slice(0, 2) },
    { label: 'id-prefix-3', value: id.slice(0, 3) },
    { label: 'id+newline', value: `${id}\n` },
    { label: 'id+nul', value: `${id}\0` },
    { label: 'space+id', value: ` ${id}` },
    { label: 'id-uppercase', value: id.toUpperCase() },
    { label: 'id+/..', value: `${id}/..` },
    { label: 'id-prefix+%', value: `${id.slice(0, 3)}%` },
    { label: 'percent', value: '%' },
    { label: 'underscore', value: '_' },
    { label: 'unknown-64-hex', value: 'f'.repeat(63) + (id.startsWith('f') ? 'e' : 'f') },
    { label: '128-chars', value: 'a'.repeat(128) },
    { label: '129-chars', value: 'a'.repeat(129) },
  ];
}

/**
 * Image references that never name a real host: the registry part is 127.0.0.1 on a port nothing
 * listens on, or the reference is malformed before any registry part can be read from it.
 */
export function imageRefs(strings: readonly Hostile<string>[], closedPort: number): Hostile<string>[] {
  const host = `127.0.0.1:${closedPort}`;
  const malformed: Hostile<string>[] = [
    { label: 'empty', value: '' },
    { label: 'space', value: ' ' },
    { label: 'newline', value: '\n' },
    { label: 'nul', value: '\0' },
    { label: 'at', value: '@' },
    { label: 'colon', value: ':' },
    { label: 'slashes', value: '//' },
    { label: 'uppercase+space', value: 'A B' },
    { label: 'digest-only', value: '@sha256:' },
  ];
  return [
    ...malformed,
    { label: 'digest-ref', value: `${host}/berth/absent@sha256:${'0'.repeat(64)}` },
    { label: 'bad-digest', value: `${host}/berth/absent@sha256:xyz` },
    { label: 'md5-digest', value: `${host}/berth/absent@md5:${'0'.repeat(32)}` },
    ...strings.map((h) => ({ label: `repo:${h.label}`, value: `${host}/${h.value}` })),
    ...strings.map((h) => ({ label: `tag:${h.label}`, value: `${host}/berth/absent:${h.value}` })),
  ];
}

export const INT64_VALUES: readonly Hostile<string>[] = [
  { label: '-1', value: '-1' },
  { label: '0', value: '0' },
  { label: '1', value: '1' },
  { label: '2^31-1', value: '2147483647' },
  { label: '2^31', value: '2147483648' },
  { label: '2^32', value: '4294967296' },
  { label: '2^53-1', value: '9007199254740991' },
  { label: '2^53', value: '9007199254740992' },
  { label: '2^63-1', value: '9223372036854775807' },
  { label: '-2^63', value: '-9223372036854775808' },
  { label: 'NaN', value: 'NaN' },
  { label: 'Infinity', value: 'Infinity' },
  { label: '1e3', value: '1e3' },
  { label: 'abc', value: 'abc' },
];

export const INT32_VALUES: readonly Hostile<number>[] = [
  { label: '-1', value: -1 },
  { label: '0', value: 0 },
  { label: '1', value: 1 },
  { label: '65535', value: 65535 },
  { label: '65536', value: 65536 },
  { label: '2^31-1', value: 2147483647 },
  { label: '-2^31', value: -2147483648 },
  { label: '2^31', value: 2147483648 },
  { label: 'NaN', value: Number.NaN },
  { label: '1.5', value: 1.5 },
];

export const UINT32_VALUES: readonly Hostile<number>[] = [
  { label: '-1', value: -1 },
  { label: '0', value: 0 },
  { label: '1', value: 1 },
  { label: '2^31', value: 2147483648 },
  { label: '2^32-1', value: 4294967295 },
  { label: '2^32', value: 4294967296 },
  { label: 'NaN', value: Number.NaN },
];

/** Unknown names are dropped by the encoder; unknown numbers reach the server as numbers. */
export const ENUM_VALUES: readonly Hostile<string | number>[] = [
  { label: 'unknown-name', value: 'BERTH_BOGUS' },
  { label: '1', value: 1 },
  { label: '2', value: 2 },
  { label: '3', value: 3 },
  { label: '99', value: 99 },
  { label: '-1', value: -1 },
  { label: '2^31-1', value: 2147483647 },
];

export const BOOL_VALUES: readonly Hostile<boolean>[] = [
  { label: 'true', value: true },
  { label: 'false', value: false },
];

export const BYTES_VALUES: readonly Hostile<Buffer>[] = [
  { label: 'empty', value: Buffer.alloc(0) },
  { label: 'invalid-utf8', value: Buffer.from([0xff, 0xfe, 0xc0, 0x80]) },
  { label: 'cesu-surrogate', value: Buffer.from([0xed, 0xa0, 0x80]) },
  { label: 'nul', value: Buffer.from('a\0b') },
  { label: 'newline', value: Buffer.from('a\nb') },
  { label: '1MB', value: Buffer.alloc(1_000_000, 0x61) },
];

/**
 * Request bodies no protobuf encoder would write, sent as the raw message of any rpc: what a
 * hostile client puts on the wire without a library in between.
 */
export const WIRE_PAYLOADS: readonly Hostile<Buffer>[] = [
  { label: 'empty', value: Buffer.alloc(0) },
  { label: 'truncated-varint', value: Buffer.from([0x08, 0xff]) },
  { label: 'wire-type-7', value: Buffer.from([0x0f, 0x00]) },
  { label: 'length-4GiB', value: Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]) },
  { label: 'invalid-utf8-field-1', value: Buffer.from([0x0a, 0x03, 0xff, 0xfe, 0x00]) },
  { label: 'unknown-field-2^29-1', value: Buffer.from([0xf8, 0xff, 0xff, 0xff, 0x0f, 0x01]) },
  // Unknown field 15 as 100,000 nested groups: a recursive skipper runs out of stack.
  {
    label: 'nested-groups-100k',
    value: Buffer.concat([Buffer.alloc(100_000, 0x7b), Buffer.alloc(100_000, 0x7c)]),
  },
  { label: 'unterminated-group', value: Buffer.from([0x7b, 0x08, 0x01]) },
  { label: 'random-1KiB', value: Buffer.from(Array.from({ length: 1024 }, (_, i) => (i * 7919 + 13) % 256)) },
];

// --- Building requests ------------------------------------------------------------------------

type Segment = string | number;

/** "config.dns_config.options[0]" → ['config', 'dns_config', 'options', 0]. */
export function parsePath(path: string): Segment[] {
  const out: Segment[] = [];
  for (const part of path.split('.')) {
    const m = /^([^[]+)((?:\[\d+\])*)$/.exec(part);
    if (!m || m[1] === undefined) throw new Error(`bad path ${path}`);
    out.push(m[1]);
    for (const idx of (m[2] ?? '').matchAll(/\[(\d+)\]/g)) out.push(Number(idx[1]));
  }
  return out;
}

type Container = Record<string, unknown> | unknown[];

function isContainer(v: unknown): v is Container {
  return typeof v === 'object' && v !== null && !Buffer.isBuffer(v);
}

function cloneDeep<T>(value: T): T {
  if (Buffer.isBuffer(value)) return Buffer.from(value) as T;
  if (Array.isArray(value)) return value.map((v: unknown) => cloneDeep(v)) as T;
  if (isContainer(value)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, cloneDeep(v)])) as T;
  }
  return value;
}

/** A copy of `base` with the value at `path` replaced; missing messages and lists are created. */
export function withValue<T extends object>(base: T, path: string, value: unknown): T {
  const root = cloneDeep(base) as Record<string, unknown>;
  const segs = parsePath(path);
  let node: Container = root;
  for (let i = 0; i < segs.length - 1; i++) {
    const seg = segs[i] as Segment;
    const nextIsIndex = typeof segs[i + 1] === 'number';
    const current: unknown = (node as Record<Segment, unknown>)[seg];
    const child: Container = isContainer(current) ? current : nextIsIndex ? [] : {};
    (node as Record<Segment, unknown>)[seg] = child;
    node = child;
  }
  const last = segs[segs.length - 1] as Segment;
  if (Array.isArray(node) && typeof last === 'number') {
    // A list shorter than the index gets the index's slot filled, not holes.
    while (node.length < last) node.push(node[0] ?? '');
  }
  (node as Record<Segment, unknown>)[last] = value;
  return root as T;
}

export function getPath(obj: unknown, path: string): unknown {
  let node: unknown = obj;
  for (const seg of parsePath(path)) {
    if (!isContainer(node)) return undefined;
    node = (node as Record<Segment, unknown>)[seg];
  }
  return node;
}

/** A map with one more entry; an own "__proto__" key stays a key, as on the wire. */
export function mapWith(map: unknown, key: string, value: string): Record<string, string> {
  const entries = isContainer(map) ? Object.entries(map as Record<string, string>) : [];
  return Object.fromEntries([...entries, [key, value]]) as Record<string, string>;
}

/** A printable, bounded description of a value for failure lists. */
export function summarize(value: unknown, max = 60): string {
  if (Buffer.isBuffer(value))
    return `<${value.length} bytes ${JSON.stringify(value.subarray(0, 16).toString('latin1'))}>`;
  if (Array.isArray(value))
    return `[${value.length} items${value.length ? `: ${summarize(value[0], 30)}, …` : ''}]`;
  if (typeof value === 'string') {
    const shown = JSON.stringify(value.length > max ? value.slice(0, max) : value);
    return value.length > max ? `${shown}… (${value.length} chars)` : shown;
  }
  if (isContainer(value)) return `{${Object.keys(value).length} keys}`;
  return String(value);
}

// --- A client with deadlines ------------------------------------------------------------------

export interface CallOutcome {
  code: status;
  details: string;
  ms: number;
  response: unknown;
  /**
   * The client gave up (its deadline) or never reached the server: the daemon gave no answer of
   * its own, which is a failure whatever the code.
   */
  noAnswer: boolean;
}

export type ServiceName = 'runtime' | 'image';

interface RpcMethod {
  definition: MethodDefinition<unknown, unknown>;
  service: ServiceName;
}

type UnaryFn = (
  req: unknown,
  options: { deadline: Date },
  cb: (err: ServiceError | null, res: unknown) => void,
) => void;
type StreamFn = (req: unknown, options: { deadline: Date }) => ClientReadableStream<unknown>;
const asIs = (bytes: Buffer): Buffer => bytes;

/**
 * A CRI client on a connection of its own (a local subchannel pool: not shared with the harness's
 * CriClient), so a call that stalls its connection is seen here and a reconnect starts clean.
 */
export class DeadlineClient {
  private runtime!: Client;
  private image!: Client;
  private readonly runtimeCtor: ServiceClientConstructor;
  private readonly imageCtor: ServiceClientConstructor;
  readonly methods = new Map<string, RpcMethod>();

  constructor(private readonly socket: string) {
    const pkg = loadPackageDefinition(loadSync(PROTO_PATH, PROTO_LOADER_OPTIONS));
    const v1 = (pkg.runtime as GrpcObject).v1 as GrpcObject;
    this.runtimeCtor = v1.RuntimeService as ServiceClientConstructor;
    this.imageCtor = v1.ImageService as ServiceClientConstructor;
    for (const [service, ctor] of [
      ['runtime', this.runtimeCtor],
      ['image', this.imageCtor],
    ] as const) {
      for (const [rpc, definition] of Object.entries(ctor.service)) {
        this.methods.set(rpc, { definition: definition as MethodDefinition<unknown, unknown>, service });
      }
    }
    this.connect();
  }

  private connect(): void {
    const options = {
      'grpc.use_local_subchannel_pool': 1,
      'grpc.max_receive_message_length': 64 * 1024 * 1024,
    };
    this.runtime = new this.runtimeCtor(`unix://${this.socket}`, credentials.createInsecure(), options);
    this.image = new this.imageCtor(`unix://${this.socket}`, credentials.createInsecure(), options);
  }

  /** A fresh connection: after a stalled call, so later cases are not blamed for it. */
  reconnect(): void {
    this.close();
    this.connect();
  }

  close(): void {
    this.runtime.close();
    this.image.close();
  }

  /** Why the request cannot be encoded (a client-side limit, not the server's), or null. */
  encodeError(rpc: string, req: unknown): string | null {
    const method = this.methods.get(rpc);
    if (!method) return `no rpc ${rpc}`;
    try {
      method.definition.requestSerialize(req);
      return null;
    } catch (err) {
      return err instanceof Error ? err.message : String(err);
    }
  }

  /**
   * Unary calls wait for their answer. A server stream is read until it ends or fails, or, if it
   * stays open `openWindowMs` without failing (an event stream), counts as answered OK.
   */
  call(rpc: string, req: unknown, deadlineMs: number, openWindowMs = 1_000): Promise<CallOutcome> {
    return this.invoke(rpc, req, null, deadlineMs, openWindowMs);
  }

  /** The same, with `bytes` sent as the request message exactly, not encoded from an object. */
  callRaw(rpc: string, bytes: Buffer, deadlineMs: number, openWindowMs = 1_000): Promise<CallOutcome> {
    return this.invoke(rpc, null, bytes, deadlineMs, openWindowMs);
  }

  private invoke(
    rpc: string,
    req: unknown,
    raw: Buffer | null,
    deadlineMs: number,
    openWindowMs: number,
  ): Promise<CallOutcome> {
    const method = this.methods.get(rpc);
    if (!method) throw new Error(`no rpc ${rpc}`);
    const client = method.service === 'runtime' ? this.runtime : this.image;
    const named = (client as unknown as Record<string, unknown>)[rpc];
    if (typeof named !== 'function') throw new Error(`no rpc ${rpc} on the client`);
    const { path, responseDeserialize } = method.definition;
    const fn: unknown = raw
      ? method.definition.responseStream
        ? (_req: unknown, options: { deadline: Date }) =>
            client.makeServerStreamRequest(path, asIs, responseDeserialize, raw, options)
        : (
            _req: unknown,
            options: { deadline: Date },
            cb: (err: ServiceError | null, res: unknown) => void,
          ) => client.makeUnaryRequest(path, asIs, responseDeserialize, raw, options, cb)
      : named;
    const started = performance.now();
    const deadline = new Date(Date.now() + deadlineMs);
    const elapsed = (): number => Math.round(performance.now() - started);
    const fromError = (err: ServiceError): CallOutcome => {
      const ms = elapsed();
      const details = typeof err.details === 'string' ? err.details : String(err.message);
      // grpc-js's own deadline reads "Deadline exceeded after …"; a server's DEADLINE_EXCEEDED
      // (ExecSync's timeout) comes well before our deadline with its own text.
      const clientDeadline =
        err.code === status.DEADLINE_EXCEEDED && ms >= deadlineMs - 50 && /^Deadline exceeded/.test(details);
      // A status the server sent arrives with its headers; one grpc-js made up (no connection, a
      // dropped one, a cancel) has none.
      const fromServer = Object.keys(err.metadata?.getMap() ?? {}).length > 0;
      return { code: err.code, details, ms, response: null, noAnswer: clientDeadline || !fromServer };
    };
    if (!method.definition.responseStream) {
      return new Promise((resolve) => {
        (fn as UnaryFn).call(client, req, { deadline }, (err, res) =>
          resolve(
            err
              ? fromError(err)
              : { code: status.OK, details: '', ms: elapsed(), response: res, noAnswer: false },
          ),
        );
      });
    }
    return new Promise((resolve) => {
      const stream = (fn as StreamFn).call(client, req, { deadline });
      const messages: unknown[] = [];
      let settled = false;
      const settle = (outcome: CallOutcome): void => {
        if (settled) return;
        settled = true;
        clearTimeout(window);
        resolve(outcome);
      };
      const window = setTimeout(() => {
        settle({ code: status.OK, details: '', ms: elapsed(), response: messages, noAnswer: false });
        stream.cancel();
      }, openWindowMs);
      stream.on('data', (m: unknown) => messages.push(m));
      stream.on('error', (err: ServiceError) => settle(fromError(err)));
      stream.on('end', () =>
        settle({ code: status.OK, details: '', ms: elapsed(), response: messages, noAnswer: false }),
      );
    });
  }
}
