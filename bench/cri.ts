/**
 * The CRI calls a kubelet makes most, timed against a berthd of its own and, side by side, against
 * another CRI runtime (`--compare unix:///path`, e.g. containerd started by
 * scripts/bench-containerd.sh): the same sequences on both, in runs that alternate which runtime
 * goes first, then a table of medians, p99s and berth/other ratios. Berth-only rows follow:
 * ListContainers over many containers and start-up recovery after a kill -9. Prints numbers;
 * never fails on time.
 *
 * Usage: node dist/bench/cri.js [--compare unix:///path] [--registry 127.0.0.1:5055]
 *          [--runs 5] [--samples 20] [--clients 4] [--pods 100] [--containers 1000] [--warm 0]
 * Each flag falls back to an env var: BENCH_COMPARE, BENCH_COMPARE_REGISTRY, BENCH_RUNS,
 * BENCH_SAMPLES, BENCH_CLIENTS, BENCH_PODS, BENCH_CONTAINERS, BENCH_WARM. `--warm N` makes N
 * calls of each short read on every runtime before sampling: V8 optimizes berthd's RPC path only
 * after about 2000 calls, which a kubelet makes within minutes. `--registry` is where the other
 * runtime pulls the bench images from (scripts/bench-containerd.sh puts them there); berth pulls
 * the same bytes from a registry of its own on loopback.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { LayerStore } from '../src/imagestore/layers.js';
import { CriClient } from '../test/harness/client.js';
import { TestDaemon, podConfig } from '../test/harness/daemon.js';
import { parseLog, startAndLog } from '../test/harness/log.js';
import { rssKiB, settledRssKiB } from '../test/harness/memory.js';
import { inPool } from '../test/harness/pool.js';
import {
  containerConfig,
  createContainer,
  runPodSandbox,
  waitContainerState,
  type Pod,
} from '../test/harness/pods.js';
import { startRegistry, type TestRegistry } from '../test/harness/registry.js';
import { connectOther, interleaved, type OtherRuntime } from './endpoints.js';
import { benchImageRefs, pushBenchImages, type BenchImage } from './images.js';
import { runBench, sizeOption } from './run.js';
import { figures, timed, type Figures } from './stats.js';

/**
 * What kubelet sends for a pod without shareProcessNamespace: the workload is pid 1 of its own pid
 * namespace and shares the pod's network and IPC.
 */
const SECURITY = {
  security_context: { namespace_options: { network: 'POD', pid: 'CONTAINER', ipc: 'POD' } },
};
/** Pods the ListContainers containers are spread over. */
const LIST_PODS = 10;
/** Label values the ListContainers containers cycle through; the filtered call matches one. */
const LIST_GROUPS = 10;
const RESTARTS = 3;
/** Time a daemon is left alone before its idle memory is read: deferred work and GC. */
const SETTLE_MS = 5000;
/**
 * When memory after a burst is read a second time: V8 gives back the heap a burst grew only once
 * it has seen the daemon idle for a while, which takes longer than SETTLE_MS.
 */
const LATE_SETTLE_MS = 30_000;
const RUNNING = 'CONTAINER_RUNNING';

/** A long run says where it is, on stderr, apart from the figures. */
function progress(what: string): void {
  process.stderr.write(`bench cri: ${what}\n`);
}

/** One runtime under test, as the sequences see it. */
interface Side {
  label: string;
  socket: string;
  cri: CriClient;
  pid: number | undefined;
  images: Record<BenchImage, string>;
  /** Where the pods' log directories go (kubelet makes them, not the runtime). */
  logDir: string;
  /** Pods made and not yet removed, so a failure still removes them. */
  pods: Set<string>;
  samples: Map<string, number[]>;
}

interface Sizes {
  runs: number;
  /** Calls of each short read before sampling. */
  warm: number;
  samples: number;
  clients: number;
  pods: number;
  containers: number;
}

let podCount = 0;
const tag = randomBytes(3).toString('hex');

function record(side: Side, row: string, ms: number): void {
  const list = side.samples.get(row);
  if (list) list.push(ms);
  else side.samples.set(row, [ms]);
}

