/**
 * Hostile input against every CRI rpc: a real berthd over its gRPC socket, sent requests that start
 * from a valid one and replace one field at a time with a hostile value (test/harness/hostile.ts).
 * Every call must answer within its deadline with a typed status and a bounded message, berthd must
 * stay up, and whatever an accepted request created must go away through the API. Needs root;
 * traffic stays on loopback (image references name 127.0.0.1 only, and berthd runs with name
 * lookups blocked) and in the test pods' own namespaces.
 *
 * BERTH_HOSTILE_SEED=<n> runs other random values; BERTH_HOSTILE_VERBOSE=1 prints codes per field.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it, type TestContext } from 'node:test';
import { status } from '@grpc/grpc-js';
import { cgroupNames, removeCgroupTree } from '../harness/cgroups.js';
import { TestDaemon } from '../harness/daemon.js';
import { DNS_BLOCKED_MARKER, DNS_GUARD_ACTIVE, DNS_GUARD_ENV } from '../harness/dns-guard.js';
import {
  BOOL_VALUES,
  BYTES_VALUES,
  DeadlineClient,
  ENUM_VALUES,
  HUGE_110K,
  HUGE_1M,
  INT32_VALUES,
  INT64_VALUES,
  Rng,
  UINT32_VALUES,
  WIRE_PAYLOADS,
  getPath,
  hostileSeed,
  hostileStrings,
  idVariants,
  imageRefs,
  mapWith,
  summarize,
  withValue,
  type CallOutcome,
  type Hostile,
  type StringSets,
} from '../harness/hostile.js';
import { busyboxLayer, pushImage, type PushedImage } from '../harness/images.js';
import { inPool } from '../harness/pool.js';
import { freePort, startRegistry, type TestRegistry } from '../harness/registry.js';
import { registrySkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 170_000;
/** Every call's own deadline: an answer later than this is a failure, whatever it says. */
const CALL_DEADLINE_MS = 5_000;
/** An error message echoing a whole hostile field is a failure. */
const MAX_DETAILS_CHARS = 16 * 1024;
const DNS_GUARD = fileURLToPath(new URL('../harness/dns-guard.js', import.meta.url));
/** A canary the 'shell' hostile string would create if anything ran it through a host shell. */
const PWNED = '/tmp/berth-hostile-pwned';
const CGROUP_V2 = existsSync('/sys/fs/cgroup/cgroup.controllers');

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

type Kind =
  | 'string'
  | 'podId'
  | 'ctrId'
  /** An image berthd looks up locally (status, list, remove, a container's image). */
  | 'imageLocal'
  /** An image berthd would pull: only references to 127.0.0.1 or malformed ones. */
  | 'imagePull'
  | 'int64'
  | 'int32'
  | 'uint32'
  | 'enum'
  | 'bool'
  | 'bytes'
  | 'mapKey'
  | 'mapValue'
  | 'map'
  | 'list';

interface FieldSpec {
  path: string;
  kind: Kind;
  /** Values this field must never accept: an OK for one of them is a failure. */
  mustReject?: (value: unknown) => boolean;
  /** For 'list': the element repeated. */
  item?: unknown;
  /** Codes this field's cases may answer besides TYPED_CODES and the rpc's own. */
  extraCodes?: readonly status[];
  /** Stored or ignored by berth, in an rpc where each accepted value costs a pod: a few strings. */
  light?: boolean;
  /** A path set to null in the base first: a legacy field only counts without its successor. */
  unset?: string;
}

interface RpcSpec {
  rpc: string;
  /** A valid request; called for every case, so names stay unique. */
  base: () => Record<string, unknown>;
  fields: FieldSpec[];
  /** An accepted value costs a pod or a container: the reduced string set, fewer at once. */
  costly?: boolean;
  /** May stop or remove the targets: one case at a time, targets rebuilt after each. */
  destructive?: boolean;
  /** One case at a time: concurrent cases would share work and so each other's outcomes. */
  serial?: boolean;
  /** Codes this rpc may answer besides TYPED_CODES. */
  extraCodes?: readonly status[];
  setup?: () => Promise<void>;
  teardown?: () => Promise<void>;
  /** Before every case of a field: e.g. a fresh running victim for StopContainer's timeout. */
  beforeCase?: (field: FieldSpec | null) => Promise<void>;
  /** After an OK: remove what the request created, check it round-trips. */
  accepted?: (req: Record<string, unknown>, outcome: CallOutcome, where: CaseRef) => Promise<void>;
}

interface CaseRef {
  rpc: string;
  field: string;
  value: string;
}

interface Failure extends CaseRef {
  problem: string;
  code: string;
  message: string;
  ms: number;
}

interface RpcTally {
  sent: number;
  unencodable: number;
  fields: number;
  ms: number;
  codes: Map<string, number>;
  /** Codes per field, printed with BERTH_HOSTILE_VERBOSE=1. */
  byField: Map<string, Map<string, number>>;
}

