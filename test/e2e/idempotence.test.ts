/**
 * Stops and removes are idempotent, as the CRI says and critest's Idempotence specs check: a stop or
 * remove of a pod or container that is gone, or never was, succeeds, while the status calls keep
 * saying NOT_FOUND. Ids berth cannot look up at all (empty, with a slash) stay INVALID_ARGUMENT,
 * naming the field. Then critest's own Idempotence specs, run against the same berthd.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import {
  assertCritestPassed,
  critestRegistryArgs,
  critestSkip,
  pushCritestBusybox,
  runCritest,
} from '../harness/critest.js';
import { TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { pushBusyboxSleeper } from '../harness/images.js';
import {
  containerConfig,
  containerStatus,
  podStatus,
  runPod,
  startContainer,
  type Pod,
} from '../harness/pods.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { registrySkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 900_000;

/** critest's Idempotence specs in cri-tools 1.34 (RemoveImage's included). */
const CRITEST_IDEMPOTENCE_SPECS = 7;

describe('idempotent stops and removes', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let image = '';
  let pod: Pod;
  let configDir = '';

  before(async () => {
    registry = await startRegistry();
    image = await pushBusyboxSleeper(registry, 'berth/idem');
    configDir = await mkdtemp(join(tmpdir(), 'berth-idem-'));
    // critest's images come from the test registry, as the suite's own do.
    daemon = await TestDaemon.create({
      cni: 'bridge',
      extraArgs: await critestRegistryArgs(registry, configDir),
    });
    await daemon.cri.callImage('PullImage', { image: { image } });
    pod = await runPod(daemon.cri, daemon.pod('idem'));
  });

  after(async () => {
    await daemon?.destroy();
    await registry?.stop();
    if (configDir) await rm(configDir, { recursive: true, force: true });
  });

  const stopContainer = (id: string): Promise<unknown> =>
    daemon.cri.call('StopContainer', { container_id: id, timeout: 0 });
  const removeContainer = (id: string): Promise<unknown> =>
    daemon.cri.call('RemoveContainer', { container_id: id });
  const stopPod = (id: string): Promise<unknown> => daemon.cri.call('StopPodSandbox', { pod_sandbox_id: id });
  const removePod = (id: string): Promise<unknown> =>
    daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id });

  it('stops and removes ids that never existed, and still answers their status NOT_FOUND', async () => {
    // critest sends a UUID; kubelet sends ids of berth's own form; a prefix may match nothing.
    for (const id of [randomUUID(), 'f'.repeat(64), 'zz']) {
      await stopContainer(id);
      await removeContainer(id);
      await stopPod(id);
      await removePod(id);
      await rejectsWith(containerStatus(daemon.cri, id), status.NOT_FOUND, id);
      await rejectsWith(podStatus(daemon.cri, id), status.NOT_FOUND, id);
    }
  });

  it('stops a stopped container again, and stops and removes it once it is removed', async () => {
    const id = await startContainer(daemon.cri, pod, containerConfig('twice', image));
    await stopContainer(id);
    await stopContainer(id);
    assert.equal((await containerStatus(daemon.cri, id)).state, 'CONTAINER_EXITED');
    await removeContainer(id);
    await removeContainer(id);
    await stopContainer(id);
    await rejectsWith(containerStatus(daemon.cri, id), status.NOT_FOUND, id);
  });

  it('stops a container by a unique prefix of its id, as it removes one', async () => {
    const id = await startContainer(daemon.cri, pod, containerConfig('prefix', image));
    await stopContainer(id.slice(0, 12));
    assert.equal((await containerStatus(daemon.cri, id)).state, 'CONTAINER_EXITED');
    await removeContainer(id.slice(0, 12));
    await rejectsWith(containerStatus(daemon.cri, id), status.NOT_FOUND, id);
  });

  it('stops and removes a pod twice, and its containers once the pod has taken them', async () => {
    const other = await runPod(daemon.cri, daemon.pod('idem-twice'));
    const id = await startContainer(daemon.cri, other, containerConfig('in-pod', image));
    await stopPod(other.id);
    await stopPod(other.id);
    await removePod(other.id);
    await removePod(other.id);
    await stopPod(other.id);
    await stopContainer(id);
    await removeContainer(id);
    await rejectsWith(podStatus(daemon.cri, other.id), status.NOT_FOUND, other.id);
    await rejectsWith(containerStatus(daemon.cri, id), status.NOT_FOUND, id);
  });

  it('refuses ids it cannot look up, naming the field', async () => {
    for (const bad of ['', 'a/b', 'x'.repeat(200)]) {
      await rejectsWith(stopContainer(bad), status.INVALID_ARGUMENT, 'container_id');
      await rejectsWith(removeContainer(bad), status.INVALID_ARGUMENT, 'container_id');
      await rejectsWith(stopPod(bad), status.INVALID_ARGUMENT, 'pod_sandbox_id');
      await rejectsWith(removePod(bad), status.INVALID_ARGUMENT, 'pod_sandbox_id');
    }
  });

  describe("critest's Idempotence specs", { skip: critestSkip }, () => {
    it('pass', async () => {
      await pushCritestBusybox(registry);
      assertCritestPassed(await runCritest(daemon, 'Idempotence'), CRITEST_IDEMPOTENCE_SPECS);
    });
  });
});
