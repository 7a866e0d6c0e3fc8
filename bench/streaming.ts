/**
 * Streaming figures against a real berthd (runc under conmon, bridge CNI, busybox image from Debian's
 * docker-registry on loopback), driven by this project's SPDY/3.1 client the way client-go drives
 * kubelet's streaming server: exec round trips, stdout throughput with berthd's memory watched, and
 * port-forward requests to busybox httpd inside a pod. Prints numbers; never fails on time.
 * Usage: node dist/bench/streaming.js
 * Env: BENCH_EXEC_N (exec samples, 50), BENCH_PF_N (port-forward samples per variant, 50),
 * BENCH_STREAM_RUNS (256 MB stdout runs, 3),
 * BENCH_COMPARE (another CRI endpoint, unix:///path/to.sock: the same sequences run against it too,
 * interleaved with berth's, and a side-by-side table is printed),
 * BENCH_COMPARE_IMAGE (an image that endpoint can pull, holding busybox with /bin/sh, sleep, echo,
 * yes, head and httpd, and /www/index.html; by default bench/streaming:1 on BENCH_COMPARE_REGISTRY,
 * 127.0.0.1:5055, where scripts/bench-containerd.sh puts it).
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SpdyConnection, SpdyStream } from '../src/spdy/connection.js';
import type { CriClient } from '../test/harness/client.js';
import { TestDaemon, podConfig } from '../test/harness/daemon.js';
import { watchRss } from '../test/harness/memory.js';
import { runPod, startContainer, type Pod } from '../test/harness/pods.js';
import { startRegistry, type TestRegistry } from '../test/harness/registry.js';
import { spdyConnect, spdyRemoteCommand } from '../test/harness/streaming.js';
import { connectOther, interleaved } from './endpoints.js';
import { benchImageRefs, pushBenchImages } from './images.js';
import { envCount, runBench } from './run.js';
import { figures, line, timed, type Figures } from './stats.js';

const STREAM_BYTES = 256 * 1024 * 1024;
const STREAM_CMD = ['sh', '-c', `yes 0123456789abcdef | head -c ${STREAM_BYTES}`];
const HTTP_GET = 'GET / HTTP/1.0\r\n\r\n';
/** A hung stream must end the bench with an error rather than hold it forever. */
const SAMPLE_TIMEOUT_MS = 30_000;
const STREAM_TIMEOUT_MS = 300_000;

interface UrlResponse {
  url: string;
}

interface Endpoint {
  label: string;
  cri: CriClient;
  image: string;
  /** The process serving the endpoint, for its memory; undefined where it cannot be found. */
  pid: number | undefined;
  logDir: string;
  pods: string[];
  /** Set on the compare endpoint when the bench pulled the image, so it removes it again. */
  pulledImage: boolean;
}

/** What each endpoint runs the samples against. */
interface Workloads {
  /** A container running `sleep`, for the execs. */
  execId: string;
  /** A pod whose container serves /www on port 80. */
  webPod: string;
}

interface ExecSample {
  rpc: number;
  session: number;
  total: number;
}

interface StreamRun {
  ms: number;
  mbPerS: number;
  rssBeforeKiB: number;
  rssPeakKiB: number;
  /**
   * This process's CPU time over the wall time: near 1 means the SPDY client, not the runtime, set
   * the pace on a machine this small.
   */
  clientCpu: number;
}

interface ForwardSample {
  rpc: number;
  total: number;
}

interface Results {
  exec: ExecSample[];
  stream: StreamRun[];
  fresh: ForwardSample[];
  reused: number[];
}

function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

async function prepare(ep: Endpoint, tag: string): Promise<Workloads> {
  const present = await ep.cri
    .callImage<{ image?: unknown }>('ImageStatus', { image: { image: ep.image } })
    .then((res) => Boolean(res.image))
    .catch(() => false);
  if (!present) {
    await ep.cri.callImage('PullImage', { image: { image: ep.image } });
    ep.pulledImage = true;
  }
  const runNamedPod = async (name: string): Promise<Pod> => {
    const logDirectory = join(ep.logDir, name);
    // kubelet makes the pod log directory, not the runtime; some runtimes refuse to start without it.
    await mkdir(logDirectory, { recursive: true });
    const pod = await runPod(ep.cri, podConfig(`stream-${name}-${tag}`, { log_directory: logDirectory }));
    ep.pods.push(pod.id);
    return pod;
  };
  const start = (pod: Pod, name: string, command: string[]): Promise<string> => {
    const config = { metadata: { name }, image: { image: ep.image }, command, log_path: `${name}.log` };
    return startContainer(ep.cri, pod, config);
  };
  const shell = await runNamedPod('exec');
  const execId = await start(shell, 'sleeper', ['/bin/sleep', '100000']);
  const web = await runNamedPod('web');
  await start(web, 'httpd', ['/bin/httpd', '-f', '-p', '80', '-h', '/www']);
  return { execId, webPod: web.id };
}

