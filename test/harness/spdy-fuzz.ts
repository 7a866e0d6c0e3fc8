/**
 * Hostile SPDY clients for the streaming fuzz (test/e2e/hostile-spdy.test.ts). A case is what a
 * client writes after its upgrade: most often first the streams of a real session (so that the
 * exec'd command or the port-forward runs), then a few hostile pieces, seeded: frames of every
 * type with random bodies, wrong and huge length fields, header blocks that inflate past the
 * bound, reused and backward stream ids, DATA before SYN_STREAM, thousands of streams, PING floods
 * from a client that never reads, random bytes, frames cut short. Then the client leaves, by a
 * half-close or at once, as a killed process's socket does.
 */
import { deflateRawSync, deflateSync } from 'node:zlib';
import {
  FLAG_FIN,
  FLAG_UNIDIRECTIONAL,
  FrameType,
  MAX_CONTROL_FRAME_LENGTH,
  MAX_FRAME_LENGTH,
  MAX_HEADER_BLOCK,
  RstStatus,
  StoredHeaderWriter,
  controlFrame,
  dataFrame,
  encodeHeaderBlock,
  streamIdBody,
  u32,
} from '../../src/spdy/frames.js';
import type { Rng } from './hostile.js';
import { synStreamFrame } from './streaming.js';

export type SessionKind = 'exec' | 'portforward';

export interface SpdyCase {
  /** Short and printable: what a failure names the case by. */
  label: string;
  kind: SessionKind;
  /** Exec: whether the request asks for stdin (the client then opens a stdin stream). */
  stdin: boolean;
  /** What the client writes after the upgrade, in order. */
  writes: Buffer[];
  /** false: the client never reads what berthd sends (its socket stays paused). */
  reads: boolean;
  /** How the client leaves: half-closes (FIN), or closes at once. */
  ending: 'end' | 'destroy';
}

/** The port a port-forward session's streams name; the suite serves it in the pod. */
export const FORWARDED_PORT = 80;

interface Ctx {
  rng: Rng;
  kind: SessionKind;
  stdin: boolean;
  writer: StoredHeaderWriter;
  /** Whether a header block was written: a bomb must then continue the zlib stream, not start one. */
  compressed: boolean;
  nextId: number;
  /** The ids of the session's streams (those the setup opened). */
  open: number[];
}

type Mutator = (ctx: Ctx) => { what: string; writes: Buffer[]; reads?: boolean };

const CONTROL_TYPES = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x7f, 0x7fff, 0xffff];

