/**
 * A pod's whole life on this node, under each cgroup driver the node can run: a pod placed in a
 * kubelet-style cgroup parent, a container pulled, started, exec'd into and logging, then stopped
 * and removed with its pod, and nothing of either left on the host (netns, mounts, runc records,
 * monitors, the container's cgroup). It is the first file the VM suites run on cgroup v2, so a
 * node where the basics fail says so here rather than in a detail of a longer file.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { CgroupDriver } from '../../src/cgroups/driver.js';
import { TestDaemon } from '../harness/daemon.js';
import { hostCgroups, removeCgroupTree } from '../harness/cgroups.js';
import { pushBusyboxSleeper } from '../harness/images.js';
import {
  containerConfig,
  containerInfo,
  createContainer,
  execText,
  runPod,
  stopAndRemovePod,
  waitContainerState,
} from '../harness/pods.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { hostProves, registrySkip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';
import { BOUND_SCALE } from '../harness/bounds.js';

const CGROUP_ROOT = '/sys/fs/cgroup';
/** runc's --systemd-cgroup asks systemd for the scopes, so only a host running systemd has it. */
const SYSTEMD = existsSync('/run/systemd/system');

/** kubelet's parent for a best-effort pod, as each driver names it. */
function kubeletParent(driver: CgroupDriver, uid: string): string {
  const flat = uid.replaceAll('-', '_');
  return driver === 'systemd'
    ? `kubepods-besteffort-pod${flat}.slice`
    : `/berth-smoke-kubepods/besteffort/pod${uid}`;
}

for (const driver of ['cgroupfs', 'systemd'] as const) {
  // In the VM the systemd driver is the node's; cgroup-nesting, resources and pod-resources run
  // the cgroupfs driver on v2 there too, and the host runs it as its node.
  const skip =
    registrySkip || (driver === 'systemd' ? !SYSTEMD && 'this host does not run systemd' : hostProves);
  describe(
    `a pod's life on this node (cgroup driver ${driver})`,
    { skip, timeout: 600_000 * BOUND_SCALE },
    () => {
      let registry: TestRegistry;
      let daemon: TestDaemon;
      let image: string;

      before(async () => {
        registry = await startRegistry();
        image = await pushBusyboxSleeper(registry, 'berth/smoke');
        daemon = await TestDaemon.create({ cni: 'bridge', extraArgs: ['--cgroup-driver', driver] });
        await daemon.cri.callImage('PullImage', { image: { image } });
      });

      after(async () => {
        await daemon?.destroy();
        await registry?.stop();
        await removeCgroupTree(driver === 'systemd' ? 'kubepods.slice' : 'berth-smoke-kubepods');
      });

      it('runs, execs, logs, stops and removes, leaving nothing behind', async () => {
        const uid = `smoke-${driver}-0001`;
        const parent = kubeletParent(driver, uid);
        const pod = await runPod(
          daemon.cri,
          daemon.pod(`smoke-${driver}`, {
            metadata: { name: `smoke-${driver}`, namespace: 'berth-test', uid, attempt: 0 },
            linux: {
              cgroup_parent: parent,
              security_context: { namespace_options: { network: 'POD', pid: 'CONTAINER', ipc: 'POD' } },
            },
          }),
        );
        const id = await createContainer(
          daemon.cri,
          pod,
          containerConfig('main', image, { command: ['/bin/sh', '-c', 'echo started; exec sleep 1000'] }),
        );
        await daemon.cri.call('StartContainer', { container_id: id });
        await waitContainerState(daemon.cri, id, 'CONTAINER_RUNNING');

        const info = await containerInfo(daemon.cri, id);
        const cgroups = await hostCgroups(driver);
        const podDir = join(CGROUP_ROOT, cgroups.podPath(parent));
        const placed = (await readFile(`/proc/${info.pid}/cgroup`, 'utf8')).trim();
        assert.ok(
          placed.includes(cgroups.podPath(parent)),
          `the container's cgroup is inside its pod's: ${placed}`,
        );

        assert.equal(
          (await execText(daemon.cri, id, ['cat', '/proc/1/cmdline'])).replaceAll('\0', ' ').trim(),
          'sleep 1000',
        );
        const logPath = join(String(pod.config.log_directory), 'main', '0.log');
        await waitFor(
          async () => (await readFile(logPath, 'utf8').catch(() => '')).includes('stdout F started'),
          30_000,
          { what: `"started" in ${logPath}` },
        );

        await daemon.cri.call('StopContainer', { container_id: id, timeout: 0 });
        await waitContainerState(daemon.cri, id, 'CONTAINER_EXITED');
        await stopAndRemovePod(daemon.cri, pod.id);

        assert.deepEqual(await daemon.netnsFiles(), [], 'no netns pin left');
        assert.deepEqual(await daemon.runcContainers(), [], 'no runc container left');
        assert.deepEqual(await daemon.conmonPids(), [], 'no conmon left');
        assert.deepEqual(await daemon.podMounts(), [], 'no mount of the pod left');
        const leftCgroups = existsSync(podDir)
          ? (await readFile(join(podDir, 'cgroup.procs'), 'utf8').catch(() => '')).trim()
          : '';
        assert.equal(leftCgroups, '', `no process left in the pod's cgroup ${podDir}`);
        const own = join(CGROUP_ROOT, cgroups.relativePath(cgroups.cgroupsPath(parent, id)));
        assert.equal(existsSync(own), false, `the container's cgroup ${own} is gone`);
      });
    },
  );
}
