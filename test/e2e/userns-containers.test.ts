/**
 * Containers of a pod of its own user namespace (kubelet's hostUsers: false), end to end through
 * the socket: they join the pod's namespace, their rootfs is the image's layers idmapped with it,
 * and exec, attach, port-forward, stats, restart and kill -9 of berthd work as for any pod. Real
 * berthd, runc, conmon, CNI bridge; needs root and a host whose probes let berth run such pods.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chmod, chown, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { readFrom } from '../harness/sockets.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { CREATE_STEPS } from '../../src/container/teardown.js';
import { run } from '../../src/exec.js';
import { rootfsPath } from '../../src/imagestore/rootfs.js';
import { processesMentioning } from '../../src/process/index.js';
import { PAUSE_BEFORE_STEP_ENV, podConfig, useDaemon, type TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { useBusyboxImage } from '../harness/images.js';
import { mountPointsBelow } from '../harness/mounts.js';
import {
  containerConfig,
  createContainer,
  execSync,
  execText,
  podStatus,
  runPod,
  USERNS_LENGTH as LENGTH,
  usernsIdMapping as mapping,
  usernsNamespaceOptions as usernsOptions,
  startContainer,
  stopAndRemovePod,
  type Pod,
} from '../harness/pods.js';
import { freePort } from '../harness/registry.js';
import { hostProves, registrySkip as skip } from '../harness/skip.js';
import { crictl, crictlSkip, crictlTty } from '../harness/streaming.js';
import { waitFor } from '../harness/wait.js';
import { BOUND_SCALE } from '../harness/bounds.js';

const SUITE_TIMEOUT_MS = 600_000 * BOUND_SCALE;
const hex = (): string => randomBytes(4).toString('hex');

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

  test('a pod mapping one id runs its root container: devpts takes no unmapped tty group', async () => {
    const d = daemon();
    const one = [{ container_id: 0, host_id: 65536 * 9, length: 1 }];
    const ns = { ...usernsOptions(65536 * 9), userns_options: { mode: 'POD', uids: one, gids: one } };
    const pod = await runPod(
      d.cri,
      podConfig(`one-${hex()}`, { linux: { security_context: { namespace_options: ns } } }),
    );
    const ctr = await startContainer(
      d.cri,
      pod,
      containerConfig('c', image(), { linux: { security_context: { namespace_options: ns } } }),
    );
    const res = await execSync(d.cri, ctr, ['cat', '/proc/self/uid_map']);
    assert.deepEqual(mapLines(res.stdout.toString()), [[0, 65536 * 9, 1]]);
    await stopAndRemovePod(d.cri, pod.id);
  });

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
      // PodSandboxStatus says what the pod has, as kubelet asked for it.
      const st = await podStatus<{ linux: { namespaces: { options: { userns_options: unknown } } } }>(
        d.cri,
        pod.id,
      );
      assert.deepEqual(st.status.linux.namespaces.options.userns_options, {
        mode: 'POD',
        uids: mapping(hostId),
        gids: mapping(hostId),
      });
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

  test('a shared pid namespace: the infra joins the user namespace too', async (t) => {
    const d = daemon();
    // An infra's rootfs is in the root dir; runc cannot lift a noexec there in a user namespace.
    const options = await run('findmnt', ['-n', '-o', 'OPTIONS', '--target', d.rootDir], {
      timeoutMs: 10_000,
    });
    if (options.stdout.trim().split(',').includes('noexec')) {
      t.skip(
        `the root dir ${d.rootDir} is on a noexec filesystem, where an infra cannot run in a user namespace`,
      );
      return;
    }
    const hostId = 65536 * 22;
    const pod = await runPod(d.cri, usernsPodConfig(`userns-infra-${hex()}`, hostId, 'POD'));
    try {
      const ctr = await startContainer(
        d.cri,
        pod,
        containerConfig('c', image(), {
          linux: { security_context: { namespace_options: usernsOptions(hostId, 'POD') } },
        }),
      );
      assert.match(await execText(d.cri, ctr, ['cat', '/proc/1/cmdline']), /catatonit/);
      const sameUserns = await execText(d.cri, ctr, [
        'sh',
        '-c',
        'test "$(readlink /proc/1/ns/user)" = "$(readlink /proc/self/ns/user)" && cat /proc/1/uid_map',
      ]);
      assert.deepEqual(mapLines(sameUserns), [[0, hostId, LENGTH]]);
    } finally {
      await stopAndRemovePod(d.cri, pod.id);
    }
  });

  test('stats, and a restart of berthd keeps the pod serving and taking containers', async () => {
    const d = daemon();
    const hostId = 65536 * 28;
    const { pod, ctr } = await usernsPod(d, hostId);
    try {
      // Stats of the pod and its container, as kubelet reads them.
      const { stats } = await d.cri.call<{ stats: { cpu: unknown; memory: unknown } }>('ContainerStats', {
        container_id: ctr,
      });
      assert.ok(stats.cpu && stats.memory, JSON.stringify(stats));
      const podStats = await d.cri.call<{ stats: { attributes: { id: string } } }>('PodSandboxStats', {
        pod_sandbox_id: pod.id,
      });
      assert.equal(podStats.stats.attributes.id, pod.id);

      // berthd dies and comes back: the container runs on, and the pod takes a new container (the
      // way to the root dir, closed again at start-up, opens again for it).
      await d.kill9();
      await d.start();
      assert.equal(await execText(d.cri, ctr, ['echo', 'alive']), 'alive\n');
      const next = await startContainer(d.cri, pod, usernsContainer('next', image(), hostId));
      assert.deepEqual(mapLines(await execText(d.cri, next, ['cat', '/proc/self/uid_map'])), [
        [0, hostId, LENGTH],
      ]);
    } finally {
      await stopAndRemovePod(d.cri, pod.id);
    }
  });

  test("two pods of disjoint mappings cannot touch each other's files in a volume both mount", async () => {
    const d = daemon();
    const shared = await mkdtemp(join(tmpdir(), 'berth-userns-shared-'));
    try {
      await chmod(shared, 0o1777);
      const mounts = [{ container_path: '/shared', host_path: shared }];
      const [a, b] = [65536 * 23, 65536 * 24];
      const podA = await runPod(d.cri, usernsPodConfig(`userns-a-${hex()}`, a));
      const podB = await runPod(d.cri, usernsPodConfig(`userns-b-${hex()}`, b));
      try {
        const ctrA = await startContainer(d.cri, podA, usernsContainer('a', image(), a, { mounts }));
        const ctrB = await startContainer(d.cri, podB, usernsContainer('b', image(), b, { mounts }));
        await execText(d.cri, ctrA, ['sh', '-c', 'echo secret > /shared/a && chmod 600 /shared/a']);
        // A volume without mappings: its files show the host's ids, unmapped ones as nobody.
        assert.equal((await stat(join(shared, 'a'))).uid, a);
        const read = await execSync(d.cri, ctrB, ['cat', '/shared/a']);
        assert.notEqual(read.exit_code, 0, "pod b read pod a's file");
        const removed = await execSync(d.cri, ctrB, ['rm', '-f', '/shared/a']);
        assert.notEqual(removed.exit_code, 0, "pod b removed pod a's file");
        assert.equal(await readFile(join(shared, 'a'), 'utf8'), 'secret\n');
        assert.equal((await execText(d.cri, ctrB, ['stat', '-c', '%u', '/shared/a'])).trim(), '65534');
      } finally {
        await stopAndRemovePod(d.cri, podA.id);
        await stopAndRemovePod(d.cri, podB.id);
      }
    } finally {
      await rm(shared, { recursive: true, force: true });
    }
  });

  test("volumes as kubelet sends them, with the pod's mappings: files show their on-disk owners inside", async () => {
    const d = daemon();
    const dir = await mkdtemp(join(tmpdir(), 'berth-userns-volume-'));
    const hostId = 65536 * 25;
    try {
      await writeFile(join(dir, 'root-owned'), 'r\n');
      await writeFile(join(dir, 'app-owned'), 'a\n');
      await chown(join(dir, 'app-owned'), 1000, 1000);
      const m = mapping(hostId);
      const mounts = [{ container_path: '/data', host_path: dir, uidMappings: m, gidMappings: m }];
      const pod = await runPod(d.cri, usernsPodConfig(`userns-vol-${hex()}`, hostId));
      try {
        const ctr = await startContainer(d.cri, pod, usernsContainer('v', image(), hostId, { mounts }));
        const owners = await execText(d.cri, ctr, [
          'stat',
          '-c',
          '%n %u:%g',
          '/data/root-owned',
          '/data/app-owned',
        ]);
        assert.equal(owners, '/data/root-owned 0:0\n/data/app-owned 1000:1000\n');
        // The pod's root writes as the volume's root: kubelet's emptyDir and configMap files stay root's.
        await execText(d.cri, ctr, [
          'sh',
          '-c',
          'echo w > /data/written && chown 1000:1000 /data/root-owned',
        ]);
        assert.equal((await stat(join(dir, 'written'))).uid, 0);
        assert.equal((await stat(join(dir, 'root-owned'))).uid, 1000);
      } finally {
        await stopAndRemovePod(d.cri, pod.id);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  const refusal = "a container in one refuses userns_options that are not its pod's, naming the field";
  test(refusal, { skip: hostProves }, async () => {
    const d = daemon();
    const hostId = 65536 * 25;
    const pod = await runPod(d.cri, usernsPodConfig(`userns-check-${hex()}`, hostId));
    const plain = await runPod(d.cri, podConfig(`plain-${hex()}`));
    try {
      const other = usernsContainer('c', image(), hostId + LENGTH);
      await rejectsWith(
        createContainer(d.cri, pod, other),
        status.INVALID_ARGUMENT,
        /userns_options\.uids: 0:\d+:65536 are not the mappings of pod sandbox/,
      );
      await rejectsWith(
        createContainer(d.cri, plain, usernsContainer('c', image(), hostId)),
        status.INVALID_ARGUMENT,
        /userns_options\.mode: POD asks for a user namespace of its own/,
      );
      // The ids the container runs as must be the namespace's: runc would fail with EINVAL.
      const asUser = (security: Record<string, unknown>) =>
        usernsContainer('ids', image(), hostId, {
          linux: { security_context: { ...security, namespace_options: usernsOptions(hostId) } },
        });
      await rejectsWith(
        createContainer(d.cri, pod, asUser({ run_as_user: { value: LENGTH } })),
        status.INVALID_ARGUMENT,
        /run_as_user\.value: 65536 is not an id of pod sandbox \w+'s user namespace \(0-65535\)/,
      );
      await rejectsWith(
        createContainer(
          d.cri,
          pod,
          asUser({ run_as_user: { value: 0 }, supplemental_groups: [5, LENGTH + 5] }),
        ),
        status.INVALID_ARGUMENT,
        /supplemental_groups\[1\]: 65541 is not an id/,
      );
      // Left out, they mean the pod's.
      const ctr = await startContainer(d.cri, pod, containerConfig('unset', image()));
      assert.deepEqual(mapLines(await execText(d.cri, ctr, ['cat', '/proc/self/uid_map'])), [
        [0, hostId, LENGTH],
      ]);
    } finally {
      await stopAndRemovePod(d.cri, pod.id);
      await stopAndRemovePod(d.cri, plain.id);
    }
  });

  test(
    'exec -it, attach and port-forward reach into the pod',
    { skip: crictlSkip || hostProves },
    async () => {
      const d = daemon();
      const hostId = 65536 * 26;
      const { pod, ctr } = await usernsPod(d, hostId);
      try {
        const exec = await crictlTty(d.socket, [
          'exec',
          '-it',
          ctr,
          'sh',
          '-c',
          'tty; id -u; cat /proc/self/uid_map',
        ]);
        assert.equal(exec.code, 0, exec.stdout + exec.stderr);
        assert.match(exec.stdout, /\/dev\/pts\/\d+/);
        // The container's terminal echoes a NUL byte on its input as "^@", which can land at the
        // start of a line: seen in a fresh-clone run, with the NULs coming through crictl's stdin
        // under script(1) (where they come from is not known yet). They are not the container's output.
        const shown = exec.stdout.replaceAll('^@', '');
        assert.match(shown, new RegExp(`^\\s*0\\s+${hostId}\\s+${LENGTH}`, 'm'));

        const once = await startContainer(
          d.cri,
          pod,
          usernsContainer('attach', image(), hostId, {
            command: ['/bin/sh', '-c', 'read line; echo "got $line as $(id -u)"; sleep 1'],
            stdin: true,
            stdin_once: true,
          }),
        );
        const attached = await crictl(d.socket, ['attach', '-i', once], {
          input: 'something\n',
          timeoutMs: 30_000,
        });
        assert.match(attached.stdout, /got something as 0/, attached.stderr);

        // Port 80: the pod's root may bind it, in a network namespace its user namespace owns.
        await startContainer(
          d.cri,
          pod,
          usernsContainer('server', image(), hostId, {
            command: ['/bin/sh', '-c', 'while true; do echo served-in-userns | nc -l -p 80; done'],
          }),
        );
        const local = await freePort();
        const forwarding = crictl(d.socket, ['port-forward', pod.id, `${local}:80`], {
          timeoutMs: 30_000,
        }).catch(() => undefined);
        let said = '';
        await waitFor(async () => {
          said = await readFrom(local);
          return said.includes('served-in-userns');
        }, 20_000);
        // crictl port-forward runs until stopped.
        for (const pid of await processesMentioning(`${local}:80`)) process.kill(pid, 'SIGTERM');
        await forwarding;
      } finally {
        await stopAndRemovePod(d.cri, pod.id);
      }
    },
  );

  // Crash recovery of the idmapped mounts is berth's own logic, alike on either cgroup version.
  for (const step of CREATE_STEPS) {
    const name = `kill -9 of berthd before CreateContainer's '${step}' leaves nothing after start-up`;
    test(name, { skip: hostProves }, async () => {
      const d = daemon();
      const hostId = 65536 * 27;
      const pod = await runPod(d.cri, usernsPodConfig(`userns-crash-${step}-${hex()}`, hostId));
      try {
        await d.restart({ [PAUSE_BEFORE_STEP_ENV]: step });
        const pending = createContainer(d.cri, pod, usernsContainer('c', image(), hostId)).catch(
          (err: unknown) => err,
        );
        const marker = await d.pausedBefore(step);
        const containers = join(d.rootDir, 'containers');
        if (step !== 'rootfs') {
          const idmapped = (await mountPointsBelow(containers)).filter((m) => /\/m\/[0-9a-z]+$/.test(m));
          assert.ok(idmapped.length > 0, 'no idmapped layer mounted before the step');
        }
        await d.kill9();
        assert.ok((await pending) instanceof Error, 'the paused CreateContainer succeeded');
        await rm(marker);
        await d.start();
        assert.deepEqual(await mountPointsBelow(containers), [], 'mounts left under containers/');
        assert.deepEqual(await readdir(containers).catch(() => []), [], 'container dirs left');
        const listed = await d.cri.call<{ containers: unknown[] }>('ListContainers', {});
        assert.deepEqual(listed.containers, []);
        // The pod still takes a container.
        const ctr = await startContainer(d.cri, pod, usernsContainer('again', image(), hostId));
        assert.equal((await execText(d.cri, ctr, ['id', '-u'])).trim(), '0');
      } finally {
        await stopAndRemovePod(d.cri, pod.id);
      }
    });
  }
});