async function execUrl(ep: Endpoint, id: string, cmd: string[], stderr: boolean): Promise<string> {
  const res = await ep.cri.call<UrlResponse>('Exec', { container_id: id, cmd, stdout: true, stderr });
  return res.url;
}

/** v4 ends a session with a JSON status on the error stream; anything but Success spoils the sample. */
function checkStatus(ep: Endpoint, errorText: string): void {
  const status = errorText === '' ? '' : ((JSON.parse(errorText) as { status?: string }).status ?? '');
  if (status !== 'Success') throw new Error(`${ep.label}: exec ended with ${errorText || 'no status'}`);
}

async function execSample(ep: Endpoint, w: Workloads): Promise<ExecSample> {
  const [[session, rpc], total] = await timed(async () => {
    const [url, rpcMs] = await timed(() => execUrl(ep, w.execId, ['echo', 'hi'], true));
    const [res, sessionMs] = await timed(() =>
      within(SAMPLE_TIMEOUT_MS, `${ep.label} exec`, spdyRemoteCommand(url, { stderr: true })),
    );
    if (res.stdout.toString() !== 'hi\n')
      throw new Error(`${ep.label}: exec printed ${res.stdout.toString()}`);
    checkStatus(ep, res.errorText);
    return [sessionMs, rpcMs];
  });
  return { rpc, session, total };
}

async function streamRun(ep: Endpoint, w: Workloads): Promise<StreamRun> {
  const url = await execUrl(ep, w.execId, STREAM_CMD, false);
  const cpuBefore = process.cpuUsage();
  const [[res, ms], rss] = await watchRss(ep.pid, () =>
    timed(() =>
      within(STREAM_TIMEOUT_MS, `${ep.label} stream`, spdyRemoteCommand(url, { discardOutput: true })),
    ),
  );
  if (res.stdoutBytes !== STREAM_BYTES)
    throw new Error(`${ep.label}: stream delivered ${res.stdoutBytes} of ${STREAM_BYTES} bytes`);
  checkStatus(ep, res.errorText);
  const cpu = process.cpuUsage(cpuBefore);
  return {
    ms,
    mbPerS: STREAM_BYTES / 1e6 / (ms / 1000),
    rssBeforeKiB: rss.before,
    rssPeakKiB: rss.peak,
    clientCpu: (cpu.user + cpu.system) / 1000 / ms,
  };
}

function ended(stream: SpdyStream): Promise<void> {
  return new Promise((resolve) => {
    stream.once('end', () => resolve());
    stream.once('close', () => resolve());
  });
}

/** One forwarded connection, as kubectl port-forward makes per local connection: a stream pair. */
async function forwardGet(ep: Endpoint, conn: SpdyConnection, requestId: number): Promise<void> {
  const headers = { port: '80', requestID: String(requestId) };
  const error = await conn.openStream({ streamType: 'error', ...headers });
  const data = await conn.openStream({ streamType: 'data', ...headers });
  error.end();
  const body: Buffer[] = [];
  const problem: Buffer[] = [];
  data.on('data', (c: Buffer) => body.push(c));
  error.on('data', (c: Buffer) => problem.push(c));
  data.end(HTTP_GET);
  await within(
    SAMPLE_TIMEOUT_MS,
    `${ep.label} port-forward request`,
    Promise.all([ended(data), ended(error)]),
  );
  const reply = Buffer.concat(body).toString();
  if (problem.length > 0 || !/^HTTP\/1\.[01] 200/.test(reply))
    throw new Error(
      `${ep.label}: port-forward got ${Buffer.concat(problem).toString() || reply.slice(0, 200)}`,
    );
}

async function forwardUrl(ep: Endpoint, w: Workloads): Promise<string> {
  const res = await ep.cri.call<UrlResponse>('PortForward', { pod_sandbox_id: w.webPod, port: [80] });
  return res.url;
}

async function freshForward(ep: Endpoint, w: Workloads): Promise<ForwardSample> {
  const [rpc, total] = await timed(async () => {
    const [url, rpcMs] = await timed(() => forwardUrl(ep, w));
    const { conn } = await within(
      SAMPLE_TIMEOUT_MS,
      `${ep.label} port-forward upgrade`,
      spdyConnect(url, ['portforward.k8s.io']),
    );
    try {
      await forwardGet(ep, conn, 0);
    } finally {
      conn.close();
    }
    return rpcMs;
  });
  return { rpc, total };
}

