/**
 * berthd as a systemd unit of Type=notify expects it, without systemd: a real berthd over its CRI
 * socket tells a datagram socket standing in for the service manager when it is ready and when it
 * stops, and on SIGTERM it takes no new call, lets those running finish (for at most its
 * shutdown timeout) and exits, leaving containers running for the next berthd to find. Images come
 * from a docker-registry on 127.0.0.1. Needs root.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { DgramSocket } from 'node-unix-socket';
import { isRunning, processesMentioning } from '../../src/process/index.js';
import { CriClient } from '../harness/client.js';
import { TestDaemon, useDaemon } from '../harness/daemon.js';
import { rejectsGrpc } from '../harness/grpc.js';
import { useBusyboxImage } from '../harness/images.js';
import {
  containerConfig,
  containerInfo,
  containerStatus,
  execSync,
  runPod,
  startContainer,
  stopAndRemovePod,
  type Pod,
} from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 300_000;

/** The test image (busybox); pushed once for the whole file. */
let imageRef: () => string;

describe('berthd under a service manager', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  imageRef = useBusyboxImage('berth/shutdown');

  test('notifies READY once it serves, STOPPING on SIGTERM; nothing it starts sees NOTIFY_SOCKET', async (t) => {
    const manager = await serviceManager(t);
    const d = await TestDaemon.create({ env: { NOTIFY_SOCKET: manager.socket } });
    t.after(() => d.destroy());

    await waitFor(async () => manager.received.some((m) => m.fields.get('READY') === '1'), 30_000, {
      what: 'READY=1',
    });
    const ready = manager.received.find((m) => m.fields.get('READY') === '1');
    assert.ok(ready);
    assert.equal(ready.fields.get('MAINPID'), String(d.proc?.pid));
    assert.equal(ready.fields.get('STATUS'), `serving CRI on ${d.socket}`);
    assert.ok(ready.versionOnReady, 'a manager that reads READY calls the socket it names');
    await ready.versionOnReady;

    await pullImage(d);
    const pod = await runPod(d.cri, d.pod('notify'));
    const id = await startContainer(d.cri, pod, containerConfig('sleeper', imageRef()));
    const { pid } = await containerInfo(d.cri, id);
    const [conmon] = await d.conmonPids(id);
    assert.ok(conmon, 'the container has a conmon');
    for (const [what, proc] of [
      ['container process', pid],
      ['conmon', conmon],
    ] as const) {
      const environ = (await readFile(`/proc/${proc}/environ`, 'utf8')).split('\0');
      assert.ok(!environ.some((entry) => entry.startsWith('NOTIFY_SOCKET=')), `${what} has NOTIFY_SOCKET`);
    }

    const exit = await d.signalAndWait('SIGTERM');
    assert.deepEqual(exit, { code: 0, signal: null });
    await waitFor(async () => manager.received.some((m) => m.fields.has('STOPPING')), 10_000, {
      what: 'STOPPING=1',
    });
    const kinds = manager.received.map((m) =>
      m.fields.has('READY') ? 'READY' : m.fields.has('STOPPING') ? 'STOPPING' : 'other',
    );
    assert.deepEqual(kinds, ['READY', 'STOPPING']);
    const stopping = manager.received[1];
    assert.equal(stopping?.fields.get('STOPPING'), '1');
    assert.ok(stopping?.fields.get('STATUS'), 'STOPPING comes with a STATUS');

    await d.start();
    await stopAndRemovePod(d.cri, pod.id);
  });

  describe('graceful stop', () => {
    const daemon = useDaemon({}, pullImage);

    test('a call in flight finishes, new calls are refused, berthd exits 0, containers keep running', async (t) => {
      const d = daemon();
      const { pod, id, pid } = await runSleeper(t, d, 'graceful');
      const tag = uniqueTag();
      const exec = execSync(d.cri, id, ['sh', '-c', `sleep 3; echo finished ${tag}`], 30);
      await execStarted(tag);

      const outputBefore = d.output.length;
      const exited = d.signalAndWait('SIGTERM');
      await waitFor(async () => d.output.includes('shutting down', outputBefore), 10_000);
      // Both a client already connected and a new one: the server takes no new call.
      await rejectsGrpc(d.cri.call('Version'));
      const late = new CriClient(d.socket);
      try {
        await rejectsGrpc(late.call('Version'));
      } finally {
        late.close();
      }

      const res = await exec;
      assert.equal(res.exit_code, 0, res.stderr.toString());
      assert.equal(res.stdout.toString(), `finished ${tag}\n`);
      assert.deepEqual(await exited, { code: 0, signal: null });
      assert.ok(await isRunning(pid), 'the container still runs');

      await d.start();
      await assertFound(d, pod, id, pid);
    });

    test('a second SIGTERM cancels the calls in flight at once', async (t) => {
      const d = daemon();
      const { pod, id, pid } = await runSleeper(t, d, 'forced');
      const tag = uniqueTag();
      const exec = execSync(d.cri, id, ['sh', '-c', `sleep 60; echo ${tag}`], 120);
      await execStarted(tag);

      const outputBefore = d.output.length;
      const exited = d.signalAndWait('SIGTERM');
      await waitFor(async () => d.output.includes('shutting down', outputBefore), 10_000);
      const proc = d.proc;
      assert.ok(proc);
      proc.kill('SIGTERM');
      await rejectsGrpc(exec);
      // Cut short, not killed: berthd exits by itself, and says the stop was not clean.
      const exit = await exited;
      assert.deepEqual(exit, { code: 1, signal: null });
      assert.ok(d.output.includes('second stop signal', outputBefore), d.output.slice(outputBefore));
      assert.ok(await isRunning(pid), 'the container still runs');

      await d.start();
      await assertFound(d, pod, id, pid);
      await waitFor(async () => (await processesMentioning(tag)).length === 0, 10_000, {
        what: 'the cancelled exec killed',
      });
    });
  });

  describe('bounded stop', () => {
    const daemon = useDaemon({ extraArgs: ['--shutdown-timeout', '2s'] }, pullImage);

    test('calls still running at the shutdown timeout are cancelled, their commands killed', async (t) => {
      const d = daemon();
      const { pod, id, pid } = await runSleeper(t, d, 'bounded');
      const tag = uniqueTag();
      // Awaited once berthd has exited; rejected before that.
      const execFailed = rejectsGrpc(execSync(d.cri, id, ['sh', '-c', `sleep 60; echo ${tag}`], 120));
      await execStarted(tag);

      const outputBefore = d.output.length;
      const signalled = Date.now();
      const exit = await d.signalAndWait('SIGTERM');
      const stopMs = Date.now() - signalled;
      assert.deepEqual(exit, { code: 0, signal: null });
      // The exec would run for a minute: berthd did not wait for it.
      assert.ok(stopMs < 40_000, `berthd took ${stopMs} ms to stop`);
      assert.ok(d.output.includes('cancelled the calls still running', outputBefore));
      await execFailed;
      assert.ok(await isRunning(pid), 'the container still runs');
      assert.deepEqual(
        await processesMentioning(tag),
        [],
        'the cancelled exec was killed before berthd exited',
      );

      await d.start();
      await assertFound(d, pod, id, pid);
    });
  });
});

