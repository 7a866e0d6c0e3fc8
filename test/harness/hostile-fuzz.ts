/**
 * The hostile CRI fuzz (test/e2e/hostile-cri-*.test.ts): for each rpc of a table, requests that
 * start from a valid one and replace one field at a time with a hostile value (hostile.ts), plus
 * malformed wire bytes. Every call must answer before the hang bound with a typed status and a
 * bounded message, berthd must stay up, and whatever an accepted request created must go away
 * through the API. The rpcs are split into groups (hostile-specs.ts), one test file each, so each
 * part of the fuzz has its own time limit; together the groups cover every rpc the proto declares.
 */
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { status } from '@grpc/grpc-js';
import { ANSWER_BOUND_MS } from './bounds.js';
import { DNS_BLOCKED_MARKER } from './dns-guard.js';
import {
  BOOL_VALUES,
  BYTES_VALUES,
  ENUM_VALUES,
  HUGE_1M,
  INT32_VALUES,
  INT64_VALUES,
  UINT32_VALUES,
  WIRE_PAYLOADS,
  getPath,
  idVariants,
  imageRefs,
  mapWith,
  summarize,
  withValue,
  type CallOutcome,
  type Hostile,
} from './hostile.js';
import { MAX_DETAILS_CHARS, type HostileCri } from './hostile-cri.js';
import {
  HOSTILE_RPC_GROUPS,
  str,
  type CaseRef,
  type FieldSpec,
  type HostileGroup,
  type RpcSpec,
} from './hostile-specs.js';
import { inPool } from './pool.js';

/**
 * After this many cases of one rpc got no answer, its other cases are not sent: the rpc hangs, and
 * each further case would only spend the hang bound again.
 */
const HANGS_BEFORE_GIVING_UP = 3;

/** Typed answers to a bad request. UNKNOWN, INTERNAL and CANCELLED mean berth did not handle it. */
const TYPED_CODES: readonly status[] = [
  status.OK,
  status.INVALID_ARGUMENT,
  status.NOT_FOUND,
  status.FAILED_PRECONDITION,
  status.ALREADY_EXISTS,
  status.OUT_OF_RANGE,
  status.RESOURCE_EXHAUSTED,
  status.UNIMPLEMENTED,
];

interface Failure extends CaseRef {
  problem: string;
  code: string;
  message: string;
  ms: number;
}

interface RpcTally {
  sent: number;
  unencodable: number;
  /** Cases not sent because the rpc had stopped answering. */
  notSent: number;
  hangs: number;
  fields: number;
  ms: number;
  codes: Map<string, number>;
  /** Codes per field, printed with BERTH_HOSTILE_VERBOSE=1. */
  byField: Map<string, Map<string, number>>;
}

/** Long messages keep their head and their tail, where runc and conmon put the reason. */
const clip = (text: string): string =>
  JSON.stringify(text.length > 400 ? `${text.slice(0, 160)} … ${text.slice(-200)}` : text) +
  (text.length > 400 ? ` (${text.length} chars)` : '');
const WIRE_FIELD = '(wire bytes)';
const counts = (m: Map<string, number>): string => [...m].map(([c, n]) => `${c} ${n}`).join(', ');

// --- The fuzz ----------------------------------------------------------------------------------

export class CriFuzz {
  private readonly failures: Failure[] = [];
  private readonly tallies = new Map<string, RpcTally>();
  private readonly codeTotals = new Map<string, number>();
  private readonly slowest: { ms: number; where: string }[] = [];
  /** Where in berthd's output the search for blocked lookups goes on from. */
  private dnsScanFrom = 0;

  constructor(private readonly cri: HostileCri) {}

  /**
   * Fuzzes every rpc of `specs`, which must be exactly `group`'s, prints the tallies and the
   * failures as diagnostics, and fails when any case failed.
   */
  async run(t: TestContext, group: HostileGroup, specs: readonly RpcSpec[]): Promise<void> {
    const started = Date.now();
    // Nothing skipped silently: the groups must cover every rpc the proto declares, and this
    // table its group.
    const declared = [...this.cri.client.methods.keys()].sort();
    const grouped: string[] = Object.values(HOSTILE_RPC_GROUPS).flat();
    assert.deepEqual([...grouped].sort(), declared, 'rpcs in no group, or in two');
    assert.deepEqual(
      specs.map((s) => s.rpc).sort(),
      [...HOSTILE_RPC_GROUPS[group]].sort(),
      `rpcs of the ${group} group without a spec`,
    );
    await this.checkAlive({ rpc: '-', field: '-', value: '(before the fuzz)' });
    for (const spec of specs) await this.fuzz(spec);
    this.report(t, specs, Math.round((Date.now() - started) / 1000));
  }