async function newPodConfig(side: Side): Promise<Record<string, unknown>> {
  const name = `bench-${tag}-${podCount++}`;
  const logDirectory = join(side.logDir, name);
  await mkdir(logDirectory, { recursive: true });
  return podConfig(name, { log_directory: logDirectory, linux: SECURITY });
}

async function runPod(side: Side, cri: CriClient = side.cri): Promise<Pod> {
  const config = await newPodConfig(side);
  const id = await runPodSandbox(cri, config);
  side.pods.add(id);
  return { id, config };
}

/** Stop first: some runtimes refuse to remove a pod that still runs. */
async function removePod(side: Side, id: string, cri: CriClient = side.cri): Promise<void> {
  await cri.call('StopPodSandbox', { pod_sandbox_id: id });
  await cri.call('RemovePodSandbox', { pod_sandbox_id: id });
  side.pods.delete(id);
}

function appConfig(side: Side, name: string, labels: Record<string, string> = {}): Record<string, unknown> {
  return containerConfig(name, side.images.app, { linux: SECURITY, labels });
}

async function startApp(side: Side, pod: Pod, cri: CriClient = side.cri): Promise<string> {
  const id = await createContainer(cri, pod, appConfig(side, `app-${podCount++}`));
  await cri.call('StartContainer', { container_id: id });
  return id;
}

// ----------------------------------------------------------------------------------------------
// Sequences: each makes `n` samples with one client; `withClients` runs several clients at once.

type Sequence = (cri: CriClient, n: number, rec: (row: string, ms: number) => void) => Promise<void>;

function podLifecycle(side: Side): Sequence {
  return async (cri, n, rec) => {
    for (let i = 0; i < n; i++) {
      const config = await newPodConfig(side);
      const [id, runMs] = await timed(() => runPodSandbox(cri, config));
      side.pods.add(id);
      const [, stopMs] = await timed(() => cri.call('StopPodSandbox', { pod_sandbox_id: id }));
      const [, removeMs] = await timed(() => cri.call('RemovePodSandbox', { pod_sandbox_id: id }));
      side.pods.delete(id);
      rec('RunPodSandbox', runMs);
      rec('StopPodSandbox', stopMs);
      rec('RemovePodSandbox', removeMs);
    }
  };
}

function containerLifecycle(side: Side, pod: Pod): Sequence {
  return async (cri, n, rec) => {
    for (let i = 0; i < n; i++) {
      const [id, startMs] = await timed(() => startApp(side, pod, cri));
      // Timeout 0: SIGKILL at once; what is timed is the removal of an exited container.
      await cri.call('StopContainer', { container_id: id, timeout: 0 });
      const [, removeMs] = await timed(() => cri.call('RemoveContainer', { container_id: id }));
      rec('CreateContainer+StartContainer', startMs);
      rec('RemoveContainer', removeMs);
    }
  };
}

function reads(side: Side, containerId: string): Sequence {
  return async (cri, n, rec) => {
    for (let i = 0; i < n; i++) {
      const status = { container_id: containerId };
      rec('ContainerStatus', (await timed(() => cri.call('ContainerStatus', status)))[1]);
      const image = { image: { image: side.images.app } };
      rec('ImageStatus', (await timed(() => cri.callImage('ImageStatus', image)))[1]);
      rec('ListImages', (await timed(() => cri.callImage('ListImages', {})))[1]);
    }
  };
}

/**
 * `sequence` on `clients` connections at once, `samples` samples in all; rows get a
 * `, <n> clients` suffix when there is more than one.
 */
async function withClients(side: Side, clients: number, samples: number, sequence: Sequence): Promise<void> {
  const suffix = clients > 1 ? `, ${clients} clients` : '';
  const rec = (row: string, ms: number): void => record(side, `${row}${suffix}`, ms);
  if (clients === 1) return sequence(side.cri, samples, rec);
  const connections = Array.from({ length: clients }, () => new CriClient(side.socket));
  try {
    const each = Math.ceil(samples / clients);
    await Promise.all(connections.map((cri) => sequence(cri, each, rec)));
  } finally {
    for (const cri of connections) cri.close();
  }
}