export const MUTATORS: Record<string, Mutator> = {
  'any-frame-type': (ctx) => {
    const writes: Buffer[] = [];
    const labels: string[] = [];
    for (let i = 0, n = 1 + ctx.rng.int(4); i < n; i++) {
      if (ctx.rng.int(4) === 0) {
        const id = ctx.rng.pick([0, 1, 2, ...ctx.open, 0x7fffffff]);
        writes.push(dataFrame(id, ctx.rng.int(256), randomBytes(ctx.rng, ctx.rng.int(64))));
        labels.push(`data@${id}`);
      } else {
        const type = ctx.rng.pick(CONTROL_TYPES);
        writes.push(controlFrame(type, ctx.rng.int(256), randomBytes(ctx.rng, ctx.rng.int(64))));
        labels.push(`type${type}`);
      }
    }
    return { what: labels.join('+'), writes };
  },
  'wrong-length': (ctx) => {
    const [type, right] = ctx.rng.pick([
      [FrameType.PING, 4],
      [FrameType.RST_STREAM, 8],
      [FrameType.GOAWAY, 8],
      [FrameType.WINDOW_UPDATE, 8],
      [FrameType.SETTINGS, 12],
      [FrameType.SYN_STREAM, 10],
      [FrameType.SYN_REPLY, 4],
      [FrameType.HEADERS, 4],
    ] as const);
    const length = ctx.rng.pick([0, 1, 3, 5, 7, 9, 11, 13, 16, 100].filter((n) => n !== right));
    // The body says one stream id; the length disagrees with what the type needs.
    const body = Buffer.concat([u32(ctx.open[0] ?? 1), Buffer.alloc(Math.max(0, length - 4))]).subarray(
      0,
      length,
    );
    return { what: `type${type}:${length}B`, writes: [controlFrame(type, 0, body)] };
  },
  'huge-length': (ctx) => {
    const length = ctx.rng.pick([MAX_FRAME_LENGTH + 1, MAX_CONTROL_FRAME_LENGTH + 1, 0xfffffe, 0xffffff]);
    const control = ctx.rng.int(2) === 0;
    const head = control
      ? controlFrame(
          ctx.rng.pick([FrameType.SYN_STREAM, FrameType.PING, FrameType.HEADERS, 0x7f]),
          0,
          Buffer.alloc(0),
        )
      : dataFrame(ctx.rng.pick([1, 3, 5, 7]), 0, Buffer.alloc(0));
    head.writeUIntBE(length, 5, 3);
    // Some of the body follows, rarely all of it: the server must not wait for it to answer.
    const sent = ctx.rng.int(3) === 0 && !control ? length : ctx.rng.int(70_000);
    return {
      what: `${control ? 'control' : 'data'}:${length}B(sent ${sent})`,
      writes: [head, Buffer.alloc(sent)],
    };
  },
  'zlib-bomb': (ctx) => {
    const size = ctx.rng.pick([MAX_HEADER_BLOCK + 1, 1 << 20, 16 << 20, 100 << 20]);
    const block = bomb(size, ctx.compressed);
    ctx.compressed = true;
    const id = ctx.nextId;
    ctx.nextId += 2;
    const type = ctx.rng.pick([FrameType.SYN_STREAM, FrameType.HEADERS]);
    const body =
      type === FrameType.SYN_STREAM
        ? Buffer.concat([u32(id), Buffer.alloc(6), block])
        : streamIdBody(ctx.open[0] ?? id, block);
    return { what: `type${type}:inflates to ${size}B`, writes: [controlFrame(type, 0, body)] };
  },
  'big-header-block': (ctx) => {
    // Over zlib's 16 KiB output buffer; past the bound, or under it (then the stream is taken).
    const size = ctx.rng.pick([17 * 1024, 40 * 1024, 60 * 1024, MAX_HEADER_BLOCK + 1024, 200 * 1024]);
    const id = ctx.nextId;
    ctx.nextId += 2;
    ctx.compressed = true;
    const frame = synStreamFrame(ctx.writer, id, { streamType: 'extra', padding: 'p'.repeat(size) });
    return { what: `syn ${id} with ${size}B of headers`, writes: [frame] };
  },
  'stream-id-reuse': (ctx) => {
    const last = ctx.nextId - 2;
    const ids = [ctx.rng.pick([...ctx.open, 1]), Math.max(1, last - 2), 2, 0, 0x7fffffff, last];
    const id = ctx.rng.pick(ids);
    const writes = [synStream(ctx, id, { streamType: ctx.rng.pick(['error', 'stdout', 'data']) })];
    if (id === 0x7fffffff) writes.push(synStream(ctx, 1, { streamType: 'data' }));
    return { what: `syn ${id} after ${last}`, writes };
  },
  'data-before-syn': (ctx) => {
    const ids = [ctx.nextId, ctx.nextId + 2, 2, 4, 0x7fffffff, 0];
    const id = ctx.rng.pick(ids);
    const flags = ctx.rng.pick([0, FLAG_FIN]);
    const writes = [dataFrame(id, flags, randomBytes(ctx.rng, 1 + ctx.rng.int(1000)))];
    // And then opening that very stream.
    if (id === ctx.nextId && ctx.rng.int(2) === 0) writes.push(synStream(ctx, id, { streamType: 'data' }));
    return { what: `data@${id} before its syn`, writes };
  },
  'many-streams': (ctx) => {
    const count = ctx.rng.pick([300, 1000, 3000]);
    const fin = ctx.rng.int(2) === 0;
    const frames: Buffer[] = [];
    for (let i = 0; i < count; i++) {
      const id = ctx.nextId;
      ctx.nextId += 2;
      // Port-forward error streams without their data stream: never dialled, only waiting.
      const headers: Record<string, string> =
        ctx.kind === 'portforward'
          ? { streamType: 'error', port: '80', requestID: `x${i}` }
          : { streamType: `s${i}` };
      frames.push(synStreamFrame(ctx.writer, id, headers, fin ? FLAG_FIN : 0));
      ctx.compressed = true;
      if (ctx.rng.int(4) === 0) frames.push(dataFrame(id, 0, Buffer.from('x')));
    }
    return { what: `${count} streams${fin ? ' with FIN' : ''}`, writes: [Buffer.concat(frames)] };
  },
  'ping-flood': (ctx) => {
    const count = ctx.rng.pick([20_000, 100_000, 300_000]);
    const ping = Buffer.concat(
      Array.from({ length: 1000 }, (_, i) => controlFrame(FrameType.PING, 0, u32(2 * i + 1))),
    );
    return {
      what: `${count} pings, never read`,
      writes: Array.from({ length: count / 1000 }, () => ping),
      reads: false,
    };
  },
  'stdin-data': (ctx) => {
    const id = ctx.open[1] ?? 1;
    const size = ctx.rng.pick([1, 1000, 64 * 1024, 1 << 20]);
    const chunks: Buffer[] = [];
    for (let at = 0; at < size; at += 32 * 1024)
      chunks.push(dataFrame(id, 0, Buffer.alloc(Math.min(32 * 1024, size - at), 0x61)));
    const after = ctx.rng.pick(['nothing', 'fin', 'fin+data', 'rst']);
    if (after !== 'nothing' && after !== 'rst') chunks.push(dataFrame(id, FLAG_FIN, Buffer.alloc(0)));
    if (after === 'fin+data') chunks.push(dataFrame(id, 0, Buffer.from('after the end')));
    if (after === 'rst')
      chunks.push(controlFrame(FrameType.RST_STREAM, 0, Buffer.concat([u32(id), u32(RstStatus.CANCEL)])));
    return { what: `${size}B on stream ${id}, then ${after}`, writes: chunks };
  },
  'session-frames': (ctx) => {
    // Frames a real client may send, at odd times: resets, GOAWAY, SETTINGS, HEADERS with FIN.
    const writes: Buffer[] = [];
    const labels: string[] = [];
    for (let i = 0, n = 1 + ctx.rng.int(3); i < n; i++) {
      const id = ctx.rng.pick(ctx.open.length > 0 ? ctx.open : [1]);
      switch (ctx.rng.int(5)) {
        case 0:
          writes.push(
            controlFrame(FrameType.RST_STREAM, 0, Buffer.concat([u32(id), u32(1 + ctx.rng.int(11))])),
          );
          labels.push(`rst ${id}`);
          break;
        case 1:
          writes.push(
            controlFrame(FrameType.GOAWAY, 0, Buffer.concat([u32(ctx.nextId), u32(ctx.rng.int(3))])),
          );
          labels.push('goaway');
          break;
        case 2:
          writes.push(
            controlFrame(FrameType.SETTINGS, 0, Buffer.concat([u32(1), u32(4), u32(ctx.rng.int(10))])),
          );
          labels.push('settings');
          break;
        case 3: {
          const block = ctx.writer.compress(encodeHeaderBlock(new Map([['x', 'y']])));
          ctx.compressed = true;
          writes.push(controlFrame(FrameType.HEADERS, FLAG_FIN, streamIdBody(id, block)));
          labels.push(`headers+fin ${id}`);
          break;
        }
        default:
          writes.push(synStream(ctx, ctx.nextId, { streamType: 'error' }, FLAG_UNIDIRECTIONAL | FLAG_FIN));
          labels.push('unidirectional syn');
      }
    }
    return { what: labels.join('+'), writes };
  },
  garbage: (ctx) => ({ what: 'random bytes', writes: [randomBytes(ctx.rng, 1 + ctx.rng.int(4096))] }),
  truncated: (ctx) => {
    const frame = ctx.rng.pick([
      synStream(ctx, ctx.nextId, { streamType: 'data' }),
      controlFrame(FrameType.PING, 0, u32(1)),
      dataFrame(ctx.open[0] ?? 1, 0, Buffer.alloc(5000)),
    ]);
    const cut = 1 + ctx.rng.int(frame.length - 1);
    return { what: `a frame cut at ${cut} of ${frame.length}B`, writes: [frame.subarray(0, cut)] };
  },
};

