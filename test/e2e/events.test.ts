/**
 * GetContainerEvents end to end, as kubelet's evented PLEG uses it: a real berthd, real pods and
 * containers (busybox from a docker-registry on 127.0.0.1) and gRPC clients of their own. Checks
 * the events of a pod's whole life in order and what each carries, subscribers that read and one
 * that never does, exits that happened while berthd was down, and `crictl events`. Needs root.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import type { ContainerEventResponse__Output as WireEvent } from '../../src/cri/generated/runtime/v1/ContainerEventResponse.js';
import type { ContainerStatus__Output as WireContainerStatus } from '../../src/cri/generated/runtime/v1/ContainerStatus.js';
import type { PodSandboxStatus__Output as WirePodStatus } from '../../src/cri/generated/runtime/v1/PodSandboxStatus.js';
import { ANSWER_BOUND_MS } from '../harness/bounds.js';
import { SHARED_PID_LINUX, useDaemon, type TestDaemon } from '../harness/daemon.js';
import { useBusyboxImage } from '../harness/images.js';
import { EventStream } from '../harness/events.js';
import { parseLog } from '../harness/log.js';
import {
  containerConfig,
  containerStatus,
  createContainer,
  podStatus,
  runPod,
  startContainer,
  stopAndRemovePod,
  waitContainerState,
  type Pod,
} from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';
import { CRICTL } from '../harness/streaming.js';
import { waitFor } from '../harness/wait.js';
import { UnreadStream } from '../harness/unread-stream.js';

const SUITE_TIMEOUT_MS = 600_000;
/** src/daemon.ts: events one subscriber may have waiting. */
const EVENT_BUFFER = 1000;
/** Containers whose own exit races their stops. */
const RACE_ROUNDS = 12;

let imageRef: () => string;

