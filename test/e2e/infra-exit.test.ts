/**
 * An infra process that dies without a StopPodSandbox (kill -9 from the host): berth notices while
 * it runs and at start-up, the pod turns NOTREADY with the reason (so kubelet repairs it), its
 * STOPPED event goes out, no container joins the namespaces of whatever has the pid next, and
 * Stop and Remove still clean up everything. The infra is known by its pid and start time: a pid
 * whose start time differs is a dead infra. Real berthd, runc, conmon, CNI bridge; needs root and
 * Debian's docker-registry. Traffic only inside the pods.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import type { ContainerEventResponse__Output as WireEvent } from '../../src/cri/generated/runtime/v1/ContainerEventResponse.js';
import { isRunning, startTimeOf } from '../../src/process/index.js';
import { BOUND_SCALE } from '../harness/bounds.js';
import { hierarchiesHolding, hostCgroups } from '../harness/cgroups.js';
import { changeRows } from '../harness/database.js';
import { SHARED_PID_LINUX, useDaemon, type TestDaemon } from '../harness/daemon.js';
import { EventStream } from '../harness/events.js';
import { rejectsWith } from '../harness/grpc.js';
import { useBusyboxImage } from '../harness/images.js';
import {
  containerConfig,
  createContainer,
  podStatus,
  runPod,
  startContainer,
  stopAndRemovePod,
  waitContainerState,
  type Pod,
} from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 600_000 * BOUND_SCALE;
/**
 * Room for berthd's monitor check (every 5 s) to come round on a busy machine: a bound for a
 * pod that never turns NOTREADY, not a measure of how soon it does (waitFor scales it).
 */
const NOTICE_BOUND_MS = 30_000;

interface WireSandboxStatus {
  state: string;
}

let imageRef: () => string;