interface Notification {
  fields: Map<string, string>;
  /** For READY: a Version call on the socket its STATUS names, made as the message arrived. */
  versionOnReady?: Promise<unknown>;
}

/** A datagram socket standing in for systemd's notify socket, and what it received, in order. */
async function serviceManager(t: TestContext): Promise<{ socket: string; received: Notification[] }> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-notify-'));
  const socket = join(dir, 'notify');
  const listener = new DgramSocket();
  listener.bind(socket);
  const received: Notification[] = [];
  const clients: CriClient[] = [];
  listener.on('data', (data: Buffer) => {
    const fields = new Map(
      data
        .toString()
        .split('\n')
        .map((line): [string, string] => [
          line.slice(0, line.indexOf('=')),
          line.slice(line.indexOf('=') + 1),
        ]),
    );
    const served = /^serving CRI on (.+)$/.exec(fields.get('STATUS') ?? '')?.[1];
    if (fields.get('READY') !== '1' || served === undefined) {
      received.push({ fields });
      return;
    }
    const client = new CriClient(served);
    clients.push(client);
    const versionOnReady = client.call('Version', {});
    // Awaited by the test; a failure must not surface as an unhandled rejection before that.
    versionOnReady.catch(() => {});
    received.push({ fields, versionOnReady });
  });
  t.after(async () => {
    listener.close();
    for (const client of clients) client.close();
    await rm(dir, { recursive: true, force: true });
  });
  return { socket, received };
}

async function pullImage(d: TestDaemon): Promise<void> {
  await d.cri.callImage('PullImage', { image: { image: imageRef() } });
}

/** A pod with a container running `sleep 3600`; removed after the test if the test did not. */
async function runSleeper(
  t: TestContext,
  d: TestDaemon,
  name: string,
): Promise<{ pod: Pod; id: string; pid: number }> {
  const pod = await runPod(d.cri, d.pod(name));
  t.after(async () => {
    if (!d.client) await d.start();
    await stopAndRemovePod(d.cri, pod.id).catch(() => {});
  });
  const id = await startContainer(
    d.cri,
    pod,
    containerConfig('sleeper', imageRef(), { command: ['sleep', '3600'] }),
  );
  const { pid } = await containerInfo(d.cri, id);
  return { pod, id, pid };
}

function uniqueTag(): string {
  return `berth-shutdown-${randomBytes(4).toString('hex')}`;
}

/** Waits until the exec whose command line holds `tag` runs in the container. */
async function execStarted(tag: string): Promise<void> {
  await waitFor(async () => (await processesMentioning(tag)).length > 0, 15_000, { what: 'exec started' });
}

/** What a berthd started after the stop reports: the pod ready, the same container process running. */
async function assertFound(d: TestDaemon, pod: Pod, id: string, pid: number): Promise<void> {
  const res = await d.cri.call<{ status: { state: string } }>('PodSandboxStatus', { pod_sandbox_id: pod.id });
  assert.equal(res.status.state, 'SANDBOX_READY');
  assert.equal((await containerStatus(d.cri, id)).state, 'CONTAINER_RUNNING');
  assert.equal((await containerInfo(d.cri, id)).pid, pid);
}