  /**
   * After the fuzz: berthd still answers, and what hostile requests created went away through the
   * API, leaving nothing behind (HostileCri.assertNothingLeft).
   */
  async assertNothingLeft(): Promise<void> {
    const before = this.failures.length;
    await this.checkAlive({ rpc: '-', field: '-', value: '(cleanup)' });
    assert.deepEqual(this.failures.slice(before), [], 'berthd is not well after the fuzz');
    await this.cri.assertNothingLeft();
  }

  /** berthd still runs and answers; if not, the failure names the batch and berthd starts again. */
  private async checkAlive(where: CaseRef): Promise<void> {
    const { daemon, admin } = this.cri;
    for (let at = daemon.output.indexOf(DNS_BLOCKED_MARKER, this.dnsScanFrom); at >= 0;) {
      const line = daemon.output.slice(at, daemon.output.indexOf('\n', at));
      this.fail(where, `berthd tried to look up a host name: ${line.slice(0, 200)}`);
      this.dnsScanFrom = at + DNS_BLOCKED_MARKER.length;
      at = daemon.output.indexOf(DNS_BLOCKED_MARKER, this.dnsScanFrom);
    }
    const proc = daemon.proc;
    const exited = !proc || proc.exitCode !== null || proc.signalCode !== null;
    let answered = false;
    if (!exited) {
      for (let attempt = 0; attempt < 2 && !answered; attempt++) {
        const v = await admin.call('Version', {}, ANSWER_BOUND_MS);
        answered = v.code === status.OK;
        if (!answered) admin.reconnect();
      }
    }
    if (exited || !answered) {
      this.fail(
        where,
        exited ? `berthd exited (${proc?.exitCode ?? proc?.signalCode})` : 'berthd stopped answering Version',
      );
      await this.cri.restart();
    }
    await this.cri.ensureTargets();
  }

  private tally(rpc: string): RpcTally {
    let t = this.tallies.get(rpc);
    if (!t) {
      t = {
        sent: 0,
        unencodable: 0,
        notSent: 0,
        hangs: 0,
        fields: 0,
        ms: 0,
        codes: new Map(),
        byField: new Map(),
      };
      this.tallies.set(rpc, t);
    }
    return t;
  }

  private fail(where: CaseRef, problem: string, out?: CallOutcome): void {
    this.failures.push({
      ...where,
      problem,
      code: out ? (status[out.code] ?? String(out.code)) : '-',
      message: out ? clip(out.details) : '',
      ms: out?.ms ?? 0,
    });
  }

  /** False, counting the case as not sent, once the rpc has stopped answering. */
  private mayAsk(spec: RpcSpec): boolean {
    const t = this.tally(spec.rpc);
    if (t.hangs < HANGS_BEFORE_GIVING_UP) return true;
    t.notSent++;
    return false;
  }

  private async sendRaw(spec: RpcSpec, where: CaseRef, bytes: Buffer): Promise<void> {
    if (!this.mayAsk(spec)) return;
    this.tally(spec.rpc).sent++;
    const out = await this.cri.client.callRaw(spec.rpc, bytes, ANSWER_BOUND_MS);
    this.judge(spec, where, out, null, bytes);
    // Bytes that decode to a valid request may create something, like any accepted request.
    if (out.code === status.OK) await this.cleanUp(spec, where, {}, out);
  }

  private async send(
    spec: RpcSpec,
    where: CaseRef,
    req: Record<string, unknown>,
    field: FieldSpec | null,
    value: unknown,
  ): Promise<void> {
    const t = this.tally(spec.rpc);
    const encodeError = this.cri.client.encodeError(spec.rpc, req);
    if (encodeError) {
      // The client library refused to build it: nothing reached berthd, so nothing to judge.
      t.unencodable++;
      return;
    }
    if (!this.mayAsk(spec)) return;
    t.sent++;
    const out = await this.cri.client.call(spec.rpc, req, ANSWER_BOUND_MS);
    this.judge(spec, where, out, field, value);
    if (out.code === status.OK) await this.cleanUp(spec, where, req, out);
  }

  private async cleanUp(
    spec: RpcSpec,
    where: CaseRef,
    req: Record<string, unknown>,
    out: CallOutcome,
  ): Promise<void> {
    if (!spec.accepted) return;
    try {
      for (const problem of await spec.accepted(req, out)) this.fail(where, problem);
    } catch (err) {
      this.fail(where, `cleanup after OK: ${String(err)}`);
    }
  }