/** The image's layers must really go, or the "cold" pull only writes a record. */
type LayerCheck = () => Promise<string | undefined>;

async function coldPulls(side: Side, n: number, layersGone: LayerCheck | undefined): Promise<void> {
  const image = { image: { image: side.images.pull } };
  for (let i = 0; i < n; i++) {
    await side.cri.callImage('RemoveImage', image);
    const problem = i === 0 ? await layersGone?.() : undefined;
    if (problem) console.log(`warning: ${side.label}: ${problem}`);
    record(side, 'PullImage, cold', (await timed(() => side.cri.callImage('PullImage', image)))[1]);
  }
}

async function fromScratch(side: Side, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const config = await newPodConfig(side);
    const [pod, ms] = await timed(async () => {
      const id = await runPodSandbox(side.cri, config);
      side.pods.add(id);
      const running: Pod = { id, config };
      const ctr = await startApp(side, running);
      await waitContainerState(side.cri, ctr, RUNNING);
      return running;
    });
    record(side, 'pod + container from scratch', ms);
    await removePod(side, pod.id);
  }
}

/** One run of every sequence on one side. */
async function oneRun(side: Side, sizes: Sizes, layersGone: LayerCheck | undefined): Promise<void> {
  const clientCounts = sizes.clients > 1 ? [1, sizes.clients] : [1];
  for (const clients of clientCounts) await withClients(side, clients, sizes.samples, podLifecycle(side));
  const pod = await runPod(side);
  for (const clients of clientCounts)
    await withClients(side, clients, sizes.samples, containerLifecycle(side, pod));
  const target = await startApp(side, pod);
  for (const clients of clientCounts) await withClients(side, clients, sizes.samples, reads(side, target));
  await removePod(side, pod.id);
  await coldPulls(side, sizes.samples, layersGone);
  await fromScratch(side, sizes.samples);
}

/** Images present, and one pod with a container run and removed: lazy first-time work is done. */
async function warmUp(side: Side, warmReads: number): Promise<void> {
  for (const image of [side.images.app, side.images.pull])
    await side.cri.callImage('PullImage', { image: { image } });
  await fromScratch(side, 1);
  if (warmReads > 0) {
    const pod = await runPod(side);
    await reads(side, await startApp(side, pod))(side.cri, warmReads, () => undefined);
    await removePod(side, pod.id);
  }
  side.samples.clear();
}

/** The daemon's RSS with `n` pods each running a container, and once all are removed again. */
async function churn(side: Side, n: number): Promise<Omit<Memory, 'idleKiB'>> {
  const pods: Pod[] = [];
  for (let i = 0; i < n; i++) {
    const pod = await runPod(side);
    await startApp(side, pod);
    pods.push(pod);
  }
  const loadedKiB = await rssKiB(side.pid);
  for (const pod of pods) await removePod(side, pod.id);
  const afterKiB = await settledRssKiB(side.pid, SETTLE_MS);
  return { loadedKiB, afterKiB, lateKiB: await settledRssKiB(side.pid, LATE_SETTLE_MS - SETTLE_MS) };
}

// ----------------------------------------------------------------------------------------------
// berth only

/** berthd's own time per call of `rpc`, from its debug "rpc" log lines in `output`. */
function serverMs(output: string, rpc: string): number[] {
  return parseLog(output).flatMap((e) =>
    e.msg === 'rpc' && e.rpc === rpc && typeof e.ms === 'number' ? [e.ms] : [],
  );
}

interface ListFigures {
  count: number;
  roundTrip: Figures;
  inBerthd: Figures;
  filteredCount: number;
  filteredRoundTrip: Figures;
  filteredInBerthd: Figures;
}