/** httpd starts after StartContainer returns; the first requests may find nothing listening yet. */
async function waitForHttpd(ep: Endpoint, w: Workloads): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      await freshForward(ep, w);
      return;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

function mib(kib: number): string {
  return Number.isNaN(kib) ? 'n/a' : `${(kib / 1024).toFixed(1)} MiB`;
}

function pair(f: Figures, unit = 'ms'): string {
  return `${f.median.toFixed(1)} / ${f.p99.toFixed(1)} ${unit}`;
}

function report(ep: Endpoint, r: Results): void {
  console.log(`${ep.label}:`);
  console.log(line('  exec echo hi, total', figures(r.exec.map((s) => s.total))));
  console.log(line('    Exec rpc', figures(r.exec.map((s) => s.rpc))));
  console.log(line('    SPDY session', figures(r.exec.map((s) => s.session))));
  const runs = r.stream.map(
    (s) =>
      `${s.mbPerS.toFixed(0)} MB/s (${(s.ms / 1000).toFixed(2)} s, client CPU ${(s.clientCpu * 100).toFixed(0)}%)`,
  );
  console.log(`  stdout ${STREAM_BYTES / 1024 / 1024} MiB`.padEnd(27) + runs.join(', '));
  const rss = r.stream.map((s) => `${mib(s.rssBeforeKiB)} -> ${mib(s.rssPeakKiB)}`);
  console.log(`    daemon RSS`.padEnd(27) + `before -> peak: ${rss.join(', ')}`);
  console.log(line('  port-forward, fresh', figures(r.fresh.map((s) => s.total))));
  console.log(line('    PortForward rpc', figures(r.fresh.map((s) => s.rpc))));
  console.log(line('  port-forward, reused', figures(r.reused)));
}

function compareTable(a: Endpoint, ra: Results, b: Endpoint, rb: Results): void {
  const latency = (label: string, x: number[], y: number[]): string[] => {
    const fx = figures(x);
    const fy = figures(y);
    return [label, pair(fx), pair(fy), `${(fx.median / fy.median).toFixed(2)}x`];
  };
  const throughput = (x: StreamRun[], y: StreamRun[]): string[] => {
    const fx = figures(x.map((s) => s.mbPerS));
    const fy = figures(y.map((s) => s.mbPerS));
    const worst = (runs: StreamRun[]): number => Math.min(...runs.map((s) => s.mbPerS));
    return [
      `stdout ${STREAM_BYTES / 1024 / 1024} MiB (MB/s, worst)`,
      `${fx.median.toFixed(0)} / ${worst(x).toFixed(0)} MB/s`,
      `${fy.median.toFixed(0)} / ${worst(y).toFixed(0)} MB/s`,
      `${(fx.median / fy.median).toFixed(2)}x`,
    ];
  };
  const growth = (x: StreamRun[], y: StreamRun[]): string[] => {
    const most = (runs: StreamRun[]): number => Math.max(...runs.map((s) => s.rssPeakKiB - s.rssBeforeKiB));
    const base = (runs: StreamRun[]): number => runs[0]?.rssBeforeKiB ?? NaN;
    return [
      'daemon RSS: before, +peak',
      `${mib(base(x))}, +${mib(most(x))}`,
      `${mib(base(y))}, +${mib(most(y))}`,
      '',
    ];
  };
  const rows = [
    ['operation', `${a.label} median / p99`, `${b.label} median / p99`, 'ratio'],
    latency(
      'exec echo hi, total',
      ra.exec.map((s) => s.total),
      rb.exec.map((s) => s.total),
    ),
    latency(
      '  Exec rpc',
      ra.exec.map((s) => s.rpc),
      rb.exec.map((s) => s.rpc),
    ),
    latency(
      '  SPDY session',
      ra.exec.map((s) => s.session),
      rb.exec.map((s) => s.session),
    ),
    throughput(ra.stream, rb.stream),
    growth(ra.stream, rb.stream),
    latency(
      'port-forward, fresh',
      ra.fresh.map((s) => s.total),
      rb.fresh.map((s) => s.total),
    ),
    latency(
      '  PortForward rpc',
      ra.fresh.map((s) => s.rpc),
      rb.fresh.map((s) => s.rpc),
    ),
    latency('port-forward, reused conn', ra.reused, rb.reused),
  ];
  const widths = [0, 1, 2, 3].map((c) => Math.max(...rows.map((row) => (row[c] ?? '').length)));
  for (const row of rows) console.log(row.map((cell, c) => cell.padEnd(widths[c] ?? 0)).join('   '));
  console.log(`(ratio: ${a.label} / ${b.label} medians; below 1 is ${a.label} faster, except MB/s)`);
}

