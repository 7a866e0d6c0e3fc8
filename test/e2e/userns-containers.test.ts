/**
 * Containers of a pod of its own user namespace (kubelet's hostUsers: false), end to end through
 * the socket: they join the pod's namespace, their rootfs is the image's layers idmapped with it,
 * and exec, attach, port-forward, stats, restart and kill -9 of berthd work as for any pod. Real
 * berthd, runc, conmon, CNI bridge; needs root and a host whose probes let berth run such pods.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { rootfsPath } from '../../src/imagestore/rootfs.js';
import { podConfig, useDaemon, type TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { useBusyboxImage } from '../harness/images.js';
import { mountPointsBelow } from '../harness/mounts.js';
import {
  containerConfig,
  execSync,
  execText,
  runPod,
  startContainer,
  stopAndRemovePod,
  type Pod,
} from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 600_000;
const LENGTH = 65536;
const hex = (): string => randomBytes(4).toString('hex');

interface Mapping {
  container_id: number;
  host_id: number;
  length: number;
}
const mapping = (hostId: number): Mapping[] => [{ container_id: 0, host_id: hostId, length: LENGTH }];

/** kubelet's options for a hostUsers: false pod, which it copies into each container's config. */
function usernsOptions(hostId: number, pid = 'CONTAINER'): Record<string, unknown> {
  return {
    network: 'POD',
    pid,
    ipc: 'POD',
    userns_options: { mode: 'POD', uids: mapping(hostId), gids: mapping(hostId) },
  };
}

function usernsPodConfig(name: string, hostId: number, pid = 'CONTAINER'): Record<string, unknown> {
  return podConfig(name, { linux: { security_context: { namespace_options: usernsOptions(hostId, pid) } } });
}

function usernsContainer(name: string, image: string, hostId: number, extra: Record<string, unknown> = {}) {
  return containerConfig(name, image, {
    linux: { security_context: { namespace_options: usernsOptions(hostId) } },
    ...extra,
  });
}

function mapLines(text: string): number[][] {
  return text
    .trim()
    .split('\n')
    .map((l) => l.trim().split(/\s+/).map(Number));
}

describe('containers of a pod of its own user namespace', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const image = useBusyboxImage('berth/userns');
  const daemon = useDaemon({}, async (d) => {
    await d.cri.callImage('PullImage', { image: { image: image() } });
  });

  async function usernsPod(d: TestDaemon, hostId: number): Promise<{ pod: Pod; ctr: string }> {
    const pod = await runPod(d.cri, usernsPodConfig(`userns-${hex()}`, hostId));
    const ctr = await startContainer(d.cri, pod, usernsContainer('c', image(), hostId));
    return { pod, ctr };
  }

  test('the runtime handler reports user namespaces, and not for host-network pods', async () => {
    const res = await daemon().cri.call<{
      features: { user_namespaces: boolean; user_namespaces_host_network?: boolean } | null;
      runtime_handlers: { name: string; features: { user_namespaces: boolean } }[];
    }>('Status', {});
    assert.equal(
      res.runtime_handlers[0]?.features.user_namespaces,
      true,
      JSON.stringify(res.runtime_handlers),
    );
    const hostNetwork = podConfig(`userns-hostnet-${hex()}`, {
      linux: {
        security_context: { namespace_options: { ...usernsOptions(65536 * 20), network: 'NODE' } },
      },
    });
    await rejectsWith(
      daemon().cri.call('RunPodSandbox', { config: hostNetwork }),
      status.INVALID_ARGUMENT,
      /namespace_options\.network: NODE with a user namespace of its own/,
    );
  });

  test("a container runs in the pod's user namespace over its image's files, idmapped", async () => {
    const d = daemon();
    const hostId = 65536 * 21;
    const { pod, ctr } = await usernsPod(d, hostId);
    try {
      assert.deepEqual(mapLines(await execText(d.cri, ctr, ['cat', '/proc/self/uid_map'])), [
        [0, hostId, LENGTH],
      ]);
      assert.deepEqual(mapLines(await execText(d.cri, ctr, ['cat', '/proc/self/gid_map'])), [
        [0, hostId, LENGTH],
      ]);
      assert.equal((await execText(d.cri, ctr, ['id', '-u'])).trim(), '0');
      // The image's files keep their owners inside; the host sees them as the mapped ids.
      assert.equal((await execText(d.cri, ctr, ['stat', '-c', '%u:%g', '/etc/passwd'])).trim(), '0:0');
      const rootfs = rootfsPath(ctr, d.rootDir);
      assert.equal((await stat(join(rootfs, 'etc', 'passwd'))).uid, hostId);
      // Root inside writes where image root could; on the host, the file is the mapped root's.
      await execText(d.cri, ctr, [
        'sh',
        '-c',
        'echo changed >> /etc/passwd && touch /made && chown 1000:1000 /made',
      ]);
      const upper = join(d.rootDir, 'containers', ctr, 'upper');
      assert.equal((await stat(join(upper, 'etc', 'passwd'))).uid, hostId);
      const made = await stat(join(upper, 'made'));
      assert.deepEqual([made.uid, made.gid], [hostId + 1000, hostId + 1000]);
      // From the host, its processes run as the mapped ids.
      const [pid] = (await execText(d.cri, ctr, ['sh', '-c', 'echo $$'])).trim().split('\n');
      assert.ok(pid);
      // The pod's files, its shm and the kernel filesystems a container needs.
      const script = [
        'cat /etc/hosts /etc/resolv.conf /etc/hostname > /dev/null',
        'echo shm > /dev/shm/f && cat /dev/shm/f',
        'test -r /proc/self/status',
        'ls /sys/class/net | grep -q eth0',
        'mount | grep -q " /dev/mqueue "',
        'mount | grep -q " /sys/fs/cgroup"',
        'echo ok',
      ].join(' && ');
      assert.equal(await execText(d.cri, ctr, ['sh', '-c', script]), 'shm\nok\n');
      // It cannot write a host root's file: the pod's hosts file is one.
      const denied = await execSync(d.cri, ctr, ['sh', '-c', 'echo x >> /etc/hosts']);
      assert.notEqual(denied.exit_code, 0);
      assert.doesNotMatch(await readFile(join(d.rootDir, 'sandboxes', pod.id, 'hosts'), 'utf8'), /^x$/m);
    } finally {
      await stopAndRemovePod(d.cri, pod.id);
    }
    assert.deepEqual(await mountPointsBelow(join(d.rootDir, 'containers')), []);
  });
});
