/**
 * berthd's Prometheus /metrics and /healthz against a real berthd: a pod on the CNI bridge, a
 * container under runc and conmon, an image pulled from a local registry. Needs root. Traffic goes
 * only to loopback.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { status } from '@grpc/grpc-js';
import { TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { busyboxLayer, pushImage, type PushedImage } from '../harness/images.js';
import { parseLog, type LogEntry } from '../harness/log.js';
import { parseExposition, valueOf, type Sample } from '../harness/prometheus.js';
import { containerConfig, runPod, startContainer } from '../harness/pods.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { registrySkip, rootSkip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 180_000;
const IDLE_WATCH_MS = 3_000;
const UNKNOWN_ID = 'f'.repeat(64);

describe('Prometheus metrics', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  let registry: TestRegistry;
  let image: PushedImage;
  let daemon: TestDaemon;
  let url: string;

  before(async () => {
    registry = await startRegistry();
    image = await pushImage(registry, 'berth/metrics', '1', { layers: [await busyboxLayer('gzip')] });
    daemon = await TestDaemon.create({ extraArgs: ['--metrics-address', '127.0.0.1:0'] });
    url = metricsUrl(parseLog(daemon.output));
  });

  after(async () => {
    try {
      await daemon?.destroy();
    } finally {
      await registry?.stop();
    }
  });

  it('answers /healthz with ok while berthd serves', async () => {
    const res = await fetch(`${url}/healthz`);
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'ok\n');
  });

  it('lets an idle berthd sleep: its event-loop lag sampler wakes it ten times a second, not a hundred', async () => {
    const pid = daemon.proc?.pid;
    assert.ok(pid !== undefined);
    const before = await mainThreadWakeups(pid);
    await sleep(IDLE_WATCH_MS);
    const wakeups = (await mainThreadWakeups(pid)) - before;
    // ~30 at a 100 ms sample interval; prom-client's default of 10 ms made ~300.
    assert.ok(wakeups < 90, `berthd's main thread woke ${wakeups} times in ${IDLE_WATCH_MS} ms of idling`);
  });

  it("counts a pod's and a container's start by step, calls by status, and what runs", async () => {
    await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
    const pod = await runPod(daemon.cri, daemon.pod('metrics'));
    await startContainer(
      daemon.cri,
      pod,
      containerConfig('sleeper', image.reference, { command: ['/bin/sleep', '3600'] }),
    );
    await rejectsWith(daemon.cri.call('ContainerStatus', { container_id: UNKNOWN_ID }), status.NOT_FOUND);

    const res = await fetch(`${url}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    const samples = parseExposition(await res.text());
    const log = parseLog(daemon.output);

    const podSteps = stepsOf(log, 'pod sandbox ready');
    assert.ok(podSteps.includes('cni-add'), `pod steps: ${podSteps.join(', ')}`);
    for (const step of podSteps) {
      const labels = { operation: 'RunPodSandbox', step };
      assert.equal(valueOf(samples, 'berth_operation_step_duration_seconds_count', labels), 1, step);
    }
    const containerSteps = stepsOf(log, 'container created');
    assert.ok(containerSteps.includes('rootfs'), `container steps: ${containerSteps.join(', ')}`);
    for (const step of containerSteps) {
      const labels = { operation: 'CreateContainer', step };
      assert.equal(valueOf(samples, 'berth_operation_step_duration_seconds_count', labels), 1, step);
    }
    assert.equal(
      valueOf(samples, 'berth_cni_plugin_duration_seconds_count', { plugin: 'bridge', command: 'ADD' }),
      1,
    );

    const runPodCall = { service: 'RuntimeService', method: 'RunPodSandbox', code: 'OK' };
    assert.equal(valueOf(samples, 'berth_grpc_requests_total', runPodCall), 1);
    assert.equal(valueOf(samples, 'berth_grpc_request_duration_seconds_count', runPodCall), 1);
    const unknownStatus = { service: 'RuntimeService', method: 'ContainerStatus', code: 'NOT_FOUND' };
    assert.equal(valueOf(samples, 'berth_grpc_requests_total', unknownStatus), 1);
    const pulls = { service: 'ImageService', method: 'PullImage', code: 'OK' };
    assert.equal(valueOf(samples, 'berth_grpc_requests_total', pulls), 1);

    assert.equal(valueOf(samples, 'berth_pods', { state: 'READY' }), 1);
    assert.equal(valueOf(samples, 'berth_pods', { state: 'NOTREADY' }), 0);
    assert.equal(valueOf(samples, 'berth_containers', { state: 'RUNNING' }), 1);
    assert.equal(valueOf(samples, 'berth_monitors_running'), 1);

    assert.ok(positive(samples, 'berth_image_pull_bytes_total'));
    assert.equal(valueOf(samples, 'berth_image_pull_duration_seconds_count'), 1);
    assert.ok((valueOf(samples, 'berth_recovery_duration_seconds') ?? -1) >= 0);
    assert.ok(positive(samples, 'process_resident_memory_bytes'));
  });

  it('counts a failed pull by the kind of error', async () => {
    const missing = `${registry.host}/berth/metrics:missing`;
    await rejectsWith(daemon.cri.callImage('PullImage', { image: { image: missing } }), status.NOT_FOUND);
    const samples = parseExposition(await (await fetch(`${url}/metrics`)).text());
    const failures = samples.filter((s) => s.name === 'berth_image_pull_failures_total');
    assert.equal(
      failures.reduce((sum, s) => sum + s.value, 0),
      1,
      JSON.stringify(failures),
    );
    assert.equal(valueOf(samples, 'berth_image_pull_duration_seconds_count'), 1);
  });

  it('counts the repairs of a start after a kill -9', async () => {
    await daemon.kill9();
    const mark = daemon.output.length;
    await daemon.start();
    const restarted = parseLog(daemon.output.slice(mark));
    url = metricsUrl(restarted);
    const samples = parseExposition(await (await fetch(`${url}/metrics`)).text());
    const recovered = restarted.find((e) => e.msg === 'state recovered');
    assert.ok(recovered, 'no "state recovered" line');
    const notReady = Array.isArray(recovered.markedNotReady) ? recovered.markedNotReady.length : -1;
    assert.equal(
      valueOf(samples, 'berth_recovery_repairs_total', { kind: 'pod_marked_not_ready' }),
      notReady,
    );
    // Counted anew by this process: the calls before the kill are gone with it.
    assert.equal(
      valueOf(samples, 'berth_grpc_requests_total', {
        service: 'RuntimeService',
        method: 'RunPodSandbox',
        code: 'OK',
      }),
      undefined,
    );
    assert.equal(valueOf(samples, 'berth_pods', { state: 'READY' }), 1);
    assert.equal(valueOf(samples, 'berth_monitors_running'), 1);
  });
});

describe('metrics turned off', { skip: rootSkip, timeout: SUITE_TIMEOUT_MS }, () => {
  let daemon: TestDaemon;

  after(async () => {
    await daemon?.destroy();
  });

  it('serves no metrics when the address is empty', async () => {
    daemon = await TestDaemon.create({ cni: 'none', extraArgs: ['--metrics-address', ''] });
    const log = parseLog(daemon.output);
    assert.ok(log.some((e) => e.msg === 'serving CRI'));
    assert.equal(log.filter((e) => e.msg === 'serving metrics').length, 0);
  });
});

/** Each time berthd's main thread blocked, i.e. waited for its event loop's next event or timer. */
async function mainThreadWakeups(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/task/${pid}/status`, 'utf8');
  return Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(status)?.[1] ?? NaN);
}

/** The URL of the last "serving metrics" line: port 0 picks a new port at every start. */
function metricsUrl(log: LogEntry[]): string {
  const url = log.filter((e) => e.msg === 'serving metrics').at(-1)?.url;
  assert.equal(typeof url, 'string', 'berthd logged no "serving metrics" line');
  return String(url);
}

/** The steps one operation's log line timed (stepsMs), e.g. "pod sandbox ready". */
function stepsOf(log: LogEntry[], msg: string): string[] {
  const entries = log.filter((e) => e.msg === msg);
  assert.equal(entries.length, 1, `expected one "${msg}" line`);
  const steps = entries[0]?.stepsMs;
  assert.ok(typeof steps === 'object' && steps !== null, `"${msg}" has no stepsMs`);
  return Object.keys(steps);
}

function positive(samples: readonly Sample[], name: string): boolean {
  return (valueOf(samples, name) ?? 0) > 0;
}