/** ListContainers over `n` created (not started) containers, timed by the client and by berthd. */
async function listContainers(
  daemon: TestDaemon,
  side: Side,
  n: number,
  samples: number,
): Promise<ListFigures> {
  const pods: Pod[] = [];
  for (let p = 0; p < LIST_PODS; p++) pods.push(await runPod(side));
  await inPool(
    Array.from({ length: n }, (_, i) => i),
    4,
    async (i) => {
      const pod = pods[i % pods.length];
      if (!pod) throw new Error('no pod for the list containers');
      const labels = { group: `g${i % LIST_GROUPS}` };
      await createContainer(side.cri, pod, appConfig(side, `list-${i}`, labels));
    },
  );
  type ListReply = { containers: unknown[] };
  const measure = async (
    filter: object,
  ): Promise<{ count: number; roundTrip: Figures; inBerthd: Figures }> => {
    const from = daemon.output.length;
    const ms: number[] = [];
    let count = 0;
    for (let i = 0; i < samples; i++) {
      const [reply, took] = await timed(() => side.cri.call<ListReply>('ListContainers', filter));
      ms.push(took);
      count = reply.containers.length;
    }
    // The log line is written after the reply: wait until the last call's is there.
    const logged = async (): Promise<number[]> => serverMs(daemon.output.slice(from), 'ListContainers');
    for (let tries = 0; tries < 20 && (await logged()).length < samples; tries++) await sleep(50);
    return { count, roundTrip: figures(ms), inBerthd: figures(await logged()) };
  };
  const all = await measure({});
  const some = await measure({ filter: { label_selector: { group: 'g0' } } });
  for (const pod of pods) await removePod(side, pod.id);
  return {
    count: all.count,
    roundTrip: all.roundTrip,
    inBerthd: all.inBerthd,
    filteredCount: some.count,
    filteredRoundTrip: some.roundTrip,
    filteredInBerthd: some.inBerthd,
  };
}

/**
 * kill -9 berthd with `n` running pods, start it again: ms from the spawn to its "serving CRI" log
 * line (recovery of every pod included), per restart.
 */
async function recovery(daemon: TestDaemon, side: Side, n: number): Promise<number[]> {
  for (let i = 0; i < n; i++) await startApp(side, await runPod(side));
  const ms: number[] = [];
  for (let r = 0; r < RESTARTS; r++) {
    await daemon.kill9();
    const { log, at } = await startAndLog(daemon);
    const serving = log.find((e) => e.msg === 'serving CRI');
    if (typeof serving?.time !== 'number') throw new Error('berthd logged no time with "serving CRI"');
    ms.push(serving.time - Number(at / 1_000_000n));
  }
  // The old client went with the old daemon.
  side.cri = daemon.cri;
  side.pid = daemon.proc?.pid;
  for (const id of [...side.pods]) await removePod(side, id);
  return ms;
}

// ----------------------------------------------------------------------------------------------
// report

function ms(value: number): string {
  return Number.isNaN(value) ? 'n/a' : value < 10 ? value.toFixed(2) : value.toFixed(1);
}

function mib(kib: number): string {
  return Number.isNaN(kib) ? 'n/a' : (kib / 1024).toFixed(1);
}

function ratio(a: number, b: number): string {
  return Number.isNaN(a) || Number.isNaN(b) || b === 0 ? '' : (a / b).toFixed(2);
}

function printTable(rows: string[][]): void {
  const columns = Math.max(...rows.map((row) => row.length));
  const widths = Array.from({ length: columns }, (_, c) =>
    Math.max(...rows.map((row) => (row[c] ?? '').length)),
  );
  for (const row of rows)
    console.log(
      row
        .map((cell, c) => (c === 0 ? cell.padEnd(widths[c] ?? 0) : cell.padStart(widths[c] ?? 0)))
        .join('  ')
        .trimEnd(),
    );
}

/** Rows in the order first measured, each row's several-clients variant right after it. */
function grouped(samples: Map<string, number[]>): [string, number[]][] {
  const base = (row: string): string => row.replace(/, \d+ clients$/, '');
  const order = [...new Set([...samples.keys()].map(base))];
  return [...samples].sort(([a], [b]) => order.indexOf(base(a)) - order.indexOf(base(b)));
}

interface Memory {
  idleKiB: number;
  loadedKiB: number;
  /** SETTLE_MS after the last pod was removed. */
  afterKiB: number;
  /** LATE_SETTLE_MS after it. */
  lateKiB: number;
}

const NO_MEMORY: Memory = { idleKiB: NaN, loadedKiB: NaN, afterKiB: NaN, lateKiB: NaN };