async function compareEndpoint(): Promise<Endpoint | null> {
  const address = process.env.BENCH_COMPARE;
  if (!address) return null;
  const image =
    process.env.BENCH_COMPARE_IMAGE ??
    benchImageRefs(process.env.BENCH_COMPARE_REGISTRY ?? '127.0.0.1:5055').streaming;
  const other = await connectOther(address);
  return {
    label: other.name,
    cri: other.cri,
    image,
    pid: other.pid,
    logDir: await mkdtemp(join(tmpdir(), 'berth-bench-streaming-')),
    pods: [],
    pulledImage: false,
  };
}

async function cleanUp(ep: Endpoint): Promise<void> {
  for (const id of ep.pods) {
    await ep.cri.call('StopPodSandbox', { pod_sandbox_id: id }).catch(() => {});
    await ep.cri.call('RemovePodSandbox', { pod_sandbox_id: id }).catch((err: unknown) => {
      console.error(`${ep.label}: removing pod ${id}: ${String(err)}`);
    });
  }
  if (ep.pulledImage) await ep.cri.callImage('RemoveImage', { image: { image: ep.image } }).catch(() => {});
  await rm(ep.logDir, { recursive: true, force: true });
}

async function main(): Promise<void> {
  const execN = envCount('BENCH_EXEC_N', 50);
  const forwardN = envCount('BENCH_PF_N', 50);
  const streamRuns = envCount('BENCH_STREAM_RUNS', 3);
  const tag = randomBytes(3).toString('hex');

  let other: Endpoint | null = null;
  let registry: TestRegistry | null = null;
  let daemon: TestDaemon | null = null;
  const reusedConns: SpdyConnection[] = [];
  try {
    other = await compareEndpoint();
    registry = await startRegistry();
    const image = (await pushBenchImages(registry)).streaming;
    daemon = await TestDaemon.create({ cni: 'bridge' });
    const berth: Endpoint = {
      label: 'berth',
      cri: daemon.cri,
      image: image.reference,
      pid: daemon.proc?.pid,
      logDir: join(daemon.base, 'logs'),
      pods: [],
      pulledImage: false,
    };
    const endpoints = other ? [berth, other] : [berth];
    const work = new Map<Endpoint, Workloads>();
    for (const ep of endpoints) work.set(ep, await prepare(ep, tag));
    const of = (ep: Endpoint): Workloads => work.get(ep) as Workloads;

    // Warm-up: the first exec and forward of each endpoint pay for lazy set-up and cold caches.
    for (const ep of endpoints) {
      await execSample(ep, of(ep));
      await waitForHttpd(ep, of(ep));
    }

    const [, elapsedMs] = await timed(async () => {
      const exec = await interleaved(endpoints, execN, (ep) => execSample(ep, of(ep)));
      const stream = await interleaved(endpoints, streamRuns, (ep) => streamRun(ep, of(ep)));
      const fresh = await interleaved(endpoints, forwardN, (ep) => freshForward(ep, of(ep)));
      const reusedConn = new Map<Endpoint, SpdyConnection>();
      for (const ep of endpoints) {
        const { conn } = await spdyConnect(await forwardUrl(ep, of(ep)), ['portforward.k8s.io']);
        reusedConns.push(conn);
        reusedConn.set(ep, conn);
      }
      const reused = await interleaved(endpoints, forwardN, async (ep, i) => {
        const conn = reusedConn.get(ep) as SpdyConnection;
        return (await timed(() => forwardGet(ep, conn, i + 1)))[1];
      });
      const results = (ep: Endpoint): Results => ({
        exec: exec.get(ep) ?? [],
        stream: stream.get(ep) ?? [],
        fresh: fresh.get(ep) ?? [],
        reused: reused.get(ep) ?? [],
      });

      console.log(
        `berth streaming benchmark: SPDY/3.1 (v4.channel.k8s.io, portforward.k8s.io), runc under conmon, ` +
          `bridge CNI, busybox; exec ${execN}, stdout ${streamRuns} x ${STREAM_BYTES} bytes, port-forward ${forwardN} per variant`,
      );
      for (const ep of endpoints) report(ep, results(ep));
      console.log(
        `${''.padEnd(26)} (exec: Exec rpc + SPDY upgrade + error/stdout/stderr streams to exit status; ` +
          `fresh forward: PortForward rpc + upgrade + stream pair + GET to the end of the reply; ` +
          `reused: a new stream pair per GET on one connection)`,
      );
      if (other) {
        console.log('');
        compareTable(berth, results(berth), other, results(other));
      }
    });
    console.log(`measured in ${(elapsedMs / 1000).toFixed(1)} s`);
  } finally {
    for (const conn of reusedConns) conn.close();
    if (other) {
      await cleanUp(other);
      other.cri.close();
    }
    await daemon?.destroy();
    await registry?.stop();
  }
}

runBench(main);