describe('GetContainerEvents', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  imageRef = useBusyboxImage('berth/events');

  const daemon = useDaemon({}, async (d) => {
    await d.cri.callImage('PullImage', { image: { image: imageRef() } });
  });

  test("a pod's whole life, in order, each event with the pod's full status", async (t) => {
    const d = daemon();
    const stream = new EventStream(d.socket);
    t.after(() => stream.close());
    const since = BigInt(Date.now()) * 1_000_000n;

    const pod = await runPod(d.cri, d.pod('life'));
    const sleeper = await startContainer(d.cri, pod, containerConfig('sleeper', imageRef()));
    const quitter = await startContainer(
      d.cri,
      pod,
      containerConfig('quitter', imageRef(), { command: ['/bin/sh', '-c', 'sleep 0.5; exit 3'] }),
    );
    await waitContainerState(d.cri, quitter, 'CONTAINER_EXITED');
    const stopped = await stream.waitFor((e) => is(e, quitter, 'STOPPED'));
    // The same objects the status rpcs return, for the container and for the pod.
    assert.deepEqual(containerIn(stopped, quitter), await containerStatus(d.cri, quitter));
    assert.deepEqual(stopped.pod_sandbox_status, await sandboxStatus(d, pod.id));
    await d.cri.call('RemoveContainer', { container_id: quitter });
    await d.cri.call('StopPodSandbox', { pod_sandbox_id: pod.id });
    await d.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id });
    await stream.waitFor((e) => is(e, pod.id, 'DELETED'));

    const events = stream.received.filter((e) => e.pod_sandbox_status?.id === pod.id);
    assert.deepEqual(
      events.map((e) => `${name(e, pod, { sleeper, quitter })} ${e.container_event_type}`),
      [
        'pod CONTAINER_CREATED_EVENT',
        'pod CONTAINER_STARTED_EVENT',
        'sleeper CONTAINER_CREATED_EVENT',
        'sleeper CONTAINER_STARTED_EVENT',
        'quitter CONTAINER_CREATED_EVENT',
        'quitter CONTAINER_STARTED_EVENT',
        'quitter CONTAINER_STOPPED_EVENT',
        'quitter CONTAINER_DELETED_EVENT',
        // StopPodSandbox stops what still runs first.
        'sleeper CONTAINER_STOPPED_EVENT',
        'pod CONTAINER_STOPPED_EVENT',
        // RemovePodSandbox removes its containers first.
        'sleeper CONTAINER_DELETED_EVENT',
        'pod CONTAINER_DELETED_EVENT',
      ],
    );
    let previous = since;
    for (const event of events) {
      const at = BigInt(event.created_at);
      assert.ok(at > previous, `created_at ${at} (ns) does not follow ${previous}`);
      previous = at;
      // kubelet drops an event whose sandbox status or metadata is missing.
      assert.deepEqual(event.pod_sandbox_status?.metadata, {
        name: 'life',
        namespace: 'berth-test',
        uid: 'uid-life',
        attempt: 0,
      });
    }
    assert.ok(previous < BigInt(Date.now()) * 1_000_000n, 'created_at is in the future');

    const [created, started] = events;
    assert.equal(created?.pod_sandbox_status?.state, 'SANDBOX_NOTREADY');
    assert.equal(started?.pod_sandbox_status?.state, 'SANDBOX_READY');
    assert.match(started?.pod_sandbox_status?.network?.ip ?? '', /^\d+\.\d+\.\d+\.\d+$/);

    // Every event lists every container the pod has at that moment, as ContainerStatus has them.
    const listed = (e: WireEvent): string[] =>
      e.containers_statuses.map((c) => `${c.metadata?.name} ${c.state}`).sort();
    const byStep = events.map(listed);
    assert.deepEqual(byStep, [
      [],
      [],
      ['sleeper CONTAINER_CREATED'],
      ['sleeper CONTAINER_RUNNING'],
      ['quitter CONTAINER_CREATED', 'sleeper CONTAINER_RUNNING'],
      ['quitter CONTAINER_RUNNING', 'sleeper CONTAINER_RUNNING'],
      ['quitter CONTAINER_EXITED', 'sleeper CONTAINER_RUNNING'],
      ['sleeper CONTAINER_RUNNING'],
      ['sleeper CONTAINER_EXITED'],
      ['sleeper CONTAINER_EXITED'],
      [],
      [],
    ]);
    assert.equal(containerIn(stopped, quitter)?.exit_code, 3);
    assert.equal(events.at(-3)?.pod_sandbox_status?.state, 'SANDBOX_NOTREADY');
  });

  test("PodSandboxStatus carries the pod's containers and a timestamp, as an event does", async (t) => {
    // The kubelet's evented PLEG builds a pod's status from this answer alone once it has a
    // timestamp: an empty list kept every new pod ContainerCreating under a kubelet 1.36.
    const d = daemon();
    const pod = await runPod(d.cri, d.pod('status-containers'));
    t.after(() => stopAndRemovePod(d.cri, pod.id).catch(() => {}));
    const running = await startContainer(d.cri, pod, containerConfig('running', imageRef()));
    const created = await createContainer(d.cri, pod, containerConfig('created', imageRef()));
    const before = BigInt(Date.now()) * 1_000_000n;
    const res = await d.cri.call<{
      timestamp: string;
      containers_statuses: { id: string; state: string; metadata: { name: string } }[];
    }>('PodSandboxStatus', { pod_sandbox_id: pod.id });
    assert.ok(BigInt(res.timestamp) >= before - 1_000_000_000n, `timestamp ${res.timestamp}`);
    assert.deepEqual(res.containers_statuses.map((c) => [c.metadata.name, c.id, c.state]).sort(), [
      ['created', created, 'CONTAINER_CREATED'],
      ['running', running, 'CONTAINER_RUNNING'],
    ]);
  });

  test('two subscribers, one never reading: it is dropped with RESOURCE_EXHAUSTED, the other gets every event and rpcs stay fast', async (t) => {
    const d = daemon();
    const reader = new EventStream(d.socket);
    const stuck = new UnreadStream(d.socket);
    t.after(() => {
      reader.close();
      stuck.close();
    });
    // Big events fill the never-reading client's transport after a few; the rest wait at berthd.
    const pod = await runPod(d.cri, d.pod('flood', { annotations: { big: 'x'.repeat(64 * 1024) } }));
    t.after(() => d.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id }));

    const outputBefore = d.output.length;
    const dropped = (): boolean => d.output.includes('event subscriber dropped', outputBefore);
    const containers: string[] = [];
    const slowest = { ms: 0 };
    const timed = async <T>(call: () => Promise<T>): Promise<T> => {
      const started = Date.now();
      const value = await call();
      slowest.ms = Math.max(slowest.ms, Date.now() - started);
      return value;
    };
    // Each container makes four events: created, started, stopped (it exits at once), deleted.
    const lifecycle = async (n: number): Promise<void> => {
      const id = await timed(() =>
        createContainer(d.cri, pod, containerConfig(`c${n}`, imageRef(), { command: ['/bin/true'] })),
      );
      containers.push(id);
      await timed(() => d.cri.call('StartContainer', { container_id: id }));
      await waitContainerState(d.cri, id, 'CONTAINER_EXITED');
      await timed(() => d.cri.call('RemoveContainer', { container_id: id }));
    };
    const WORKERS = 8;
    let next = 0;
    // Past the buffer and the few events the transports hold, then a round more.
    const enough = (): boolean => dropped() && containers.length >= (EVENT_BUFFER + 100) / 4;
    await Promise.all(
      Array.from({ length: WORKERS }, async () => {
        while (!enough() && next < 600) await lifecycle(next++);
      }),
    );
    assert.ok(dropped(), 'the subscriber that never reads was not dropped');
    // Every create, start and remove answered while one subscriber held nothing. One that waited
    // for it would wait for good: the events that get it dropped come from the calls that wait.
    // How fast they answer depends on the machine, so the bound is the hang bound.
    t.diagnostic(`slowest create, start or remove: ${slowest.ms} ms`);
    assert.ok(slowest.ms < ANSWER_BOUND_MS, `an rpc took ${slowest.ms} ms`);
    await d.cri.call('Version', {}, { deadlineMs: ANSWER_BOUND_MS });

    // The reading subscriber got all four events of every container, each container's in order.
    // Workers finish out of order: the last container listed need not be the last one removed.
    await assertOneLifeEach(reader, containers, 60_000);

    // The other one, once it reads, gets what its transport held, then the error.
    const end = await stuck.readToEnd();
    assert.equal(end.status, status.RESOURCE_EXHAUSTED, end.message);
    assert.match(end.message, /fell 1000 events behind/);
    assert.ok(end.messages > 0 && end.messages < 100, `${end.messages} events reached it`);

    // A new subscription works at once, and the first one is still served.
    const again = new EventStream(d.socket);
    t.after(() => again.close());
    const probe = await startContainer(d.cri, pod, containerConfig('probe', imageRef()));
    await again.waitFor((e) => is(e, probe, 'STARTED'));
    await reader.waitFor((e) => is(e, probe, 'STARTED'));
  });

  test('an exit racing its stops is recorded once: one STOPPED event and one exit logged per container', async (t) => {
    const d = daemon();
    const stream = new EventStream(d.socket);
    t.after(() => stream.close());
    const pod = await runPod(d.cri, d.pod('race'));
    t.after(() => removePod(d, pod));
    const logFrom = d.output.length;
    const ids: string[] = [];
    // Fixed, not random: each round meets the stops at another point of its exit (before, during,
    // after), and a second stop with no grace comes with the graceful one, as kubelet's shortened
    // grace sends it.
    for (let round = 0; round < RACE_ROUNDS; round++) {
      const delay = ['', 'sleep 0.02; ', 'sleep 0.05; '][round % 3] ?? '';
      const id = await startContainer(
        d.cri,
        pod,
        containerConfig(`race${round}`, imageRef(), { command: ['/bin/sh', '-c', `${delay}exit 3`] }),
      );
      ids.push(id);
      if (round % 4 === 3) {
        // RemoveContainer of a running container kills it as a stop with no grace does. A stop
        // that looks only once the removal is over finds no container, which is no error either.
        await Promise.all([
          d.cri.call('StopContainer', { container_id: id, timeout: 1 }),
          d.cri.call('RemoveContainer', { container_id: id }),
        ]);
        continue;
      }
      await Promise.all([
        d.cri.call('StopContainer', { container_id: id, timeout: 1 + (round % 2) }),
        d.cri.call('StopContainer', { container_id: id, timeout: 0 }),
      ]);
      const st = await containerStatus(d.cri, id);
      assert.equal(st.state, 'CONTAINER_EXITED', `round ${round}`);
      // The code is the process's own, as conmon saw it: 3, or 137/143 when a stop's signal came
      // first; once, on a loaded machine, 2 (which berth never makes up: conmon wrote it). What
      // must never show is 255, the code berth gives an exit it lost.
      assert.ok(st.exit_code >= 0 && st.exit_code !== 255, `round ${round}: exit code ${st.exit_code}`);
      assert.ok(!(await d.runcContainers()).includes(id), `round ${round}: Stop returned before the release`);
      await d.cri.call('RemoveContainer', { container_id: id });
    }

    // An exit recorded twice would come before its container's removal: the removal waits for it.
    await assertOneLifeEach(stream, ids);
    const exits = parseLog(d.output.slice(logFrom)).filter((e) => e.msg === 'container exited');
    assert.deepEqual(exits.map((e) => e.container).sort(), [...ids].sort());
  });

  test('exits while berthd was down reach the first subscriber after the restart', async (t) => {
    const d = daemon();
    const pod = await runPod(d.cri, d.pod('restart'));
    t.after(() => removePod(d, pod));
    // A shared pid namespace: the pod runs an infra process, which this test kills.
    const other = await runPod(d.cri, d.pod('infra-dies', { linux: SHARED_PID_LINUX }));
    t.after(() => removePod(d, other));
    const infraPid = (await podStatus(d.cri, other.id)).info.pid;
    assert.ok(infraPid > 0, 'the pod has an infra process');
    const id = await startContainer(
      d.cri,
      pod,
      containerConfig('short', imageRef(), { command: ['/bin/sh', '-c', 'sleep 3; exit 7'] }),
    );
    await d.kill9();
    process.kill(infraPid, 'SIGKILL');
    // conmon outlives berthd, records the exit, and goes.
    await waitFor(async () => (await d.conmonPids(id)).length === 0, 30_000, { what: 'the exit' });
    await d.start();

    // No rpc in between: the event was kept for whoever subscribes first.
    const stream = new EventStream(d.socket);
    t.after(() => stream.close());
    const stopped = await stream.waitFor((e) => is(e, id, 'STOPPED'));
    assert.equal(stopped.pod_sandbox_status?.id, pod.id);
    assert.equal(stopped.pod_sandbox_status?.metadata?.name, 'restart');
    const status = containerIn(stopped, id);
    assert.equal(status?.state, 'CONTAINER_EXITED');
    assert.equal(status?.exit_code, 7);
    assert.deepEqual(status, await containerStatus(d.cri, id));

    // A pod whose infra died meanwhile is found stopped.
    const podStopped = await stream.waitFor((e) => is(e, other.id, 'STOPPED'));
    assert.equal(podStopped.pod_sandbox_status?.state, 'SANDBOX_NOTREADY');
    assert.equal(podStopped.pod_sandbox_status?.metadata?.name, 'infra-dies');
  });

  test('crictl events shows them', { skip: CRICTL ? false : 'no crictl' }, async (t) => {
    const d = daemon();
    assert.ok(CRICTL);
    const crictl = spawn(CRICTL, ['--runtime-endpoint', `unix://${d.socket}`, 'events', '-o', 'json'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    crictl.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    crictl.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const outputBefore = d.output.length;
    t.after(() => crictl.kill());
    await waitFor(async () => d.output.includes('"rpc":"GetContainerEvents"', outputBefore), 20_000, {
      what: 'crictl subscribed',
    });
    const pod = await runPod(d.cri, d.pod('crictl'));
    t.after(() => removePod(d, pod));
    const started = new RegExp(
      `"containerId":\\s*"${pod.id}",\\s*"containerEventType":\\s*"CONTAINER_STARTED_EVENT"`,
    );
    await waitFor(async () => started.test(output), 20_000, {
      what: `crictl events output (so far: ${output.slice(0, 500)})`,
    });
    assert.match(
      output,
      new RegExp(`"containerId":\\s*"${pod.id}",\\s*"containerEventType":\\s*"CONTAINER_CREATED_EVENT"`),
    );
    assert.match(output, /"name":\s*"crictl"/);
  });
});