function report(sides: Side[], memory: Map<Side, Memory>, pods: number): void {
  const [berth, other] = sides;
  if (!berth) return;
  const header = ['operation (ms)', `${berth.label} median`, 'p99'];
  if (other) header.push(`${other.label} median`, 'p99', `ratio ${berth.label}/${other.label}`);
  const rows = [header];
  for (const [row, samples] of grouped(berth.samples)) {
    const b = figures(samples);
    const cells = [row, ms(b.median), ms(b.p99)];
    if (other) {
      const o = figures(other.samples.get(row) ?? []);
      cells.push(ms(o.median), ms(o.p99), ratio(b.median, o.median));
    }
    rows.push(cells);
  }
  const memoryRow = (label: string, kib: (m: Memory) => number): string[] => {
    const b = kib(memory.get(berth) ?? NO_MEMORY);
    const cells = [label, mib(b), ''];
    if (other) {
      const o = kib(memory.get(other) ?? NO_MEMORY);
      cells.push(mib(o), '', ratio(b, o));
    }
    return cells;
  };
  rows.push(['daemon RSS (MiB)']);
  rows.push(memoryRow('  idle', (m) => m.idleKiB));
  rows.push(memoryRow(`  with ${pods} pods + containers`, (m) => m.loadedKiB));
  const seconds = (msValue: number): string => `${msValue / 1000} s`;
  rows.push(memoryRow(`  ${seconds(SETTLE_MS)} after all ${pods} removed`, (m) => m.afterKiB));
  rows.push(memoryRow(`  ${seconds(LATE_SETTLE_MS)} after`, (m) => m.lateKiB));
  const overIdle = (side: Side | undefined, kib: (m: Memory) => number): string => {
    const m = side && memory.get(side);
    return m ? ratio(kib(m), m.idleKiB) : '';
  };
  for (const [label, kib] of [
    [`  ${seconds(SETTLE_MS)} after / idle`, (m: Memory) => m.afterKiB],
    [`  ${seconds(LATE_SETTLE_MS)} after / idle`, (m: Memory) => m.lateKiB],
  ] as const) {
    rows.push([label, overIdle(berth, kib), '', ...(other ? [overIdle(other, kib), '', ''] : [])]);
  }
  printTable(rows);
}

// ----------------------------------------------------------------------------------------------

async function otherSide(runtime: OtherRuntime, registry: string): Promise<Side> {
  return {
    label: runtime.name,
    socket: runtime.socket,
    cri: runtime.cri,
    pid: runtime.pid,
    images: benchImageRefs(registry),
    logDir: await mkdtemp(join(tmpdir(), 'berth-bench-cri-')),
    pods: new Set(),
    samples: new Map(),
  };
}