/** The parts of a pod or container config that status calls echo. */
interface Echo {
  metadata: { name: string };
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

interface WirePod {
  id: string;
  state: string;
  metadata: { name: string; uid: string; namespace: string; attempt: number };
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

interface WireCtr {
  id: string;
  pod_sandbox_id: string;
  state: string;
  metadata: { name: string; attempt: number };
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

/** Long messages keep their head and their tail, where runc and conmon put the reason. */
const clip = (text: string): string =>
  JSON.stringify(text.length > 400 ? `${text.slice(0, 160)} … ${text.slice(-200)}` : text) +
  (text.length > 400 ? ` (${text.length} chars)` : '');
const WIRE_FIELD = '(wire bytes)';
const hasControl = (v: string): boolean => [...v].some((c) => c.charCodeAt(0) < 0x20 || c === '\x7f');
const str = (v: unknown): string => (typeof v === 'string' ? v : '');
/** Lone surrogates do not survive UTF-8 on the wire; comparing them would blame the transport. */
const wellFormed = (v: string): boolean =>
  !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(v);
const notAbsoluteClean = (v: unknown): boolean =>
  str(v) !== '' && (!str(v).startsWith('/') || str(v).split('/').includes('..') || hasControl(str(v)));

describe('hostile input on every CRI rpc', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const seed = hostileSeed();
  const rng = new Rng(seed);
  const strings: StringSets = hostileStrings(rng);
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let image: PushedImage;
  /** Setup, checks and cleanup: its own connection, with deadlines, so a stall never hangs the suite. */
  let admin: DeadlineClient;
  /** The fuzz's connection; replaced after a call that got no answer. */
  let client: DeadlineClient;
  let closedPort: number;
  let hostDir: string;
  let seq = 0;
  const targets = { podId: '', podConfig: {} as Record<string, unknown>, ctrId: '', imageId: '' };
  const victims = { podId: '', ctrId: '' };
  const failures: Failure[] = [];
  const tallies = new Map<string, RpcTally>();
  const codeTotals = new Map<string, number>();
  const slowest: { ms: number; where: string }[] = [];
  /** Where in berthd's output the search for blocked lookups goes on from. */
  let dnsScanFrom = 0;

  before(async () => {
    registry = await startRegistry();
    image = await pushImage(registry, 'berth/hostile', '1', {
      layers: [await busyboxLayer()],
      config: { Cmd: ['/bin/sleep', '1000'], Env: ['PATH=/bin'] },
    });
    closedPort = await freePort();
    daemon = await TestDaemon.create({
      cni: 'bridge',
      env: { NODE_OPTIONS: `--import=${DNS_GUARD}`, [DNS_GUARD_ENV]: '1' },
    });
    assert.ok(daemon.output.includes(DNS_GUARD_ACTIVE), 'berthd runs without the name lookup guard');
    hostDir = join(daemon.base, 'hostile-mount');
    await mkdir(hostDir, { recursive: true });
    admin = new DeadlineClient(daemon.socket);
    client = new DeadlineClient(daemon.socket);
    await ensureTargets();
  });

  after(async () => {
    client?.close();
    admin?.close();
    await daemon?.destroy();
    await registry?.stop();
    // runc makes a pod's cgroup parent and, as on any node, leaves it to whoever chose the name
    // (kubelet, for a real pod); here the fuzz did. rmdir takes only cgroups no process is in.
    const names = strings.full.map(({ value }) => posix.normalize(`/${value}`).split('/')[1]);
    // Invalid UTF-8 sent on the wire arrives as U+FFFD, a character no cgroup of the host's has.
    const mangled = (await cgroupNames()).filter((name) => name.includes('\ufffd'));
    for (const name of [...names, ...mangled]) if (name) await removeCgroupTree(name);
  });

  /** An admin call that must succeed. */
  async function must<T>(rpc: string, req: object, deadlineMs = 30_000): Promise<T> {
    const out = await admin.call(rpc, req, deadlineMs);
    if (out.code !== status.OK) {
      throw new Error(`${rpc} failed: ${status[out.code]}: ${out.details.slice(0, 500)}`);
    }
    return out.response as T;
  }

  /** An admin call whose NOT_FOUND means "gone". */
  async function maybe<T>(rpc: string, req: object): Promise<T | null> {
    const out = await admin.call(rpc, req, 30_000);
    if (out.code === status.NOT_FOUND) return null;
    if (out.code !== status.OK)
      throw new Error(`${rpc} failed: ${status[out.code]}: ${out.details.slice(0, 500)}`);
    return out.response as T;
  }

  async function runPod(name: string): Promise<{ id: string; config: Record<string, unknown> }> {
    const config = daemon.pod(name);
    const res = await must<{ pod_sandbox_id: string }>('RunPodSandbox', { config });
    return { id: res.pod_sandbox_id, config };
  }

  async function newContainer(name: string, start: boolean, command?: string[]): Promise<string> {
    const res = await must<{ container_id: string }>('CreateContainer', {
      pod_sandbox_id: targets.podId,
      config: {
        metadata: { name, attempt: 0 },
        image: { image: image.reference },
        ...(command ? { command } : {}),
        log_path: `${name}.log`,
        labels: { suite: 'hostile' },
      },
      sandbox_config: targets.podConfig,
    });
    if (start) await must('StartContainer', { container_id: res.container_id });
    return res.container_id;
  }

  async function removeContainer(id: string): Promise<void> {
    if (id) await admin.call('RemoveContainer', { container_id: id }, 30_000);
  }

  /** Exits at once on SIGTERM, so a stop with any timeout is quick. */
  const TERM_EXITS = ['/bin/sh', '-c', 'trap "exit 0" TERM; sleep 1000 & wait'];

  /** The image, a ready pod and a running container: rebuilt when a case took them away. */
  async function ensureTargets(): Promise<void> {
    const img = await must<{ image: { id: string } | null }>('ImageStatus', {
      image: { image: image.reference },
    });
    if (!img.image) await must('PullImage', { image: { image: image.reference } }, 60_000);
    targets.imageId = (
      await must<{ image: { id: string } }>('ImageStatus', { image: { image: image.reference } })
    ).image.id;
    const podStatus = targets.podId
      ? await maybe<{ status: { state: string } }>('PodSandboxStatus', { pod_sandbox_id: targets.podId })
      : null;
    if (podStatus?.status.state !== 'SANDBOX_READY') {
      if (podStatus) await must('RemovePodSandbox', { pod_sandbox_id: targets.podId });
      const created = await runPod(`target-${++seq}`);
      targets.podId = created.id;
      targets.podConfig = created.config;
      targets.ctrId = '';
    }
    const ctrStatus = targets.ctrId
      ? await maybe<{ status: { state: string } }>('ContainerStatus', { container_id: targets.ctrId })
      : null;
    if (ctrStatus?.status.state !== 'CONTAINER_RUNNING') {
      await removeContainer(targets.ctrId);
      targets.ctrId = await newContainer(`target-${++seq}`, true);
    }
  }

  async function ensureRunningVictim(): Promise<void> {
    const st = victims.ctrId
      ? await maybe<{ status: { state: string } }>('ContainerStatus', { container_id: victims.ctrId })
      : null;
    if (st?.status.state === 'CONTAINER_RUNNING') return;
    await removeContainer(victims.ctrId);
    victims.ctrId = await newContainer(`victim-${++seq}`, true, TERM_EXITS);
  }

  // --- The fuzz's bookkeeping ----------------------------------------------------------------

  function tally(rpc: string): RpcTally {
    let t = tallies.get(rpc);
    if (!t) {
      t = { sent: 0, unencodable: 0, fields: 0, ms: 0, codes: new Map(), byField: new Map() };
      tallies.set(rpc, t);
    }
    return t;
  }

  function fail(where: CaseRef, problem: string, out?: CallOutcome): void {
    failures.push({
      ...where,
      problem,
      code: out ? (status[out.code] ?? String(out.code)) : '-',
      message: out ? clip(out.details) : '',
      ms: out?.ms ?? 0,
    });
  }

  async function sendRaw(spec: RpcSpec, where: CaseRef, bytes: Buffer): Promise<void> {
    tally(spec.rpc).sent++;
    const out = await client.callRaw(spec.rpc, bytes, CALL_DEADLINE_MS);
    judge(spec, where, out, null, bytes);
    // Bytes that decode to a valid request may create something, like any accepted request.
    if (out.code === status.OK && spec.accepted) {
      await spec
        .accepted({}, out, where)
        .catch((err: unknown) => fail(where, `cleanup after OK: ${String(err)}`));
    }
  }

  async function send(
    spec: RpcSpec,
    where: CaseRef,
    req: Record<string, unknown>,
    field: FieldSpec | null,
    value: unknown,
  ): Promise<void> {
    const t = tally(spec.rpc);
    const encodeError = client.encodeError(spec.rpc, req);
    if (encodeError) {
      // The client library refused to build it: nothing reached berthd, so nothing to judge.
      t.unencodable++;
      return;
    }
    t.sent++;
    const out = await client.call(spec.rpc, req, CALL_DEADLINE_MS);
    judge(spec, where, out, field, value);
    if (out.code === status.OK && spec.accepted) {
      await spec
        .accepted(req, out, where)
        .catch((err: unknown) => fail(where, `cleanup after OK: ${String(err)}`));
    }
  }

  /** The per-call rules: an answer in time, a typed code, a bounded message, no forbidden OK. */
  function judge(
    spec: RpcSpec,
    where: CaseRef,
    out: CallOutcome,
    field: FieldSpec | null,
    value: unknown,
  ): void {
    const t = tally(spec.rpc);
    const code = status[out.code] ?? String(out.code);
    t.codes.set(code, (t.codes.get(code) ?? 0) + 1);
    const perField = t.byField.get(where.field) ?? new Map<string, number>();
    perField.set(code, (perField.get(code) ?? 0) + 1);
    t.byField.set(where.field, perField);
    codeTotals.set(code, (codeTotals.get(code) ?? 0) + 1);
    slowest.push({ ms: out.ms, where: `${where.rpc} ${where.field}=${where.value}` });
    slowest.sort((a, b) => b.ms - a.ms);
    slowest.length = Math.min(slowest.length, 8);
    if (out.noAnswer) {
      fail(where, `no answer from berthd within ${CALL_DEADLINE_MS} ms`, out);
      // A stalled connection would fail every later case; they get a fresh one.
      client.reconnect();
      return;
    }
    const allowed = [...TYPED_CODES, ...(spec.extraCodes ?? []), ...(field?.extraCodes ?? [])];
    if (!allowed.includes(out.code)) fail(where, 'untyped status', out);
    if (out.details.length > MAX_DETAILS_CHARS)
      fail(where, `message of ${out.details.length} characters`, out);
    if (out.code === status.OK && field?.mustReject?.(value))
      fail(where, 'accepted a value it must refuse', out);
  }

  /** berthd still runs and answers; if not, the failure names the batch and berthd starts again. */
  async function checkAlive(where: CaseRef): Promise<void> {
    for (let at = daemon.output.indexOf(DNS_BLOCKED_MARKER, dnsScanFrom); at >= 0;) {
      const line = daemon.output.slice(at, daemon.output.indexOf('\n', at));
      fail(where, `berthd tried to look up a host name: ${line.slice(0, 200)}`);
      dnsScanFrom = at + DNS_BLOCKED_MARKER.length;
      at = daemon.output.indexOf(DNS_BLOCKED_MARKER, dnsScanFrom);
    }
    const proc = daemon.proc;
    const exited = !proc || proc.exitCode !== null || proc.signalCode !== null;
    let answered = false;
    if (!exited) {
      for (let attempt = 0; attempt < 2 && !answered; attempt++) {
        const v = await admin.call('Version', {}, 3_000);
        answered = v.code === status.OK;
        if (!answered) admin.reconnect();
      }
    }
    if (exited || !answered) {
      fail(
        where,
        exited ? `berthd exited (${proc?.exitCode ?? proc?.signalCode})` : 'berthd stopped answering Version',
      );
      await daemon.kill9();
      await daemon.start();
      admin.reconnect();
      client.reconnect();
    }
    await ensureTargets();
  }

  // --- Values per field ----------------------------------------------------------------------

  function valuesFor(spec: RpcSpec, field: FieldSpec): Hostile[] {
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

  function build(full: Record<string, unknown>, field: FieldSpec, value: unknown): Record<string, unknown> {
    const base = field.unset ? withValue(full, field.unset, null) : full;
    if (field.kind === 'mapKey')
      return withValue(base, field.path, mapWith(getPath(base, field.path), str(value), 'v'));
    if (field.kind === 'mapValue') {
      return withValue(
        base,
        field.path,
        mapWith(getPath(base, field.path), 'berth.test/hostile', str(value)),
      );
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

  async function fuzz(spec: RpcSpec): Promise<void> {
    const started = performance.now();
    await ensureTargets();
    await spec.setup?.();
    try {
      for (const field of [null, ...spec.fields]) {
        const values: Hostile[] = field ? valuesFor(spec, field) : [{ label: 'base', value: undefined }];
        tally(spec.rpc).fields++;
        // berthd creates pods and containers mostly one after the other; more at once only queues.
        const concurrency = spec.destructive || spec.serial || spec.beforeCase ? 1 : spec.costly ? 3 : 8;
        await inPool(values, concurrency, async (h) => {
          await spec.beforeCase?.(field);
          const base = spec.base();
          const req = field ? build(base, field, h.value) : base;
          const where = { rpc: spec.rpc, field: fieldName(field), value: `${h.label} ${summarize(h.value)}` };
          await send(spec, where, req, field, h.value);
          if (spec.destructive) await ensureTargets();
        });
        await checkAlive({ rpc: spec.rpc, field: fieldName(field), value: '(after the batch)' });
      }
      await inPool(WIRE_PAYLOADS, 8, async (h) => {
        const where = { rpc: spec.rpc, field: WIRE_FIELD, value: `${h.label} ${summarize(h.value)}` };
        await sendRaw(spec, where, h.value);
      });
      await checkAlive({ rpc: spec.rpc, field: WIRE_FIELD, value: '(after the batch)' });
    } finally {
      await spec.teardown?.();
      tally(spec.rpc).ms += performance.now() - started;
    }
  }

  // --- What accepted requests created --------------------------------------------------------

  const sameMap = (a: Record<string, string>, b: Record<string, string>): boolean =>
    JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort());
  const comparable = (m: Record<string, string>): boolean =>
    Object.entries(m).every(([k, v]) => k !== '__proto__' && wellFormed(k) && wellFormed(v));

  /** What a created pod or container reports back must be what the request sent. */
  function compareEcho(where: CaseRef, rpc: string, sent: Partial<Echo> | undefined, got: Echo): void {
    // Raw wire bytes that happened to decode to a valid request carry nothing to compare.
    if (!sent) return;
    for (const key of ['labels', 'annotations'] as const) {
      const map = sent[key] ?? {};
      if (comparable(map) && !sameMap(map, got[key])) fail(where, `${rpc} ${key} differ from the request's`);
    }
    const name = sent.metadata?.name ?? '';
    if (wellFormed(name) && got.metadata.name !== name) {
      fail(where, `${rpc} metadata.name is ${summarize(got.metadata.name)}`);
    }
  }

  async function podAccepted(req: Record<string, unknown>, out: CallOutcome, where: CaseRef): Promise<void> {
    const id = (out.response as { pod_sandbox_id: string }).pod_sandbox_id;
    const got = await must<{ status: WirePod }>('PodSandboxStatus', { pod_sandbox_id: id });
    compareEcho(where, 'PodSandboxStatus', req.config as Partial<Echo> | undefined, got.status);
    await must('RemovePodSandbox', { pod_sandbox_id: id });
    if (await maybe('PodSandboxStatus', { pod_sandbox_id: id }))
      fail(where, 'pod still there after RemovePodSandbox');
  }

  async function containerAccepted(
    req: Record<string, unknown>,
    out: CallOutcome,
    where: CaseRef,
  ): Promise<void> {
    const id = (out.response as { container_id: string }).container_id;
    const got = await must<{ status: WireCtr }>('ContainerStatus', { container_id: id });
    compareEcho(where, 'ContainerStatus', req.config as Partial<Echo> | undefined, got.status);
    await must('RemoveContainer', { container_id: id });
    if (await maybe('ContainerStatus', { container_id: id }))
      fail(where, 'container still there after RemoveContainer');
  }

  // --- The rpcs ------------------------------------------------------------------------------

  function podBase(): Record<string, unknown> {
    const name = `h${++seq}`;
    return {
      config: daemon.pod(name, {
        dns_config: { servers: ['127.0.0.1'], searches: ['berth.test'], options: ['ndots:2'] },
        port_mappings: [{ protocol: 'TCP', container_port: 80, host_port: 0, host_ip: '' }],
        linux: {
          cgroup_parent: '',
          sysctls: { 'kernel.shm_rmid_forced': '1' },
          security_context: { namespace_options: { network: 'POD', pid: 'POD', ipc: 'POD', target_id: '' } },
        },
      }),
      runtime_handler: '',
    };
  }

  function containerBase(): Record<string, unknown> {
    const name = `c${++seq}`;
    return {
      pod_sandbox_id: targets.podId,
      config: {
        metadata: { name, attempt: 0 },
        image: { image: image.reference },
        command: ['/bin/sleep'],
        args: ['1000'],
        working_dir: '/',
        envs: [{ key: 'HOSTILE', value: Buffer.from('1') }],
        mounts: [
          {
            container_path: '/mnt/hostile',
            host_path: hostDir,
            readonly: true,
            propagation: 'PROPAGATION_PRIVATE',
          },
        ],
        devices: [{ container_path: '/dev/hostile-null', host_path: '/dev/null', permissions: 'rwm' }],
        labels: { suite: 'hostile' },
        annotations: { 'berth.test/container': name },
        log_path: `${name}.log`,
        linux: {
          resources: { cpu_shares: '2', memory_limit_in_bytes: '0', oom_score_adj: '0' },
          security_context: {
            capabilities: { add_capabilities: ['NET_ADMIN'], drop_capabilities: ['NET_RAW'] },
            namespace_options: { network: 'POD', pid: 'CONTAINER', ipc: 'POD' },
            seccomp: { profile_type: 'RuntimeDefault' },
          },
        },
      },
      sandbox_config: targets.podConfig,
    };
  }

  const resources = (): Record<string, unknown> => ({
    cpu_period: '100000',
    cpu_quota: '50000',
    cpu_shares: '512',
    memory_limit_in_bytes: '268435456',
    oom_score_adj: '0',
    cpuset_cpus: '',
    cpuset_mems: '',
    memory_swap_limit_in_bytes: '0',
  });

  const podFilterFields = (prefix: string): FieldSpec[] => [
    { path: `${prefix}.id`, kind: 'podId' },
    { path: `${prefix}.label_selector`, kind: 'mapKey' },
    { path: `${prefix}.label_selector`, kind: 'mapValue' },
    { path: `${prefix}.label_selector`, kind: 'map' },
  ];
  const ctrFilterFields = (prefix: string): FieldSpec[] => [
    { path: `${prefix}.id`, kind: 'ctrId' },
    { path: `${prefix}.pod_sandbox_id`, kind: 'podId' },
    { path: `${prefix}.label_selector`, kind: 'mapKey' },
    { path: `${prefix}.label_selector`, kind: 'mapValue' },
    { path: `${prefix}.label_selector`, kind: 'map' },
  ];
  const SC = 'config.linux.security_context';
  const RES = 'config.linux.resources';

  const specs: RpcSpec[] = [
    { rpc: 'Version', base: () => ({ version: '0.1.0' }), fields: [{ path: 'version', kind: 'string' }] },
    { rpc: 'Status', base: () => ({ verbose: false }), fields: [{ path: 'verbose', kind: 'bool' }] },
    { rpc: 'RuntimeConfig', base: () => ({}), fields: [] },
    {
      rpc: 'UpdateRuntimeConfig',
      base: () => ({ runtime_config: { network_config: { pod_cidr: '10.244.0.0/16' } } }),
      fields: [{ path: 'runtime_config.network_config.pod_cidr', kind: 'string' }],
    },
    {
      rpc: 'RunPodSandbox',
      base: podBase,
      costly: true,
      accepted: podAccepted,
      fields: [
        {
          path: 'config.metadata.name',
          kind: 'string',
          mustReject: (v) =>
            str(v) === '' || hasControl(str(v)) || /[/\\]/.test(str(v)) || v === '.' || v === '..',
        },
        {
          path: 'config.metadata.uid',
          kind: 'string',
          mustReject: (v) => str(v) === '' || hasControl(str(v)),
        },
        {
          path: 'config.metadata.namespace',
          kind: 'string',
          mustReject: (v) => str(v) === '' || hasControl(str(v)),
        },
        { path: 'config.metadata.attempt', kind: 'uint32' },
        {
          path: 'config.hostname',
          kind: 'string',
          mustReject: (v) => str(v) !== '' && !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/i.test(str(v)),
        },
        { path: 'config.log_directory', kind: 'string', mustReject: notAbsoluteClean },
        {
          path: 'config.dns_config.servers[0]',
          kind: 'string',
          mustReject: (v) => !/^[0-9a-f.:]+$/i.test(str(v)),
        },
        {
          path: 'config.dns_config.searches[0]',
          kind: 'string',
          mustReject: (v) => /\s/.test(str(v)) || hasControl(str(v)) || str(v) === '',
        },
        {
          path: 'config.dns_config.options[0]',
          kind: 'string',
          mustReject: (v) => /\s/.test(str(v)) || hasControl(str(v)) || str(v) === '',
        },
        { path: 'config.dns_config.options', kind: 'list', item: 'ndots:1' },
        { path: 'config.port_mappings[0].protocol', kind: 'enum' },
        { path: 'config.port_mappings[0].container_port', kind: 'int32' },
        { path: 'config.port_mappings[0].host_port', kind: 'int32' },
        { path: 'config.port_mappings[0].host_ip', kind: 'string' },
        { path: 'config.port_mappings', kind: 'list', item: { protocol: 'TCP', container_port: 80 } },
        { path: 'config.labels', kind: 'mapKey' },
        { path: 'config.labels', kind: 'mapValue', light: true },
        { path: 'config.labels', kind: 'map' },
        { path: 'config.annotations', kind: 'mapKey' },
        { path: 'config.annotations', kind: 'mapValue', light: true },
        { path: 'config.annotations', kind: 'map' },
        {
          path: 'config.linux.cgroup_parent',
          kind: 'string',
          mustReject: (v) => hasControl(str(v)) || str(v).split('/').includes('..'),
        },
        { path: 'config.linux.sysctls', kind: 'mapKey', mustReject: () => true },
        { path: 'config.linux.sysctls', kind: 'mapValue', mustReject: (v) => hasControl(str(v)) },
        { path: `${SC}.namespace_options.network`, kind: 'enum' },
        { path: `${SC}.namespace_options.pid`, kind: 'enum' },
        { path: `${SC}.namespace_options.ipc`, kind: 'enum' },
        { path: `${SC}.namespace_options.target_id`, kind: 'string', light: true },
        { path: `${SC}.run_as_user.value`, kind: 'int64' },
        { path: `${SC}.run_as_group.value`, kind: 'int64' },
        { path: `${SC}.supplemental_groups[0]`, kind: 'int64' },
        { path: `${SC}.privileged`, kind: 'bool' },
        { path: `${SC}.readonly_rootfs`, kind: 'bool' },
        { path: `${SC}.selinux_options.type`, kind: 'string', light: true },
        { path: `${SC}.seccomp.profile_type`, kind: 'enum' },
        { path: `${SC}.seccomp.localhost_ref`, kind: 'string', light: true },
        { path: `${SC}.apparmor.localhost_ref`, kind: 'string', light: true },
        { path: `${SC}.seccomp_profile_path`, kind: 'string', light: true },
        { path: 'config.linux.resources.memory_limit_in_bytes', kind: 'int64' },
        { path: 'config.linux.overhead.cpu_quota', kind: 'int64' },
        { path: 'config.windows.security_context.run_as_username', kind: 'string', light: true },
        { path: 'runtime_handler', kind: 'string', mustReject: (v) => v !== '' && v !== 'runc' },
      ],
    },
    {
      rpc: 'PodSandboxStatus',
      base: () => ({ pod_sandbox_id: targets.podId, verbose: true }),
      fields: [
        { path: 'pod_sandbox_id', kind: 'podId' },
        { path: 'verbose', kind: 'bool' },
      ],
    },
    {
      rpc: 'ListPodSandbox',
      base: () => ({
        filter: { id: targets.podId, state: { state: 'SANDBOX_READY' }, label_selector: { suite: 'berth' } },
      }),
      fields: [...podFilterFields('filter'), { path: 'filter.state.state', kind: 'enum' }],
    },
    {
      rpc: 'StreamPodSandboxes',
      base: () => ({ filter: { id: targets.podId, label_selector: { suite: 'berth' } } }),
      fields: [...podFilterFields('filter'), { path: 'filter.state.state', kind: 'enum' }],
    },
    {
      rpc: 'PodSandboxStats',
      base: () => ({ pod_sandbox_id: targets.podId }),
      fields: [{ path: 'pod_sandbox_id', kind: 'podId' }],
    },
    {
      rpc: 'ListPodSandboxStats',
      base: () => ({ filter: { id: targets.podId, label_selector: { suite: 'berth' } } }),
      fields: podFilterFields('filter'),
    },
    {
      rpc: 'StreamPodSandboxStats',
      base: () => ({ filter: { id: targets.podId, label_selector: { suite: 'berth' } } }),
      fields: podFilterFields('filter'),
    },
    {
      rpc: 'UpdatePodSandboxResources',
      base: () => ({ pod_sandbox_id: targets.podId, overhead: resources(), resources: resources() }),
      fields: [
        { path: 'pod_sandbox_id', kind: 'podId' },
        { path: 'resources.memory_limit_in_bytes', kind: 'int64' },
        { path: 'resources.cpuset_cpus', kind: 'string' },
        { path: 'resources.unified', kind: 'mapKey' },
        { path: 'overhead.cpu_quota', kind: 'int64' },
      ],
    },
    {
      rpc: 'PortForward',
      base: () => ({ pod_sandbox_id: targets.podId, port: [80] }),
      fields: [
        { path: 'pod_sandbox_id', kind: 'podId' },
        { path: 'port[0]', kind: 'int32' },
        { path: 'port', kind: 'list', item: 80 },
      ],
    },
    { rpc: 'ListMetricDescriptors', base: () => ({}), fields: [] },
    { rpc: 'ListPodSandboxMetrics', base: () => ({}), fields: [] },
    { rpc: 'StreamPodSandboxMetrics', base: () => ({}), fields: [] },
    { rpc: 'GetContainerEvents', base: () => ({}), fields: [] },
    {
      rpc: 'CreateContainer',
      base: containerBase,
      costly: true,
      accepted: containerAccepted,
      fields: [
        { path: 'pod_sandbox_id', kind: 'podId' },
        {
          path: 'config.metadata.name',
          kind: 'string',
          mustReject: (v) =>
            str(v) === '' || hasControl(str(v)) || /[/\\]/.test(str(v)) || v === '.' || v === '..',
        },
        { path: 'config.metadata.attempt', kind: 'uint32' },
        { path: 'config.image.image', kind: 'imageLocal' },
        { path: 'config.image.user_specified_image', kind: 'string', light: true },
        { path: 'config.image.annotations', kind: 'mapKey', light: true },
        { path: 'config.image.runtime_handler', kind: 'string', light: true },
        { path: 'config.command[0]', kind: 'string', mustReject: (v) => str(v).includes('\0') },
        { path: 'config.command', kind: 'list', item: '/bin/sleep' },
        { path: 'config.args[0]', kind: 'string', light: true, mustReject: (v) => str(v).includes('\0') },
        // Paths inside the container may hold "..": runc resolves them within the rootfs.
        {
          path: 'config.working_dir',
          kind: 'string',
          mustReject: (v) => str(v) !== '' && (!str(v).startsWith('/') || str(v).includes('\0')),
        },
        {
          path: 'config.envs[0].key',
          kind: 'string',
          mustReject: (v) => str(v) === '' || /[=\0]/.test(str(v)),
        },
        {
          path: 'config.envs[0].value',
          kind: 'bytes',
          mustReject: (v) => Buffer.isBuffer(v) && v.includes(0),
        },
        { path: 'config.envs', kind: 'list', item: { key: 'K', value: Buffer.from('v') } },
        {
          path: 'config.mounts[0].container_path',
          kind: 'string',
          mustReject: (v) => !str(v).startsWith('/') || str(v).includes('\0'),
        },
        { path: 'config.mounts[0].host_path', kind: 'string', mustReject: notAbsoluteClean },
        { path: 'config.mounts[0].propagation', kind: 'enum' },
        { path: 'config.mounts[0].readonly', kind: 'bool' },
        { path: 'config.mounts[0].recursive_read_only', kind: 'bool' },
        { path: 'config.mounts[0].image.image', kind: 'imageLocal' },
        { path: 'config.mounts[0].image_sub_path', kind: 'string', light: true },
        { path: 'config.devices[0].container_path', kind: 'string', mustReject: notAbsoluteClean },
        { path: 'config.devices[0].host_path', kind: 'string', mustReject: notAbsoluteClean },
        {
          path: 'config.devices[0].permissions',
          kind: 'string',
          mustReject: (v) => !/^[rwm]*$/.test(str(v)),
        },
        { path: 'config.labels', kind: 'mapKey' },
        { path: 'config.labels', kind: 'mapValue', light: true },
        { path: 'config.annotations', kind: 'mapKey' },
        { path: 'config.annotations', kind: 'mapValue', light: true },
        { path: 'config.annotations', kind: 'map' },
        {
          path: 'config.log_path',
          kind: 'string',
          mustReject: (v) => str(v).startsWith('/') || str(v).split('/').includes('..') || hasControl(str(v)),
        },
        { path: 'config.stdin', kind: 'bool' },
        { path: 'config.tty', kind: 'bool' },
        { path: `${RES}.cpu_period`, kind: 'int64' },
        { path: `${RES}.cpu_quota`, kind: 'int64' },
        { path: `${RES}.cpu_shares`, kind: 'int64' },
        { path: `${RES}.memory_limit_in_bytes`, kind: 'int64' },
        { path: `${RES}.oom_score_adj`, kind: 'int64' },
        { path: `${RES}.memory_swap_limit_in_bytes`, kind: 'int64' },
        { path: `${RES}.cpuset_cpus`, kind: 'string' },
        { path: `${RES}.cpuset_mems`, kind: 'string' },
        { path: `${RES}.hugepage_limits[0].page_size`, kind: 'string' },
        { path: `${RES}.hugepage_limits[0].limit`, kind: 'int64' },
        { path: `${RES}.unified`, kind: 'mapKey' },
        { path: `${RES}.unified`, kind: 'mapValue' },
        { path: `${SC}.capabilities.add_capabilities[0]`, kind: 'string' },
        { path: `${SC}.capabilities.drop_capabilities[0]`, kind: 'string' },
        { path: `${SC}.capabilities.add_ambient_capabilities[0]`, kind: 'string' },
        { path: `${SC}.privileged`, kind: 'bool' },
        { path: `${SC}.namespace_options.network`, kind: 'enum' },
        { path: `${SC}.namespace_options.pid`, kind: 'enum' },
        { path: `${SC}.namespace_options.ipc`, kind: 'enum' },
        { path: `${SC}.namespace_options.target_id`, kind: 'string', light: true },
        { path: `${SC}.namespace_options.userns_options.mode`, kind: 'enum' },
        { path: `${SC}.selinux_options.level`, kind: 'string', light: true },
        { path: `${SC}.run_as_user.value`, kind: 'int64' },
        { path: `${SC}.run_as_username`, kind: 'string' },
        { path: `${SC}.supplemental_groups[0]`, kind: 'int64' },
        { path: `${SC}.supplemental_groups_policy`, kind: 'enum' },
        { path: `${SC}.masked_paths[0]`, kind: 'string' },
        { path: `${SC}.readonly_paths[0]`, kind: 'string' },
        { path: `${SC}.masked_paths`, kind: 'list', item: '/proc/kcore' },
        { path: `${SC}.seccomp.profile_type`, kind: 'enum' },
        { path: `${SC}.seccomp.localhost_ref`, kind: 'string' },
        { path: `${SC}.apparmor.localhost_ref`, kind: 'string' },
        { path: `${SC}.apparmor_profile`, kind: 'string' },
        { path: `${SC}.seccomp_profile_path`, kind: 'string', unset: `${SC}.seccomp` },
        { path: 'config.CDI_devices[0].name', kind: 'string' },
        { path: 'config.stop_signal', kind: 'enum' },
        { path: 'config.windows.security_context.run_as_username', kind: 'string', light: true },
        { path: 'sandbox_config.metadata.name', kind: 'string', light: true },
        { path: 'sandbox_config.log_directory', kind: 'string', light: true },
        { path: 'sandbox_config.linux.cgroup_parent', kind: 'string', light: true },
      ],
    },
    {
      rpc: 'StartContainer',
      base: () => ({ container_id: victims.ctrId }),
      setup: async () => {
        victims.ctrId = await newContainer(`victim-${++seq}`, false);
      },
      teardown: async () => {
        await removeContainer(victims.ctrId);
        victims.ctrId = '';
      },
      fields: [{ path: 'container_id', kind: 'ctrId' }],
    },
    {
      rpc: 'StopContainer',
      base: () => ({ container_id: victims.ctrId, timeout: '1' }),
      destructive: true,
      beforeCase: ensureRunningVictim,
      teardown: async () => {
        await removeContainer(victims.ctrId);
        victims.ctrId = '';
      },
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'timeout', kind: 'int64' },
      ],
    },
    {
      rpc: 'RemoveContainer',
      base: () => ({ container_id: victims.ctrId }),
      destructive: true,
      setup: async () => {
        victims.ctrId = await newContainer(`victim-${++seq}`, false);
      },
      teardown: async () => {
        await removeContainer(victims.ctrId);
        victims.ctrId = '';
      },
      fields: [{ path: 'container_id', kind: 'ctrId' }],
    },
    {
      rpc: 'ListContainers',
      base: () => ({
        filter: {
          id: targets.ctrId,
          state: { state: 'CONTAINER_RUNNING' },
          pod_sandbox_id: targets.podId,
          label_selector: { suite: 'hostile' },
        },
      }),
      fields: [...ctrFilterFields('filter'), { path: 'filter.state.state', kind: 'enum' }],
    },
    {
      rpc: 'StreamContainers',
      base: () => ({ filter: { id: targets.ctrId, pod_sandbox_id: targets.podId } }),
      fields: [...ctrFilterFields('filter'), { path: 'filter.state.state', kind: 'enum' }],
    },
    {
      rpc: 'ContainerStatus',
      base: () => ({ container_id: targets.ctrId, verbose: true }),
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'verbose', kind: 'bool' },
      ],
    },
    {
      rpc: 'UpdateContainerResources',
      base: () => ({ container_id: victims.ctrId, linux: resources(), annotations: {} }),
      // A limit that kills the victim must not leave the next case a dead container.
      beforeCase: ensureRunningVictim,
      teardown: async () => {
        await removeContainer(victims.ctrId);
        victims.ctrId = '';
      },
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'linux.cpu_period', kind: 'int64' },
        { path: 'linux.cpu_quota', kind: 'int64' },
        { path: 'linux.cpu_shares', kind: 'int64' },
        { path: 'linux.memory_limit_in_bytes', kind: 'int64', mustReject: (v) => v === '1' },
        { path: 'linux.oom_score_adj', kind: 'int64' },
        { path: 'linux.memory_swap_limit_in_bytes', kind: 'int64' },
        { path: 'linux.cpuset_cpus', kind: 'string' },
        { path: 'linux.cpuset_mems', kind: 'string' },
        { path: 'linux.hugepage_limits[0].page_size', kind: 'string' },
        { path: 'linux.unified', kind: 'mapKey', mustReject: () => !CGROUP_V2 },
        { path: 'linux.unified', kind: 'mapValue', mustReject: () => !CGROUP_V2 },
        { path: 'annotations', kind: 'mapKey' },
        { path: 'annotations', kind: 'mapValue' },
        { path: 'windows.memory_limit_in_bytes', kind: 'int64' },
      ],
    },
    {
      rpc: 'ReopenContainerLog',
      base: () => ({ container_id: targets.ctrId }),
      fields: [{ path: 'container_id', kind: 'ctrId' }],
    },
    {
      rpc: 'ExecSync',
      base: () => ({ container_id: targets.ctrId, cmd: ['/bin/echo', 'hostile'], timeout: '5' }),
      extraCodes: [status.DEADLINE_EXCEEDED],
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'cmd[0]', kind: 'string' },
        { path: 'cmd[1]', kind: 'string' },
        { path: 'cmd', kind: 'list', item: 'a' },
        { path: 'timeout', kind: 'int64' },
      ],
    },
    {
      rpc: 'Exec',
      base: () => ({
        container_id: targets.ctrId,
        cmd: ['/bin/sh'],
        tty: false,
        stdin: true,
        stdout: true,
        stderr: true,
      }),
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'cmd[0]', kind: 'string' },
        { path: 'cmd', kind: 'list', item: 'a' },
        { path: 'tty', kind: 'bool' },
        { path: 'stdin', kind: 'bool' },
        { path: 'stdout', kind: 'bool' },
      ],
    },
    {
      rpc: 'Attach',
      base: () => ({ container_id: targets.ctrId, stdin: false, tty: false, stdout: true, stderr: true }),
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'tty', kind: 'bool' },
        { path: 'stdout', kind: 'bool' },
      ],
    },
    {
      rpc: 'ContainerStats',
      base: () => ({ container_id: targets.ctrId }),
      fields: [{ path: 'container_id', kind: 'ctrId' }],
    },
    {
      rpc: 'ListContainerStats',
      base: () => ({
        filter: { id: targets.ctrId, pod_sandbox_id: targets.podId, label_selector: { suite: 'hostile' } },
      }),
      fields: ctrFilterFields('filter'),
    },
    {
      rpc: 'StreamContainerStats',
      base: () => ({ filter: { id: targets.ctrId, pod_sandbox_id: targets.podId } }),
      fields: ctrFilterFields('filter'),
    },
    {
      rpc: 'CheckpointContainer',
      base: () => ({
        container_id: targets.ctrId,
        location: join(daemon.base, 'checkpoint.tar'),
        timeout: '10',
      }),
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'location', kind: 'string' },
        { path: 'timeout', kind: 'int64' },
      ],
    },
    {
      rpc: 'ImageStatus',
      base: () => ({ image: { image: image.reference }, verbose: true }),
      fields: [
        { path: 'image.image', kind: 'imageLocal' },
        { path: 'image.annotations', kind: 'mapKey' },
        { path: 'verbose', kind: 'bool' },
      ],
    },
    {
      rpc: 'ListImages',
      base: () => ({ filter: { image: { image: image.reference } } }),
      fields: [{ path: 'filter.image.image', kind: 'imageLocal' }],
    },
    {
      rpc: 'StreamImages',
      base: () => ({ filter: { image: { image: image.reference } } }),
      fields: [{ path: 'filter.image.image', kind: 'imageLocal' }],
    },
    {
      rpc: 'PullImage',
      base: () => ({
        image: { image: image.reference },
        auth: { username: 'u', password: 'p' },
        sandbox_config: daemon.pod(`pull${++seq}`),
      }),
      // A registry that refuses the credentials is the registry's answer.
      extraCodes: [status.UNAUTHENTICATED, status.PERMISSION_DENIED],
      // Concurrent pulls of one reference share a single pull, whatever their credentials.
      serial: true,
      fields: [
        // Only the references name a registry that is not there; hostile credentials for the
        // real one must not look like an outage.
        { path: 'image.image', kind: 'imagePull', extraCodes: [status.UNAVAILABLE] },
        { path: 'auth.username', kind: 'string' },
        { path: 'auth.password', kind: 'string' },
        { path: 'auth.auth', kind: 'string' },
        { path: 'auth.server_address', kind: 'string' },
        { path: 'auth.identity_token', kind: 'string' },
        { path: 'auth.registry_token', kind: 'string' },
        { path: 'sandbox_config.metadata.name', kind: 'string' },
      ],
    },
    {
      rpc: 'RemoveImage',
      base: () => ({ image: { image: `127.0.0.1:${closedPort}/berth/absent:1` } }),
      destructive: true,
      fields: [{ path: 'image.image', kind: 'imageLocal' }],
    },
    { rpc: 'ImageFsInfo', base: () => ({}), fields: [] },
    // Last: these take the target pod with them when a prefix matches it.
    {
      rpc: 'StopPodSandbox',
      base: () => ({ pod_sandbox_id: victims.podId }),
      destructive: true,
      setup: async () => {
        victims.podId = (await runPod(`victim-${++seq}`)).id;
      },
      teardown: async () => {
        await admin.call('RemovePodSandbox', { pod_sandbox_id: victims.podId }, 30_000);
        victims.podId = '';
      },
      fields: [{ path: 'pod_sandbox_id', kind: 'podId' }],
    },
    {
      rpc: 'RemovePodSandbox',
      base: () => ({ pod_sandbox_id: victims.podId }),
      destructive: true,
      setup: async () => {
        victims.podId = (await runPod(`victim-${++seq}`)).id;
      },
      teardown: async () => {
        await admin.call('RemovePodSandbox', { pod_sandbox_id: victims.podId }, 30_000);
        victims.podId = '';
      },
      fields: [{ path: 'pod_sandbox_id', kind: 'podId' }],
    },
  ];

  // --- Specific cases ------------------------------------------------------------------------

  function assertAnswer(
    rpc: string,
    out: CallOutcome,
    codes: readonly status[],
    opts: { naming?: string; withinMs?: number } = {},
  ): void {
    const got = `${status[out.code]}: ${out.details.slice(0, 300)}`;
    assert.ok(!out.noAnswer, `${rpc}: no answer within ${CALL_DEADLINE_MS} ms (${got})`);
    assert.ok(
      codes.includes(out.code),
      `${rpc}: expected ${codes.map((c) => status[c]).join(' or ')}, got ${got}`,
    );
    if (opts.naming)
      assert.ok(out.details.includes(opts.naming), `${rpc}: ${got} should name ${opts.naming}`);
    assert.ok(
      out.details.length <= MAX_DETAILS_CHARS,
      `${rpc}: a message of ${out.details.length} characters`,
    );
    if (opts.withinMs) assert.ok(out.ms < opts.withinMs, `${rpc} took ${out.ms} ms`);
  }

  async function expectCode(
    rpc: string,
    req: object,
    codes: readonly status[],
    opts: { naming?: string; withinMs?: number; on?: DeadlineClient } = {},
  ): Promise<CallOutcome> {
    const out = await (opts.on ?? client).call(rpc, req, CALL_DEADLINE_MS);
    assertAnswer(rpc, out, codes, opts);
    return out;
  }

  /** A pod the case expects refused; one accepted anyway is removed before the assertion fails. */
  async function runPodExpecting(
    config: Record<string, unknown>,
    codes: readonly status[],
    naming: string,
  ): Promise<void> {
    const out = await client.call('RunPodSandbox', { config }, CALL_DEADLINE_MS);
    if (out.code === status.OK) {
      await must('RemovePodSandbox', {
        pod_sandbox_id: (out.response as { pod_sandbox_id: string }).pod_sandbox_id,
      });
    }
    assertAnswer('RunPodSandbox', out, codes, { naming });
  }

  async function createExpecting(
    extra: Record<string, unknown>,
    codes: readonly status[],
    naming: string,
  ): Promise<void> {
    const base = containerBase();
    const req = { ...base, config: { ...(base.config as Record<string, unknown>), ...extra } };
    const out = await client.call('CreateContainer', req, CALL_DEADLINE_MS);
    if (out.code === status.OK)
      await removeContainer((out.response as { container_id: string }).container_id);
    assertAnswer('CreateContainer', out, codes, { naming });
  }

  describe('cases from the issue', () => {
    it('ContainerStatus of a 110,000-character id answers at once, and the same connection keeps answering', async () => {
      const own = new DeadlineClient(daemon.socket);
      try {
        for (let round = 0; round < 3; round++) {
          await expectCode(
            'ContainerStatus',
            { container_id: HUGE_110K },
            [status.INVALID_ARGUMENT, status.NOT_FOUND],
            {
              withinMs: 2_000,
              on: own,
            },
          );
          await expectCode('ContainerStatus', { container_id: targets.ctrId }, [status.OK], {
            withinMs: 1_000,
            on: own,
          });
        }
      } finally {
        own.close();
      }
    });

    it('RunPodSandbox refuses a resolver option that smuggles a nameserver line', async () => {
      const config = daemon.pod(`dns-opt-${++seq}`, {
        dns_config: { servers: [], searches: [], options: ['ndots:5\nnameserver 6.6.6.6'] },
      });
      await runPodExpecting(config, [status.INVALID_ARGUMENT], 'dns_config.options');
    });

    it('RunPodSandbox accepts the root search domain "."', async () => {
      const config = daemon.pod(`dns-root-${++seq}`, {
        dns_config: { servers: [], searches: ['.'], options: [] },
      });
      const out = await expectCode('RunPodSandbox', { config }, [status.OK]);
      await must('RemovePodSandbox', {
        pod_sandbox_id: (out.response as { pod_sandbox_id: string }).pod_sandbox_id,
      });
    });

    it('RunPodSandbox refuses a log_directory with a newline', async () => {
      const config = daemon.pod(`logdir-${++seq}`, { log_directory: join(daemon.base, 'logs', 'a\nb') });
      await runPodExpecting(config, [status.INVALID_ARGUMENT], 'log_directory');
    });

    it('RunPodSandbox refuses a sysctl value with a newline', async () => {
      const config = daemon.pod(`sysctl-nl-${++seq}`, {
        linux: { sysctls: { 'kernel.shm_rmid_forced': '1\nkernel.sysrq=1' } },
      });
      await runPodExpecting(config, [status.INVALID_ARGUMENT], 'sysctls');
    });

    it('RunPodSandbox refuses the non-namespaced sysctl kernel.sysrq', async () => {
      const config = daemon.pod(`sysrq-${++seq}`, { linux: { sysctls: { 'kernel.sysrq': '1' } } });
      await runPodExpecting(config, [status.INVALID_ARGUMENT], 'kernel.sysrq');
    });

    it('four pods with 5 MB of annotations each are refused naming annotations, quickly', async () => {
      const before = (await must<{ items: unknown[] }>('ListPodSandbox', {})).items.length;
      await Promise.all(
        [0, 1, 2, 3].map(async (i) => {
          const config = daemon.pod(`big-annotations-${++seq}-${i}`, {
            annotations: { big: 'a'.repeat(5 * 1024 * 1024) },
          });
          await runPodExpecting(config, [status.INVALID_ARGUMENT], 'annotations');
        }),
      );
      assert.equal((await must<{ items: unknown[] }>('ListPodSandbox', {})).items.length, before);
    });

    it('CreateContainer with 100,000 env entries answers within 5 s, INVALID_ARGUMENT naming envs', async () => {
      const envs = Array.from({ length: 100_000 }, (_, i) => ({ key: `K${i}`, value: Buffer.from('v') }));
      await createExpecting({ envs }, [status.INVALID_ARGUMENT], 'envs');
    });

    it('CreateContainer refuses a 1 MB log_path', async () => {
      await createExpecting({ log_path: HUGE_1M }, [status.INVALID_ARGUMENT], 'log_path');
    });

    it('UpdateContainerResources refuses memory_limit_in_bytes=1', async () => {
      await ensureRunningVictim();
      try {
        await expectCode(
          'UpdateContainerResources',
          { container_id: victims.ctrId, linux: { ...resources(), memory_limit_in_bytes: '1' } },
          [status.INVALID_ARGUMENT],
          { naming: 'memory_limit_in_bytes' },
        );
      } finally {
        await removeContainer(victims.ctrId);
        victims.ctrId = '';
      }
    });

    it(
      'refuses unified (cgroup v2) resources on a cgroup v1 host',
      { skip: CGROUP_V2 ? 'host is cgroup v2' : false },
      async () => {
        const unified = { 'memory.high': '100000000' };
        await createExpecting({ linux: { resources: { unified } } }, [status.INVALID_ARGUMENT], 'unified');
        await ensureRunningVictim();
        try {
          await expectCode(
            'UpdateContainerResources',
            { container_id: victims.ctrId, linux: { ...resources(), unified } },
            [status.INVALID_ARGUMENT],
            { naming: 'unified' },
          );
        } finally {
          await removeContainer(victims.ctrId);
          victims.ctrId = '';
        }
      },
    );
  });

  describe('found by the fuzz, checked on their own', () => {
    it('concurrent pulls with different credentials each get the answer their own credentials earn', async () => {
      const secured = await startRegistry({ htpasswd: { username: 'berth', password: 'right' } });
      try {
        const pushed = await pushImage(secured, 'berth/private', '1', {
          layers: [await busyboxLayer()],
          config: { Cmd: ['/bin/true'] },
        });
        const spec = { image: pushed.reference };
        const good = { image: spec, auth: { username: 'berth', password: 'right' } };
        const bad = { image: spec, auth: { username: 'berth', password: 'wrong' } };
        const refused = [status.UNAUTHENTICATED, status.PERMISSION_DENIED];
        assertAnswer(
          'PullImage with wrong credentials',
          await client.call('PullImage', bad, CALL_DEADLINE_MS),
          refused,
        );
        for (const [round, order] of [
          [good, bad],
          [bad, good],
        ].entries()) {
          await admin.call('RemoveImage', { image: spec }, 30_000);
          const outs = await Promise.all(order.map((req) => client.call('PullImage', req, CALL_DEADLINE_MS)));
          const [goodOut, badOut] = order[0] === good ? outs : [outs[1], outs[0]];
          assert.ok(goodOut && badOut);
          assertAnswer(`round ${round}: PullImage with the right credentials`, goodOut, [status.OK]);
          assertAnswer(`round ${round}: PullImage with wrong credentials, at the same time`, badOut, refused);
        }
      } finally {
        await admin.call('RemoveImage', { image: { image: `${secured.host}/berth/private:1` } }, 30_000);
        await secured.stop();
      }
    });
  });

  // --- The fuzz ------------------------------------------------------------------------------

  it('answers every hostile request to every rpc in time, with a typed status and a bounded message', async (t: TestContext) => {
    const started = Date.now();
    // Nothing skipped silently: the table must cover every rpc the proto declares.
    const declared = [...client.methods.keys()].sort();
    assert.deepEqual([...new Set(specs.map((s) => s.rpc))].sort(), declared, 'rpcs without a spec');
    await checkAlive({ rpc: '-', field: '-', value: '(before the fuzz)' });
    for (const spec of specs) await fuzz(spec);

    t.diagnostic(
      `seed ${seed} (set BERTH_HOSTILE_SEED to change it); ${Math.round((Date.now() - started) / 1000)} s`,
    );
    let total = 0;
    for (const spec of specs) {
      const tl = tally(spec.rpc);
      total += tl.sent;
      const codes = [...tl.codes].map(([c, n]) => `${c} ${n}`).join(', ');
      const unencodable = tl.unencodable ? ` (${tl.unencodable} more not encodable by the client)` : '';
      t.diagnostic(
        `${spec.rpc}: ${tl.sent} cases (base, ${tl.fields - 1} fields, ${WIRE_PAYLOADS.length} wire payloads)${unencodable} in ${Math.round(tl.ms)} ms: ${codes}`,
      );
      if (process.env.BERTH_HOSTILE_VERBOSE) {
        for (const [field, fieldCodes] of tl.byField) {
          t.diagnostic(`  ${field}: ${[...fieldCodes].map(([c, n]) => `${c} ${n}`).join(', ')}`);
        }
      }
    }
    t.diagnostic(`total: ${total} cases; ${[...codeTotals].map(([c, n]) => `${c} ${n}`).join(', ')}`);
    t.diagnostic(`slowest: ${slowest.map((s) => `${s.ms} ms ${s.where}`).join(' | ')}`);
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
      `${failures.length} hostile cases failed (${groups.size} groups; see the diagnostics)`,
    );
  });

  // --- Nothing left behind -------------------------------------------------------------------

  it('removes through the API what hostile requests created, and leaves nothing behind', async () => {
    await checkAlive({ rpc: '-', field: '-', value: '(cleanup)' });
    const leftovers: string[] = [];
    const ctrs = await must<{ containers: WireCtr[] }>('ListContainers', {});
    for (const c of ctrs.containers.filter((c) => c.id !== targets.ctrId)) {
      leftovers.push(`container ${summarize(c.metadata.name)} ${c.state}`);
      await must('RemoveContainer', { container_id: c.id });
    }
    const pods = await must<{ items: WirePod[] }>('ListPodSandbox', {});
    for (const p of pods.items.filter((p) => p.id !== targets.podId)) {
      leftovers.push(`pod ${summarize(p.metadata.name)} ${p.state}`);
      await must('RemovePodSandbox', { pod_sandbox_id: p.id });
    }

    // With only the targets left, the host must hold exactly theirs.
    assert.deepEqual(
      (await must<{ items: WirePod[] }>('ListPodSandbox', {})).items.map((p) => p.id),
      [targets.podId],
    );
    assert.deepEqual(
      (await must<{ containers: WireCtr[] }>('ListContainers', {})).containers.map((c) => c.id),
      [targets.ctrId],
    );
    assert.equal((await daemon.netnsFiles()).length, 1, 'netns files');
    assert.equal((await daemon.leasedIps()).length, 1, 'IP leases');
    // The target pod is as kubelet sends one (no shared pid namespace): it runs no infra.
    assert.deepEqual(await daemon.runcContainers(), [targets.ctrId], 'runc containers');
    assert.deepEqual(await daemon.sandboxDirs(), [targets.podId], 'sandbox dirs');
    assert.equal((await daemon.conmonPids()).length, 1, 'conmon processes');
    const strayMounts = (await daemon.podMounts()).filter(
      (m) => !m.includes(targets.podId) && !m.includes(targets.ctrId),
    );
    assert.deepEqual(strayMounts, [], 'mounts of neither target');

    await must('RemovePodSandbox', { pod_sandbox_id: targets.podId });
    targets.podId = '';
    targets.ctrId = '';
    assert.deepEqual((await must<{ items: unknown[] }>('ListPodSandbox', {})).items, []);
    assert.deepEqual((await must<{ containers: unknown[] }>('ListContainers', {})).containers, []);
    assert.deepEqual(await daemon.netnsFiles(), [], 'netns files');
    assert.deepEqual(await daemon.leasedIps(), [], 'IP leases');
    assert.deepEqual(await daemon.runcContainers(), [], 'runc containers');
    assert.deepEqual(await daemon.sandboxDirs(), [], 'sandbox dirs');
    assert.equal((await daemon.conmonPids()).length, 0, 'conmon processes');
    assert.deepEqual(await daemon.podMounts(), [], 'mounts under the test dir');
    assert.ok(!existsSync(PWNED), `${PWNED} exists: a hostile string ran through a host shell`);
    assert.equal(
      daemon.output.split(DNS_BLOCKED_MARKER).length - 1,
      0,
      'berthd tried to look up a non-loopback host',
    );
    assert.deepEqual(
      leftovers,
      [],
      'left behind by hostile requests, though the API never handed out their ids',
    );
  });
});