  /** The per-call rules: an answer in time, a typed code, a bounded message, no forbidden OK. */
  private judge(
    spec: RpcSpec,
    where: CaseRef,
    out: CallOutcome,
    field: FieldSpec | null,
    value: unknown,
  ): void {
    const t = this.tally(spec.rpc);
    const code = status[out.code] ?? String(out.code);
    t.codes.set(code, (t.codes.get(code) ?? 0) + 1);
    const perField = t.byField.get(where.field) ?? new Map<string, number>();
    perField.set(code, (perField.get(code) ?? 0) + 1);
    t.byField.set(where.field, perField);
    this.codeTotals.set(code, (this.codeTotals.get(code) ?? 0) + 1);
    const { slowest } = this;
    slowest.push({ ms: out.ms, where: `${where.rpc} ${where.field}=${where.value}` });
    slowest.sort((a, b) => b.ms - a.ms);
    slowest.length = Math.min(slowest.length, 8);
    if (out.noAnswer) {
      t.hangs++;
      this.fail(where, `no answer from berthd within ${ANSWER_BOUND_MS} ms`, out);
      // A stalled connection would fail every later case; they get a fresh one.
      this.cri.client.reconnect();
      return;
    }
    const allowed = [...TYPED_CODES, ...(spec.extraCodes ?? []), ...(field?.extraCodes ?? [])];
    if (!allowed.includes(out.code)) this.fail(where, 'untyped status', out);
    if (out.details.length > MAX_DETAILS_CHARS)
      this.fail(where, `message of ${out.details.length} characters`, out);
    if (out.code === status.OK && field?.mustReject?.(value))
      this.fail(where, 'accepted a value it must refuse', out);
  }

  // --- Values per field ------------------------------------------------------------------------

  private valuesFor(spec: RpcSpec, field: FieldSpec): Hostile[] {
    const { strings, targets, image, closedPort } = this.cri;
    const strs = field.light && spec.costly ? strings.light : spec.costly ? strings.reduced : strings.full;
    switch (field.kind) {
      case 'string':
      case 'mapKey':
      case 'mapValue':
        return strs;
      case 'podId':
        return [...idVariants(targets.podId), ...strs];
      case 'ctrId':
        return [...idVariants(targets.ctrId), ...strs];
      case 'imagePull':
        return imageRefs(strings.reduced, closedPort);
      case 'imageLocal': {
        const hex = targets.imageId.replace(/^sha256:/, '');
        return [
          ...imageRefs(strings.reduced, closedPort),
          ...idVariants(hex),
          { label: 'sha256:prefix-3', value: `sha256:${hex.slice(0, 3)}` },
          { label: 'ref+newline', value: `${image.reference}\n` },
          { label: 'ref-uppercase', value: image.reference.toUpperCase() },
          { label: 'ref+zero-digest', value: `${image.reference}@sha256:${'0'.repeat(64)}` },
        ];
      }
      case 'int64':
        return [...INT64_VALUES];
      case 'int32':
        return [...INT32_VALUES];
      case 'uint32':
        return [...UINT32_VALUES];
      case 'enum':
        return [...ENUM_VALUES];
      case 'bool':
        return [...BOOL_VALUES];
      case 'bytes':
        return [...BYTES_VALUES];
      case 'map':
        return [
          {
            label: '10k-entries',
            value: Object.fromEntries(Array.from({ length: 10_000 }, (_, i) => [`k${i}`, `v${i}`])),
          },
          {
            label: '5x1MB-values',
            value: Object.fromEntries(Array.from({ length: 5 }, (_, i) => [`big${i}`, HUGE_1M])),
          },
        ];
      case 'list':
        return [
          { label: 'empty-list', value: [] },
          { label: '10k-items', value: Array.from({ length: 10_000 }, () => field.item) },
          { label: '100k-items', value: Array.from({ length: 100_000 }, () => field.item) },
        ];
    }
  }

  private async fuzz(spec: RpcSpec): Promise<void> {
    const started = performance.now();
    await this.cri.ensureTargets();
    await spec.setup?.();
    try {
      for (const field of [null, ...spec.fields]) {
        const values: Hostile[] = field ? this.valuesFor(spec, field) : [{ label: 'base', value: undefined }];
        this.tally(spec.rpc).fields++;
        // berthd creates pods and containers mostly one after the other; more at once only queues.
        const concurrency = spec.destructive || spec.serial || spec.beforeCase ? 1 : spec.costly ? 3 : 8;
        await inPool(values, concurrency, async (h) => {
          if (!this.mayAsk(spec)) return;
          await spec.beforeCase?.(field);
          const base = spec.base();
          const req = field ? build(base, field, h.value) : base;
          const where = { rpc: spec.rpc, field: fieldName(field), value: `${h.label} ${summarize(h.value)}` };
          await this.send(spec, where, req, field, h.value);
          if (spec.destructive) await this.cri.ensureTargets();
        });
        await this.checkAlive({ rpc: spec.rpc, field: fieldName(field), value: '(after the batch)' });
      }
      await inPool(WIRE_PAYLOADS, 8, async (h) => {
        const where = { rpc: spec.rpc, field: WIRE_FIELD, value: `${h.label} ${summarize(h.value)}` };
        await this.sendRaw(spec, where, h.value);
      });
      await this.checkAlive({ rpc: spec.rpc, field: WIRE_FIELD, value: '(after the batch)' });
    } finally {
      await spec.teardown?.();
      const t = this.tally(spec.rpc);
      t.ms += performance.now() - started;
      if (t.notSent > 0) {
        this.fail(
          { rpc: spec.rpc, field: '-', value: '-' },
          `gave up after ${t.hangs} cases without an answer: ${t.notSent} more cases not sent`,
        );
      }
    }
  }

