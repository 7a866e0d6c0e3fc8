/**
 * berth in a kind node, as a systemd service: a node container like kind's (systemd as its init,
 * own mount, PID and cgroup namespaces, berth's root on a bind-mounted host dir), berth installed
 * from deploy/systemd/berth.service. The unit must pass `systemd-analyze verify`, start as
 * Type=notify, run a pod with a container, and restart (by systemctl, and after a kill of its
 * whole cgroup) without touching running containers. Runs with both cgroup drivers; with the
 * systemd one, runc asks the node's systemd for the containers' scopes.
 *
 * Needs root and Debian's systemd; no Docker or kind. Traffic goes to loopback only.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { KindNode } from '../harness/kind-node.js';
import { useBusyboxImage } from '../harness/images.js';
import { KUBELET_POD_LINUX, podConfig } from '../harness/daemon.js';
import {
  containerConfig,
  containerInfo,
  containerStatus,
  runPod,
  startContainer,
  stopAndRemovePod,
  waitContainerState,
  type Pod,
} from '../harness/pods.js';
import { unparentedPodCgroup } from '../harness/cgroup-drivers.js';
import { registrySkip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';

const SYSTEMD = '/lib/systemd/systemd';
const skip = registrySkip || (!existsSync(SYSTEMD) ? `no ${SYSTEMD}` : false);
/** runc's systemd cgroup driver asks systemd for scopes over the system bus. */
const DBUS_DAEMON = '/usr/bin/dbus-daemon';
const SUITE_TIMEOUT_MS = 300_000;
const MiB = 1024 * 1024;
/** Writes a numbered line every 100 ms. */
const LOGGER = ['sh', '-c', 'i=0; while true; do echo "line $i"; i=$((i+1)); sleep 0.1; done'];
const LOG_DIR = '/var/log/pods/kind_logger';

const SETUPS = [
  { config: 'defaults', cgroupDriver: 'cgroupfs', title: 'installed with its defaults (cgroupfs driver)' },
  { config: 'kind', cgroupDriver: 'systemd', title: 'configured as deploy/kind ships it (systemd driver)' },
] as const;