/** The cases of one run: every mutator for both kinds first, then seeded picks, `count` in all. */
export function spdyCases(rng: Rng, count: number): SpdyCase[] {
  const names = Object.keys(MUTATORS);
  const kinds: SessionKind[] = ['exec', 'portforward'];
  const cases: SpdyCase[] = [];
  for (let i = 0; i < count; i++) {
    const first = i < names.length * kinds.length;
    const name = first ? (names[i % names.length] as string) : rng.pick(names);
    const kind = first ? (kinds[Math.floor(i / names.length)] as SessionKind) : rng.pick(kinds);
    cases.push(buildCase(rng, name, kind));
  }
  return cases;
}

function buildCase(rng: Rng, name: string, kind: SessionKind): SpdyCase {
  const ctx: Ctx = {
    rng,
    kind,
    stdin: kind === 'exec' && rng.int(2) === 0,
    writer: new StoredHeaderWriter(),
    compressed: false,
    nextId: 1,
    open: [],
  };
  const writes: Buffer[] = [];
  // Mostly a whole session first; sometimes part of one, or none.
  const setup = rng.pick(['full', 'full', 'full', 'full', 'partial', 'none']);
  if (setup !== 'none') {
    const types =
      kind === 'exec' ? ['error', ...(ctx.stdin ? ['stdin'] : []), 'stdout', 'stderr'] : ['error', 'data'];
    const opened = setup === 'full' ? types : types.slice(0, 1);
    for (const type of opened) {
      const headers: Record<string, string> = { streamType: type };
      if (kind === 'portforward') Object.assign(headers, { port: String(FORWARDED_PORT), requestID: '0' });
      ctx.open.push(ctx.nextId);
      writes.push(synStream(ctx, ctx.nextId, headers));
    }
  }
  const mutator = MUTATORS[name];
  if (!mutator) throw new Error(`no mutator ${name}`);
  const part = mutator(ctx);
  const reads = part.reads ?? rng.int(5) !== 0;
  const ending = rng.pick(['end', 'destroy'] as const);
  return {
    label: `${kind}${ctx.stdin ? '+stdin' : ''} ${setup} session, ${name}: ${part.what}; ${reads ? '' : 'never reads, '}${ending}`,
    kind,
    stdin: ctx.stdin,
    writes: [...writes, ...part.writes],
    reads,
    ending,
  };
}

function synStream(ctx: Ctx, id: number, headers: Record<string, string>, flags = 0): Buffer {
  ctx.compressed = true;
  if (id >= ctx.nextId) ctx.nextId = id + 2;
  return synStreamFrame(ctx.writer, id, headers, flags);
}

function randomBytes(rng: Rng, n: number): Buffer {
  const out = Buffer.alloc(n);
  for (let i = 0; i < n; i++) out[i] = rng.int(256);
  return out;
}

const bombs = new Map<string, Buffer>();

/**
 * A header block that inflates to `size` zeros. The session's zlib stream is one: a block after
 * others continues it (raw deflate), the first one starts it.
 */
function bomb(size: number, continued: boolean): Buffer {
  const key = `${size}:${continued}`;
  let block = bombs.get(key);
  if (!block) {
    const zeros = Buffer.alloc(size);
    block = continued ? deflateRawSync(zeros, { level: 9 }) : deflateSync(zeros, { level: 9 });
    bombs.set(key, block);
  }
  return block;
}