  // --- The report ------------------------------------------------------------------------------

  private report(t: TestContext, specs: readonly RpcSpec[], seconds: number): void {
    const { failures } = this;
    t.diagnostic(`seed ${this.cri.seed} (set BERTH_HOSTILE_SEED to change it); ${seconds} s`);
    let total = 0;
    for (const spec of specs) {
      const tl = this.tally(spec.rpc);
      total += tl.sent;
      const unencodable = tl.unencodable ? ` (${tl.unencodable} more not encodable by the client)` : '';
      const notSent = tl.notSent ? ` (${tl.notSent} not sent: the rpc stopped answering)` : '';
      t.diagnostic(
        `${spec.rpc}: ${tl.sent} cases (base, ${tl.fields - 1} fields, ${WIRE_PAYLOADS.length} wire payloads)${unencodable}${notSent} in ${Math.round(tl.ms)} ms: ${counts(tl.codes)}`,
      );
      if (process.env.BERTH_HOSTILE_VERBOSE) {
        for (const [field, fieldCodes] of tl.byField) t.diagnostic(`  ${field}: ${counts(fieldCodes)}`);
      }
    }
    t.diagnostic(`total: ${total} cases; ${counts(this.codeTotals)}`);
    t.diagnostic(`slowest: ${this.slowest.map((s) => `${s.ms} ms ${s.where}`).join(' | ')}`);
    for (const f of failures) {
      t.diagnostic(
        `FAIL ${f.rpc} ${f.field} = ${f.value}: ${f.problem}; ${f.code} ${f.message} (${f.ms} ms)`,
      );
    }
    // One line per rpc, field, problem and code: an example message and the values that hit it.
    // Malformed wire bytes fail the same way whatever the rpc, so they share lines across rpcs.
    const groups = new Map<string, Failure[]>();
    for (const f of failures) {
      const wire = f.field === WIRE_FIELD;
      const key = `${wire ? 'every rpc' : f.rpc} ${f.field}: ${f.problem}; ${f.code}${wire ? `; ${f.message}` : ''}`;
      groups.set(key, [...(groups.get(key) ?? []), f]);
    }
    for (const [key, group] of groups) {
      const label = (f: Failure): string => f.value.split(' ')[0] ?? '';
      if (group[0]?.field === WIRE_FIELD) {
        const rpcs = new Set(group.map((f) => f.rpc));
        t.diagnostic(
          `GROUP ×${group.length} ${key} [${rpcs.size} rpcs; payloads: ${[...new Set(group.map(label))].join(', ')}]`,
        );
      } else {
        t.diagnostic(
          `GROUP ×${group.length} ${key}; e.g. ${group[0]?.message ?? ''} [values: ${group.map(label).join(', ')}]`,
        );
      }
    }
    assert.equal(
      failures.length,
      0,
      `${failures.length} hostile cases failed (${groups.size} groups; see the diagnostics; seed ${this.cri.seed})`,
    );
  }
}

function build(full: Record<string, unknown>, field: FieldSpec, value: unknown): Record<string, unknown> {
  const base = field.unset ? withValue(full, field.unset, null) : full;
  if (field.kind === 'mapKey')
    return withValue(base, field.path, mapWith(getPath(base, field.path), str(value), 'v'));
  if (field.kind === 'mapValue') {
    return withValue(base, field.path, mapWith(getPath(base, field.path), 'berth.test/hostile', str(value)));
  }
  return withValue(base, field.path, value);
}

function fieldName(field: FieldSpec | null): string {
  if (!field) return '(base request)';
  if (field.kind === 'mapKey') return `${field.path}{key}`;
  if (field.kind === 'mapValue') return `${field.path}{value}`;
  if (field.kind === 'map' || field.kind === 'list') return `${field.path}(size)`;
  return field.path;
}