/**
 * Once each of `ids` is removed: `stream` got its created, started, stopped and deleted events,
 * each once and in that order.
 */
async function assertOneLifeEach(stream: EventStream, ids: string[], timeoutMs?: number): Promise<void> {
  for (const id of ids) await stream.waitFor((e) => is(e, id, 'DELETED'), timeoutMs);
  for (const id of ids) {
    assert.deepEqual(
      stream.received.filter((e) => e.container_id === id).map((e) => e.container_event_type),
      [
        'CONTAINER_CREATED_EVENT',
        'CONTAINER_STARTED_EVENT',
        'CONTAINER_STOPPED_EVENT',
        'CONTAINER_DELETED_EVENT',
      ],
      `events of ${id}`,
    );
  }
}

function is(event: WireEvent, id: string, change: 'CREATED' | 'STARTED' | 'STOPPED' | 'DELETED'): boolean {
  return event.container_id === id && event.container_event_type === `CONTAINER_${change}_EVENT`;
}

function containerIn(event: WireEvent, id: string): WireContainerStatus | undefined {
  return event.containers_statuses.find((c) => c.id === id);
}

function name(event: WireEvent, pod: Pod, containers: Record<string, string>): string {
  if (event.container_id === pod.id) return 'pod';
  return Object.entries(containers).find(([, id]) => id === event.container_id)?.[0] ?? event.container_id;
}

async function sandboxStatus(d: TestDaemon, id: string): Promise<WirePodStatus | null> {
  const res = await d.cri.call<{ status: WirePodStatus | null }>('PodSandboxStatus', { pod_sandbox_id: id });
  return res.status;
}

async function removePod(d: TestDaemon, pod: Pod): Promise<void> {
  if (!d.client) return;
  await d.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id }).catch(() => {});
}
