/**
 * Pod-level resources (KEP-2837): a pod kubelet gives no cgroup_parent gets a cgroup of its own,
 * sized by its resources plus its overhead, with its infra and containers inside it;
 * UpdatePodSandboxResources resizes it; a pod with a cgroup_parent has kubelet's cgroup, which
 * berth leaves alone and only records what was asked. Under each cgroup driver the host can run.
 * The paths are written out here rather than taken from src/cgroups, so that a wrong one shows.
 * Needs root. Traffic goes to loopback only.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import {
  DRIVERS,
  cgroupOfPid,
  containerCgroup,
  unparentedPodCgroup,
  useDriverDaemon,
} from '../harness/cgroup-drivers.js';
import { CGROUP_V2, hierarchiesHolding } from '../harness/cgroups.js';
import { databasePath, selectRows } from '../harness/database.js';
import { KUBELET_POD_LINUX, PAUSE_BEFORE_STEP_ENV, TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import {
  containerConfig,
  containerInfo,
  containerStatus,
  podStatus,
  runPod,
  startContainer,
  stopAndRemovePod,
} from '../harness/pods.js';
import { BOUND_SCALE } from '../harness/bounds.js';
import { hostProves } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 240_000 * BOUND_SCALE;
const CGROUP_ROOT = '/sys/fs/cgroup';
const MiB = 1024 * 1024;

/** What a cgroup is limited to, read from the kernel's files: 'max' for no limit. */
interface ReadLimits {
  memory: string;
  quota: string;
  period: string;
}

/** v1's "no memory limit" is the largest page-aligned count; anything that large is none. */
const V1_UNLIMITED = 2n ** 62n;

async function limitsOf(path: string): Promise<ReadLimits> {
  const read = async (...parts: string[]): Promise<string> =>
    (await readFile(join(CGROUP_ROOT, ...parts), 'utf8')).trim();
  if (CGROUP_V2) {
    const [quota = '', period = ''] = (await read(path, 'cpu.max')).split(' ');
    return { memory: await read(path, 'memory.max'), quota, period };
  }
  const memory = await read('memory', path, 'memory.limit_in_bytes');
  const quota = await read('cpu', path, 'cpu.cfs_quota_us');
  return {
    memory: BigInt(memory) >= V1_UNLIMITED ? 'max' : memory,
    quota: quota === '-1' ? 'max' : quota,
    period: await read('cpu', path, 'cpu.cfs_period_us'),
  };
}

interface PodInfo {
  podCgroup: string;
  cgroupParent: string;
  resources: {
    resources: { memoryLimitBytes: number; cpuQuota: number } | null;
    overhead: { memoryLimitBytes: number } | null;
  } | null;
}

async function podInfo(daemon: TestDaemon, id: string): Promise<PodInfo> {
  return (await podStatus(daemon.cri, id)).info as unknown as PodInfo;
}

function resources(memoryMiB: number, quota: number, shares = 0): Record<string, string> {
  return {
    memory_limit_in_bytes: String(memoryMiB * MiB),
    cpu_period: '100000',
    cpu_quota: String(quota),
    cpu_shares: String(shares),
  };
}