describe('an infra process that dies', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  imageRef = useBusyboxImage('berth/infra-exit');
  const daemon = useDaemon({}, async (d) => {
    await d.cri.callImage('PullImage', { image: { image: imageRef() } });
  });

  /** A pod that shares its pid namespace, as kubelet runs shareProcessNamespace: it has an infra. */
  async function sharedPidPod(
    d: TestDaemon,
    name: string,
  ): Promise<{ pod: Pod; pid: number; startTime: number }> {
    const pod = await runPod(d.cri, d.pod(name, { linux: SHARED_PID_LINUX }));
    const { info } = await podStatus(d.cri, pod.id);
    assert.ok(info.pid > 0, 'the pod runs an infra');
    assert.equal(info.infraStartTime, await startTimeOf(info.pid), "the infra's start time is recorded");
    assert.equal(info.reason, '');
    return { pod, pid: info.pid, startTime: info.infraStartTime };
  }

  function sharedPidContainer(name: string): Record<string, unknown> {
    return containerConfig(name, imageRef(), { linux: SHARED_PID_LINUX });
  }

  async function killInfra(pid: number): Promise<void> {
    process.kill(pid, 'SIGKILL');
    await waitFor(async () => !(await isRunning(pid)), 10_000, { what: `infra ${pid} gone` });
  }

  async function listedState(d: TestDaemon, id: string): Promise<string | undefined> {
    const { items } = await d.cri.call<{ items: { id: string; state: string }[] }>('ListPodSandbox', {});
    return items.find((item) => item.id === id)?.state;
  }

  /** CreateContainer is refused, naming the infra that died; nothing is left of the attempt. */
  async function assertNoContainerJoins(d: TestDaemon, pod: Pod, pid: number): Promise<void> {
    await rejectsWith(
      createContainer(d.cri, pod, sharedPidContainer(`late-${pid}`)),
      status.FAILED_PRECONDITION,
      new RegExp(`pod sandbox ${pod.id} is not ready: its infra process \\(pid ${pid}\\) is gone`),
    );
  }

  /** Stop and Remove as kubelet would, then nothing of the pod on the host. */
  async function assertRemovedCleanly(d: TestDaemon, pod: Pod, containers: string[]): Promise<void> {
    await stopAndRemovePod(d.cri, pod.id);
    const runc = await d.runcContainers();
    for (const id of [pod.id, ...containers]) assert.ok(!runc.includes(id), `runc still has ${id}`);
    assert.deepEqual(
      (await d.netnsFiles()).filter((name) => name.includes(pod.id)),
      [],
      'netns pins',
    );
    assert.deepEqual(
      (await d.podMounts()).filter((path) => path.includes(pod.id)),
      [],
      'mounts',
    );
    assert.ok(!(await d.sandboxDirs()).includes(pod.id), 'the sandbox dir');
    const cgroups = await hostCgroups();
    const podCgroup = cgroups.podPath(cgroups.podCgroupFor(pod.id));
    assert.deepEqual(await hierarchiesHolding(podCgroup), [], `the pod cgroup ${podCgroup}`);
    assert.equal(await listedState(d, pod.id), undefined, 'the pod is still listed');
  }

  test('killed while berthd runs: NOTREADY with the reason, a STOPPED event, no container joins, clean removal', async (t) => {
    const d = daemon();
    const stream = new EventStream(d.socket);
    t.after(() => stream.close());
    const { pod, pid } = await sharedPidPod(d, 'killed-live');
    const sleeper = await startContainer(d.cri, pod, sharedPidContainer('sleeper'));

    await killInfra(pid);
    // ListPodSandbox reads the record only, as kubelet's relist does: berthd's own check must
    // have changed it.
    await waitFor(async () => (await listedState(d, pod.id)) === 'SANDBOX_NOTREADY', NOTICE_BOUND_MS, {
      what: 'the pod listed NOTREADY',
      pollMs: 200,
    });
    const { status: podNow, info } = await podStatus<WireSandboxStatus>(d.cri, pod.id);
    assert.equal(podNow.state, 'SANDBOX_NOTREADY');
    assert.equal(info.pid, 0);
    assert.match(info.reason, new RegExp(`its infra process \\(pid ${pid}\\) is gone while berthd ran`));

    const stopped = await stream.waitFor(
      (e: WireEvent) => e.container_id === pod.id && e.container_event_type === 'CONTAINER_STOPPED_EVENT',
      NOTICE_BOUND_MS * BOUND_SCALE,
    );
    assert.equal(stopped.pod_sandbox_status?.state, 'SANDBOX_NOTREADY');
    // The pid namespace's init is gone, and the kernel killed everything in it.
    await waitContainerState(d.cri, sleeper, 'CONTAINER_EXITED');

    await assertNoContainerJoins(d, pod, pid);
    assert.deepEqual(
      stream.received.filter((e) => e.container_id === pod.id).map((e) => e.container_event_type),
      ['CONTAINER_CREATED_EVENT', 'CONTAINER_STARTED_EVENT', 'CONTAINER_STOPPED_EVENT'],
      'one STOPPED event for the pod',
    );
    await assertRemovedCleanly(d, pod, [sleeper]);
  });

  test('killed while berthd is down: start-up makes the pod NOTREADY with the reason, no container joins, clean removal', async () => {
    const d = daemon();
    const { pod, pid } = await sharedPidPod(d, 'killed-down');
    const sleeper = await startContainer(d.cri, pod, sharedPidContainer('sleeper'));
    await d.kill9();
    await killInfra(pid);
    await d.start();

    const { status: podNow, info } = await podStatus<WireSandboxStatus>(d.cri, pod.id);
    assert.equal(podNow.state, 'SANDBOX_NOTREADY');
    assert.equal(info.pid, 0);
    assert.match(info.reason, new RegExp(`its infra process \\(pid ${pid}\\) is gone when berthd started`));
    await waitContainerState(d.cri, sleeper, 'CONTAINER_EXITED');
    await assertNoContainerJoins(d, pod, pid);
    await assertRemovedCleanly(d, pod, [sleeper]);
  });

  test('at start-up, a process at the pid with another start time is not the infra: the pod is NOTREADY', async () => {
    const d = daemon();
    const { pod, pid, startTime } = await sharedPidPod(d, 'reused-pid');
    await d.kill9();
    // As if the infra had died and the kernel had given its pid to a later process.
    assert.equal(
      changeRows(
        d.rootDir,
        'UPDATE sandboxes SET infra_start_time = ? WHERE id = ?',
        String(startTime - 1),
        pod.id,
      ),
      1,
    );
    await d.start();

    const { status: podNow, info } = await podStatus<WireSandboxStatus>(d.cri, pod.id);
    assert.equal(podNow.state, 'SANDBOX_NOTREADY');
    assert.match(
      info.reason,
      new RegExp(
        `its infra process \\(pid ${pid}\\) is gone when berthd started: that pid is now another process's`,
      ),
    );
    await assertNoContainerJoins(d, pod, pid);
    await assertRemovedCleanly(d, pod, []);
    assert.ok(!(await isRunning({ pid, startTime })), 'the process runc had created is gone with the pod');
  });

  test("a pod stored before berth kept the infra's start time has it read at start-up and stays READY", async () => {
    const d = daemon();
    const { pod, pid, startTime } = await sharedPidPod(d, 'no-start-time');
    await d.kill9();
    assert.equal(changeRows(d.rootDir, 'UPDATE sandboxes SET infra_start_time = 0 WHERE id = ?', pod.id), 1);
    await d.start();

    const { status: podNow, info } = await podStatus<WireSandboxStatus>(d.cri, pod.id);
    assert.equal(podNow.state, 'SANDBOX_READY');
    assert.deepEqual([info.pid, info.infraStartTime], [pid, startTime]);
    const sleeper = await startContainer(d.cri, pod, sharedPidContainer('sleeper'));
    await assertRemovedCleanly(d, pod, [sleeper]);
  });
});