async function cleanUp(side: Side): Promise<void> {
  for (const id of side.pods) {
    await removePod(side, id).catch((err: unknown) =>
      console.error(`${side.label}: removing pod ${id}: ${String(err)}`),
    );
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      compare: { type: 'string' },
      registry: { type: 'string' },
      runs: { type: 'string' },
      samples: { type: 'string' },
      clients: { type: 'string' },
      pods: { type: 'string' },
      containers: { type: 'string' },
      warm: { type: 'string' },
    },
  });
  const sizes: Sizes = {
    runs: sizeOption(values.runs, 'BENCH_RUNS', 5),
    samples: sizeOption(values.samples, 'BENCH_SAMPLES', 20),
    clients: sizeOption(values.clients, 'BENCH_CLIENTS', 4),
    pods: sizeOption(values.pods, 'BENCH_PODS', 100),
    containers: sizeOption(values.containers, 'BENCH_CONTAINERS', 1000),
    warm: sizeOption(values.warm, 'BENCH_WARM', 0),
  };
  const compare = values.compare ?? process.env.BENCH_COMPARE;
  const otherRegistry = values.registry ?? process.env.BENCH_COMPARE_REGISTRY ?? '127.0.0.1:5055';

  let other: Side | null = null;
  let registry: TestRegistry | null = null;
  let daemon: TestDaemon | null = null;
  try {
    const runtime = compare ? await connectOther(compare) : null;
    other = runtime ? await otherSide(runtime, otherRegistry) : null;
    registry = await startRegistry();
    const pushed = await pushBenchImages(registry);
    // At info, as a node runs it (containerd's config here says info too); the berth-only rows
    // below read berthd's debug lines and restart it at debug first.
    const berthd = await TestDaemon.create({ cni: 'bridge', logLevel: 'info' });
    daemon = berthd;
    const berth: Side = {
      label: 'berth',
      socket: berthd.socket,
      cri: berthd.cri,
      pid: berthd.proc?.pid,
      images: benchImageRefs(registry.host),
      logDir: join(berthd.base, 'logs'),
      pods: new Set(),
      samples: new Map(),
    };
    const layerStore = new LayerStore(berthd.rootDir);
    const berthLayersGone: LayerCheck = async () => {
      const kept: string[] = [];
      for (const layer of pushed.pull.layers) if (await layerStore.has(layer.diffId)) kept.push(layer.diffId);
      return kept.length > 0
        ? `RemoveImage kept ${kept.length} unreferenced layer(s): the pull is not cold`
        : undefined;
    };
    const sides = other ? [berth, other] : [berth];

    console.log(
      `CRI benchmark: ${sizes.runs} runs x ${sizes.samples} samples per row` +
        (sizes.warm > 0 ? ` after ${sizes.warm} warm-up calls of each short read, ` : ', ') +
        (runtime
          ? `alternating berth and ${runtime.name} ${runtime.version} (pid ${runtime.pid ?? 'unknown'}, images from ${otherRegistry})`
          : 'berth only') +
        `; bridge CNI, runc, busybox images on loopback registries`,
    );
    const memory = new Map<Side, Memory>();
    const [, elapsedMs] = await timed(async () => {
      for (const side of sides) {
        await warmUp(side, sizes.warm);
        memory.set(side, { ...NO_MEMORY, idleKiB: await settledRssKiB(side.pid, SETTLE_MS) });
      }
      await interleaved(sides, sizes.runs, async (side, i) => {
        await oneRun(side, sizes, side === berth ? berthLayersGone : undefined);
        progress(`run ${i + 1}/${sizes.runs} of ${side.label} done`);
      });
      for (const side of sides) {
        const idle = memory.get(side)?.idleKiB ?? NaN;
        memory.set(side, { idleKiB: idle, ...(await churn(side, sizes.pods)) });
        progress(`${sizes.pods} pods run and removed on ${side.label}`);
      }
      report(sides, memory, sizes.pods);

      berthd.logLevel = 'debug';
      await berthd.restart();
      berth.cri = berthd.cri;
      berth.pid = berthd.proc?.pid;
      progress(`berth only: ${sizes.containers} containers for ListContainers`);
      const list = await listContainers(berthd, berth, sizes.containers, sizes.samples);
      progress(`berth only: recovery with ${sizes.pods} running pods`);
      const restarts = await recovery(berthd, berth, sizes.pods);
      console.log('');
      console.log('berth only (ms)                                   median  p99');
      const row = (label: string, f: Figures): void =>
        console.log(`${label.padEnd(50)}${ms(f.median).padEnd(8)}${ms(f.p99)}`);
      row(`ListContainers (${list.count}), round trip`, list.roundTrip);
      row(`ListContainers (${list.count}), in berthd`, list.inBerthd);
      row(`ListContainers label filter (${list.filteredCount}), round trip`, list.filteredRoundTrip);
      row(`ListContainers label filter (${list.filteredCount}), in berthd`, list.filteredInBerthd);
      row(`start-up recovery, ${sizes.pods} running pods (${RESTARTS} restarts)`, figures(restarts));
    });
    console.log(
      `(containers for ListContainers: created, not started, in ${LIST_PODS} pods; "in berthd" is the time ` +
        `berthd logs per rpc; recovery: kill -9, then spawn to "serving CRI")`,
    );
    console.log(`measured in ${(elapsedMs / 1000).toFixed(0)} s`);
  } finally {
    if (other) {
      await cleanUp(other);
      other.cri.close();
      await rm(other.logDir, { recursive: true, force: true });
    }
    await daemon?.destroy();
    await registry?.stop();
  }
}

runBench(main);
