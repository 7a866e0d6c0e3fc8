/**
 * Pods and containers nested in cgroups as kubelet nests them, under each cgroup driver: a
 * burstable pod's cgroup parent (`/kubepods/burstable/pod<uid>`, or the slice
 * `kubepods-burstable-pod<uid>.slice` with systemd), the infra and the containers below it. On
 * cgroup v2 no process may sit in a cgroup that has children (the kernel's no-internal-process
 * rule, which also keeps a controller from being enabled below): every process berth starts
 * (infra, containers, their monitors) and berthd itself must be in a leaf. Removing the pod leaves
 * no cgroup, scope or slice that berth made; the pod's own cgroup is kubelet's, as on a node.
 * Needs root. Traffic goes to loopback only.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  DRIVERS,
  V2_ONLY,
  cgroupOfPid,
  childCgroups,
  containerCgroup,
  processesInCgroup,
  scopesLeft,
  unparentedCgroup,
  unparentedPodCgroup,
  useDriverDaemon,
} from '../harness/cgroup-drivers.js';
import { CGROUP_V2, hierarchiesHolding } from '../harness/cgroups.js';
import { KUBELET_POD_LINUX } from '../harness/daemon.js';
import {
  containerConfig,
  containerInfo,
  podStatus,
  runPod,
  startContainer,
  stopAndRemovePod,
} from '../harness/pods.js';
import { BOUND_SCALE } from '../harness/bounds.js';

const SUITE_TIMEOUT_MS = 240_000 * BOUND_SCALE;

for (const { driver, skip } of DRIVERS) {
  describe(`cgroup nesting, ${driver} driver`, { skip, timeout: SUITE_TIMEOUT_MS }, () => {
    const { daemon, imageRef, pod } = useDriverDaemon(driver, `berth/cgroup-nesting-${driver}`);

    test('infra and containers sit below the pod cgroup kubelet names, and go with the pod', async () => {
      const d = daemon();
      assert.ok(d);
      const config = d.pod('nested', {
        metadata: { name: 'nested', namespace: 'berth-test', uid: pod.uid, attempt: 0 },
        linux: { ...KUBELET_POD_LINUX, cgroup_parent: pod.cgroupParent },
      });
      const sandbox = await runPod(d.cri, config);
      const ids = await Promise.all(
        ['one', 'two'].map((name) => startContainer(d.cri, sandbox, containerConfig(name, imageRef()))),
      );
      const infraPid = (await podStatus(d.cri, sandbox.id)).info.pid;
      assert.equal(await cgroupOfPid(infraPid), containerCgroup(driver, pod.path, sandbox.id));
      const pids = [infraPid];
      for (const id of ids) {
        const { pid } = await containerInfo(d.cri, id);
        assert.equal(await cgroupOfPid(pid), containerCgroup(driver, pod.path, id));
        pids.push(pid);
      }
      if (CGROUP_V2) {
        // kubelet's cgroups above the containers hold none of their processes.
        for (const inner of [...pod.ancestors, pod.path]) {
          assert.deepEqual(await processesInCgroup(inner), [], `processes in the inner cgroup ${inner}`);
        }
        // runc runs the infra by itself; each container has its conmon.
        const monitors = await d.conmonPids();
        assert.equal(monitors.length, ids.length, 'a monitor for each container');
        assert.ok(d.proc?.pid !== undefined);
        for (const pid of [...pids, ...monitors, d.proc.pid]) await assertInLeaf(pid);
      }

      await stopAndRemovePod(d.cri, sandbox.id);
      assert.deepEqual(await childCgroups(pod.path), [], 'cgroups left in the pod cgroup');
      if (driver === 'systemd') {
        // Only the scopes: the pod's slice is kubelet's, which removes it after the pod.
        assert.deepEqual(await scopesLeft([sandbox.id, ...ids]), [], 'scopes left behind');
      }
    });

    test('a pod without a cgroup parent gets a cgroup of its own, its infra and containers in it', async () => {
      const d = daemon();
      assert.ok(d);
      const sandbox = await runPod(d.cri, d.pod('unparented'));
      const id = await startContainer(d.cri, sandbox, containerConfig('one', imageRef()));
      const infraPid = (await podStatus(d.cri, sandbox.id)).info.pid;
      assert.equal(await cgroupOfPid(infraPid), unparentedCgroup(driver, sandbox.id, sandbox.id));
      const { pid } = await containerInfo(d.cri, id);
      assert.equal(await cgroupOfPid(pid), unparentedCgroup(driver, sandbox.id, id));
      if (CGROUP_V2) {
        const podCgroup = unparentedPodCgroup(driver, sandbox.id);
        assert.deepEqual(await processesInCgroup(podCgroup), [], `processes in the pod cgroup ${podCgroup}`);
      }
      if (CGROUP_V2) for (const p of [infraPid, pid]) await assertInLeaf(p);

      await stopAndRemovePod(d.cri, sandbox.id);
      for (const gone of [id, sandbox.id]) {
        assert.deepEqual(await childCgroups(unparentedCgroup(driver, sandbox.id, gone)), []);
      }
      assert.deepEqual(
        await hierarchiesHolding(unparentedPodCgroup(driver, sandbox.id)),
        [],
        'pod cgroup left',
      );
      if (driver === 'systemd') {
        assert.deepEqual(await scopesLeft([sandbox.id, id]), [], 'scopes left behind');
      }
    });

    test('on cgroup v2 the monitors cgroup holds only monitors, in a leaf', { skip: V2_ONLY }, async () => {
      const d = daemon();
      assert.ok(d);
      const sandbox = await runPod(d.cri, d.pod('monitored'));
      await startContainer(d.cri, sandbox, containerConfig('one', imageRef()));
      const monitors = await d.conmonPids();
      assert.ok(monitors.length > 0);
      const expected = driver === 'systemd' ? '/berth-monitors.slice' : '/berth-monitors';
      for (const pid of monitors) assert.equal(await cgroupOfPid(pid), expected);
      assert.deepEqual(await childCgroups(expected), [], 'cgroups below the monitors cgroup');
      await stopAndRemovePod(d.cri, sandbox.id);
    });
  });
}

/** v2's rule: a process's cgroup has no cgroup below it. */
async function assertInLeaf(pid: number): Promise<void> {
  const path = await cgroupOfPid(pid);
  assert.deepEqual(await childCgroups(path), [], `process ${pid} is in ${path}, which has cgroups below it`);
}