for (const { driver, skip } of DRIVERS) {
  describe(`pod-level resources, ${driver} driver`, { skip, timeout: SUITE_TIMEOUT_MS }, () => {
    const { daemon: d, imageRef, pod: kubelet } = useDriverDaemon(driver, `berth/pod-resources-${driver}`);

    test('a pod gets a cgroup of its own sized by resources plus overhead, bounding its containers, resized by UpdatePodSandboxResources, kept over a restart', async () => {
      const config = d().pod('sized', {
        linux: {
          ...KUBELET_POD_LINUX,
          resources: resources(128, 50_000, 512),
          overhead: resources(16, 10_000, 100),
        },
      });
      const pod = await runPod(d().cri, config);
      const path = unparentedPodCgroup(driver, pod.id);
      assert.deepEqual(await limitsOf(path), { memory: String(144 * MiB), quota: '60000', period: '100000' });
      const info = await podInfo(d(), pod.id);
      assert.equal(info.cgroupParent, '');
      assert.notEqual(info.podCgroup, '');
      assert.equal(info.resources?.resources?.memoryLimitBytes, 128 * MiB);
      assert.equal(info.resources?.overhead?.memoryLimitBytes, 16 * MiB);

      // The infra and the container sit below the pod's cgroup, so its limits bound them.
      const infraPid = (await podStatus(d().cri, pod.id)).info.pid;
      assert.equal(await cgroupOfPid(infraPid), containerCgroup(driver, path, pod.id));
      const cid = await startContainer(d().cri, pod, containerConfig('one', imageRef()));
      const { pid } = await containerInfo(d().cri, cid);
      assert.equal(await cgroupOfPid(pid), containerCgroup(driver, path, cid));
      // The pod's weight is the one its runtime gives a container of the same shares (runc changed
      // its formula in 1.3.2), so that the pod weighs against its neighbours as its containers do.
      if (CGROUP_V2) {
        await d().cri.call('UpdateContainerResources', {
          container_id: cid,
          linux: resources(64, 20_000, 612),
        });
        const weight = async (cgroup: string) =>
          (await readFile(join(CGROUP_ROOT, cgroup, 'cpu.weight'), 'utf8')).trim();
        assert.equal(await weight(path), await weight(containerCgroup(driver, path, cid)));
      }

      // A container's resize within the pod's limits, twice: the same process, running on, reporting
      // what was asked.
      const started = await containerStatus(d().cri, cid);
      for (let i = 0; i < 2; i++) {
        await d().cri.call('UpdateContainerResources', { container_id: cid, linux: resources(32, 20_000) });
        const now = await containerStatus(d().cri, cid);
        assert.equal(now.state, 'CONTAINER_RUNNING');
        assert.equal(now.started_at, started.started_at);
        assert.equal(now.resources?.linux?.memory_limit_in_bytes, String(32 * MiB));
        assert.equal(now.resources?.linux?.cpu_quota, '20000');
        assert.equal((await containerInfo(d().cri, cid)).pid, pid);
      }

      // A resize that lifts the cpu limit and raises the memory one.
      await d().cri.call('UpdatePodSandboxResources', {
        pod_sandbox_id: pod.id,
        resources: resources(256, 0),
        overhead: resources(16, 10_000),
      });
      const resized = { memory: String(272 * MiB), quota: 'max', period: '100000' };
      assert.deepEqual(await limitsOf(path), resized);
      assert.equal((await podInfo(d(), pod.id)).resources?.resources?.memoryLimitBytes, 256 * MiB);
      // The same again changes nothing and fails nothing.
      await d().cri.call('UpdatePodSandboxResources', {
        pod_sandbox_id: pod.id,
        resources: resources(256, 0),
        overhead: resources(16, 10_000),
      });
      assert.deepEqual(await limitsOf(path), resized);

      await d().restart();
      const kept = await podInfo(d(), pod.id);
      assert.equal(kept.resources?.resources?.memoryLimitBytes, 256 * MiB);
      assert.equal(kept.resources?.resources?.cpuQuota, 0);
      assert.deepEqual(await limitsOf(path), resized);

      await stopAndRemovePod(d().cri, pod.id);
      assert.deepEqual(await hierarchiesHolding(path), [], `pod cgroup ${path} left`);
      if (driver === 'systemd') {
        const dropIns = `/run/systemd/system.control/berth-pod_${pod.id}.slice.d`;
        assert.equal(existsSync(dropIns), false, `${dropIns} left`);
      }
    });

    test("a pod with a cgroup_parent: berth sets nothing on kubelet's cgroup, and records what was asked", async () => {
      const config = d().pod('parented', {
        metadata: { name: 'parented', namespace: 'berth-test', uid: kubelet.uid, attempt: 0 },
        linux: {
          ...KUBELET_POD_LINUX,
          cgroup_parent: kubelet.cgroupParent,
          resources: resources(64, 20_000),
        },
      });
      const pod = await runPod(d().cri, config);
      assert.deepEqual(await hierarchiesHolding(unparentedPodCgroup(driver, pod.id)), []);
      // The infra's runc made kubelet's cgroup here (kubelet would have): no limit in it.
      assert.deepEqual(await limitsOf(kubelet.path), { memory: 'max', quota: 'max', period: '100000' });
      await d().cri.call('UpdatePodSandboxResources', {
        pod_sandbox_id: pod.id,
        resources: resources(96, 0),
      });
      assert.deepEqual(await limitsOf(kubelet.path), { memory: 'max', quota: 'max', period: '100000' });
      const info = await podInfo(d(), pod.id);
      assert.equal(info.podCgroup, '');
      assert.equal(info.resources?.resources?.memoryLimitBytes, 96 * MiB);
      await stopAndRemovePod(d().cri, pod.id);
    });

    const refusals = 'bad values are INVALID_ARGUMENT naming the field; an unknown pod is NOT_FOUND';
    test(refusals, { skip: hostProves }, async () => {
      const run = (linux: Record<string, unknown>, name: string): Promise<unknown> =>
        d().cri.call('RunPodSandbox', {
          config: d().pod(name, { linux: { ...KUBELET_POD_LINUX, ...linux } }),
        });
      await rejectsWith(
        run({ resources: { memory_limit_in_bytes: '-1' } }, 'negative'),
        status.INVALID_ARGUMENT,
        'config.linux.resources.memory_limit_in_bytes',
      );
      await rejectsWith(
        run({ overhead: { cpu_quota: '50000' } }, 'no-period'),
        status.INVALID_ARGUMENT,
        'config.linux.overhead.cpu_period',
      );
      if (!CGROUP_V2) {
        await rejectsWith(
          run({ resources: { unified: { 'memory.high': '1000000' } } }, 'unified'),
          status.INVALID_ARGUMENT,
          'config.linux.resources.unified',
        );
      }
      await rejectsWith(
        d().cri.call('UpdatePodSandboxResources', {
          pod_sandbox_id: 'f'.repeat(64),
          resources: resources(64, 0),
        }),
        status.NOT_FOUND,
      );
      const pod = await runPod(d().cri, d().pod('checked'));
      await rejectsWith(
        d().cri.call('UpdatePodSandboxResources', { pod_sandbox_id: pod.id, resources: { cpu_shares: '1' } }),
        status.INVALID_ARGUMENT,
        'resources.cpu_shares',
      );
      // Nothing was run for the refused ones.
      const rows = selectRows<{ name: string }>(d().rootDir, 'SELECT name FROM sandboxes');
      assert.deepEqual(
        rows.map((r) => r.name),
        ['checked'],
      );
      await stopAndRemovePod(d().cri, pod.id);
    });

    test(
      'unified entries are written on cgroup v2',
      { skip: CGROUP_V2 ? false : 'needs cgroup v2' },
      async () => {
        const pod = await runPod(
          d().cri,
          d().pod('unified', {
            linux: { ...KUBELET_POD_LINUX, resources: { unified: { 'pids.max': '321' } } },
          }),
        );
        const path = unparentedPodCgroup(driver, pod.id);
        assert.equal((await readFile(join(CGROUP_ROOT, path, 'pids.max'), 'utf8')).trim(), '321');
        await stopAndRemovePod(d().cri, pod.id);
        assert.deepEqual(await hierarchiesHolding(path), []);
      },
    );

    // Removing a pod cgroup that a crash left is the driver's: on the host for cgroupfs, in the VM
    // for systemd's slices.
    const crash = 'a kill -9 after the pod cgroup was made: start-up removes it with the pod';
    test(crash, { skip: driver === 'cgroupfs' && hostProves }, async () => {
      const step = 'infra-create';
      await d().restart({ [PAUSE_BEFORE_STEP_ENV]: step });
      const config = d().pod('crashed', { linux: { ...KUBELET_POD_LINUX, resources: resources(64, 0) } });
      const pending = d()
        .cri.call('RunPodSandbox', { config })
        .catch((err: unknown) => err);
      const marker = await d().pausedBefore(step);
      const [row] = selectRows<{ id: string }>(
        d().rootDir,
        "SELECT id FROM sandboxes WHERE name = 'crashed'",
      );
      assert.ok(row, 'no journal row');
      const path = unparentedPodCgroup(driver, row.id);
      assert.notDeepEqual(await hierarchiesHolding(path), [], 'the pod cgroup was not made before the infra');
      await d().kill9();
      assert.ok((await pending) instanceof Error, 'the paused RunPodSandbox succeeded');
      await rm(marker);
      await d().start();
      assert.deepEqual(await hierarchiesHolding(path), [], `pod cgroup ${path} left after start-up`);
      assert.equal(existsSync(databasePath(d().rootDir)), true);
      assert.deepEqual(selectRows(d().rootDir, "SELECT id FROM sandboxes WHERE name = 'crashed'"), []);
    });
  });
}