for (const { config, cgroupDriver, title } of SETUPS) {
  describe(
    `berth as a systemd service in a kind node, ${title}`,
    {
      skip: skip || (cgroupDriver === 'systemd' && !existsSync(DBUS_DAEMON) ? `no ${DBUS_DAEMON}` : false),
      timeout: SUITE_TIMEOUT_MS,
    },
    () => {
      const imageRef = useBusyboxImage('berth/kind-node');
      let node: KindNode | undefined;
      let pod: Pod | undefined;
      let logger = '';

      const theNode = (): KindNode => {
        assert.ok(node, 'node not booted');
        return node;
      };

      before(async () => {
        node = await KindNode.boot({ config });
      });

      after(async () => {
        await node?.destroy();
      });

      test('the unit passes systemd-analyze verify where it is installed', async () => {
        const { stdout, stderr } = await theNode().exec([
          'systemd-analyze',
          'verify',
          '/etc/systemd/system/berth.service',
        ]);
        // verify exits 0 on a misspelt value too, only saying so: the unit's own lines must be silent.
        const complaints = `${stdout}${stderr}`.split('\n').filter((line) => line.includes('berth.service'));
        assert.deepEqual(complaints, []);
      });

      test('systemd starts berth as a notify service that serves CRI', async () => {
        const n = theNode();
        assert.equal(await n.unitProperty('berth.service', 'Type'), 'notify');
        assert.equal(await n.unitProperty('berth.service', 'SubState'), 'running');
        const version = await n.cri.call<{ runtime_name: string }>('Version', {});
        assert.equal(version.runtime_name, 'berth');
        const status = await n.cri.call<{ status: { conditions: { type: string; status: boolean }[] } }>(
          'Status',
          {},
        );
        for (const condition of status.status.conditions)
          assert.ok(condition.status, `${condition.type} is false`);
      });

      test('a pod with a container runs in the node, its root on the bind-mounted dir', async () => {
        const n = theNode();
        await n.cri.callImage('PullImage', { image: { image: imageRef() } });
        pod = await runPod(
          n.cri,
          podConfig('logger', {
            log_directory: LOG_DIR,
            ...(cgroupDriver === 'systemd'
              ? { linux: { ...KUBELET_POD_LINUX, cgroup_parent: 'kind.slice' } }
              : {}),
          }),
        );
        logger = await startContainer(n.cri, pod, containerConfig('logger', imageRef(), { command: LOGGER }));
        await waitContainerState(n.cri, logger, 'CONTAINER_RUNNING');
        assert.ok(
          existsSync(`${n.hostRootDir}/containers/${logger}`),
          'the container is not under berth root',
        );
        await waitFor(async () => (await logLines(n)) > 3, 20_000, { what: 'log lines' });
        const pid = (await containerInfo(n.cri, logger)).pid;
        const cgroups = (await n.exec(['cat', `/proc/${pid}/cgroup`])).stdout;
        if (cgroupDriver === 'systemd')
          assert.match(cgroups, /:name=systemd:\/kind\.slice\/berth-[0-9a-f]{64}\.scope$/m);
        else assert.doesNotMatch(cgroups, /\.scope$/m);
      });

      test('systemctl restart berth leaves the container, its log and its monitor running', async () => {
        const n = theNode();
        const pid = (await containerInfo(n.cri, logger)).pid;
        const mainPid = await n.unitProperty('berth.service', 'MainPID');
        await n.systemctl('restart', 'berth.service');
        await n.waitActive('berth.service');
        assert.notEqual(await n.unitProperty('berth.service', 'MainPID'), mainPid);
        n.reconnect();
        const status = await containerStatus(n.cri, logger);
        assert.equal(status.state, 'CONTAINER_RUNNING');
        assert.equal((await containerInfo(n.cri, logger)).pid, pid);
        await assertLogGrows(n);
      });

      test('a kill of every process in berth cgroup: systemd restarts it, containers run on, exits are recorded', async () => {
        const n = theNode();
        const pid = (await containerInfo(n.cri, logger)).pid;
        const mainPid = await n.unitProperty('berth.service', 'MainPID');
        await n.systemctl('kill', '--kill-who=all', '--signal=SIGKILL', 'berth.service');
        await waitFor(
          async () => {
            const now = await n.unitProperty('berth.service', 'MainPID').catch(() => '0');
            return (
              now !== '0' &&
              now !== mainPid &&
              (await n.unitProperty('berth.service', 'ActiveState')) === 'active'
            );
          },
          60_000,
          { pollMs: 250, what: 'berth restarted by systemd' },
        );
        assert.equal(await n.unitProperty('berth.service', 'NRestarts'), '1');
        n.reconnect();
        assert.equal((await containerInfo(n.cri, logger)).pid, pid);
        await assertLogGrows(n);
        await n.exec(['kill', '-KILL', String(pid)]);
        const exited = await waitContainerState(n.cri, logger, 'CONTAINER_EXITED');
        assert.equal(exited.exit_code, 137);
      });

      // Pod-level resources on the node's own driver and cgroup version: on v1 with systemd, the
      // slice's shares are those asked (given as CPUShares=, not as a weight systemd converts back).
      test("a pod's own cgroup gets the shares and memory limit it asks for", async () => {
        const n = theNode();
        const version = (await n.exec(['stat', '-fc', '%T', '/sys/fs/cgroup'])).stdout.trim();
        const sized = await runPod(
          n.cri,
          podConfig('sized', {
            linux: {
              ...KUBELET_POD_LINUX,
              resources: {
                memory_limit_in_bytes: String(64 * MiB),
                cpu_period: '100000',
                cpu_quota: '50000',
                cpu_shares: '612',
              },
            },
          }),
        );
        try {
          const path = unparentedPodCgroup(cgroupDriver, sized.id);
          const read = async (file: string) => (await n.exec(['cat', file])).stdout.trim();
          if (version === 'cgroup2fs') {
            assert.equal(await read(`/sys/fs/cgroup${path}/memory.max`), String(64 * MiB));
          } else {
            assert.equal(await read(`/sys/fs/cgroup/cpu${path}/cpu.shares`), '612');
            assert.equal(await read(`/sys/fs/cgroup/cpu${path}/cpu.cfs_quota_us`), '50000');
            assert.equal(await read(`/sys/fs/cgroup/memory${path}/memory.limit_in_bytes`), String(64 * MiB));
          }
        } finally {
          await stopAndRemovePod(n.cri, sized.id);
        }
      });

      test('removing the pod leaves nothing in the node', async () => {
        const n = theNode();
        assert.ok(pod);
        await stopAndRemovePod(n.cri, pod.id);
        assert.equal((await n.exec(['ls', '-A', '/var/run/netns'])).stdout.trim(), '');
        assert.equal((await n.exec(['runc', '--root', '/run/berth/runc', 'list', '-q'])).stdout.trim(), '');
        const monitors = await n.exec(['pgrep', '-x', 'conmon']).then(
          (r) => r.stdout.trim(),
          () => '',
        );
        assert.equal(monitors, '');
        assert.equal((await n.exec(['ls', '-A', '/var/lib/berth/containers'])).stdout.trim(), '');
      });
    },
  );
}

async function logLines(node: KindNode): Promise<number> {
  const { stdout } = await node.exec(['cat', `${LOG_DIR}/logger/0.log`]);
  return stdout.split('\n').filter(Boolean).length;
}

async function assertLogGrows(node: KindNode): Promise<void> {
  const before = await logLines(node);
  await waitFor(async () => (await logLines(node)) > before, 10_000, { what: `log beyond ${before} lines` });
}
