/**
 * The pod's namespaces as its containers see them, in both pod_infra modes: with `auto`, a pod that
 * does not share its pid namespace (kubelet's default) runs no infra process and its containers
 * join pinned ipc and uts namespaces; with `always`, an infra holds them. Either way containers of
 * one pod share net, ipc, uts and /dev/shm, see the pod's hostname and sysctls, and a pod that
 * shares its pid namespace runs an infra. Real berthd, runc, CNI bridge; needs root and Debian's
 * docker-registry. Traffic only inside the pod.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, readlink, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import { TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { busyboxLayer, pushImage, type PushedImage } from '../harness/images.js';
import { nsInode } from '../harness/namespaces.js';
import { containerConfig, execText, podStatus, runPod, startContainer, type Pod } from '../harness/pods.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { writeRuncWrapper } from '../harness/runtime-wrapper.js';
import { registrySkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 600_000;
const NO_USERNS = 'no-userns';
const FIXTURE_DIR = join('/run', `berth-test-ns-${randomBytes(4).toString('hex')}`);

/** What kubelet sends for a pod without shareProcessNamespace, hostNetwork, hostIPC or hostPID. */
const KUBELET_NAMESPACES = { network: 'POD', pid: 'CONTAINER', ipc: 'POD' };

const SYSCTLS = {
  'kernel.shm_rmid_forced': '1',
  'fs.mqueue.msg_max': '100',
  'net.ipv4.ip_unprivileged_port_start': '42',
};

for (const mode of ['auto', 'always'] as const) {
  describe(`pod namespaces (pod_infra = ${mode})`, { skip, timeout: SUITE_TIMEOUT_MS }, () => {
    const infra = mode === 'always';
    let registry: TestRegistry;
    let daemon: TestDaemon;
    let image: PushedImage;

    before(async () => {
      registry = await startRegistry();
      const layer = await busyboxLayer('gzip');
      image = await pushImage(registry, 'berth/ns', '1', {
        layers: [layer],
        config: { Cmd: ['/bin/sleep', '1000'], WorkingDir: '/' },
      });
      // A handler whose runtime cannot join a user namespace (the probe's container fails), so
      // that it reports user_namespaces false on any host.
      await mkdir(FIXTURE_DIR, { recursive: true });
      const noUserns = await writeRuncWrapper(join(FIXTURE_DIR, `no-userns-${mode}`), [
        'case "$*" in *berth-userns-probe-*) echo "no user namespaces here" >&2; exit 1;; esac',
      ]);
      daemon = await TestDaemon.create({
        cni: 'bridge',
        extraArgs: [
          '--pod-infra',
          mode,
          '--runtime-handler',
          `${NO_USERNS}=${noUserns}:${join(FIXTURE_DIR, `no-userns-${mode}-root`)}`,
        ],
      });
      await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
    });

    after(async () => {
      await daemon?.destroy();
      await registry?.stop();
      await rm(FIXTURE_DIR, { recursive: true, force: true });
    });

    /** A pod, and what its containers are created with: its namespace options, as kubelet does. */
    interface NamespacedPod {
      pod: Pod;
      namespaces: Record<string, string>;
    }

    async function podOf(
      name: string,
      namespaces: Record<string, string>,
      sysctls: Record<string, string> = {},
    ): Promise<NamespacedPod> {
      const linux = { sysctls, security_context: { namespace_options: namespaces } };
      return { pod: await runPod(daemon.cri, daemon.pod(name, { hostname: name, linux })), namespaces };
    }

    function start({ pod, namespaces }: NamespacedPod, name: string): Promise<string> {
      const linux = { security_context: { namespace_options: namespaces } };
      return startContainer(daemon.cri, pod, containerConfig(name, image.reference, { linux }));
    }

    async function nsOf(id: string, type: string): Promise<string> {
      return (await execText(daemon.cri, id, ['readlink', `/proc/self/ns/${type}`])).trim();
    }

    it('containers of a pod share its net, ipc and uts namespaces, hostname, sysctls and /dev/shm', async () => {
      const shared = await podOf('shared', KUBELET_NAMESPACES, SYSCTLS);
      const { pod } = shared;
      const { info } = await podStatus(daemon.cri, pod.id);
      const runcIds = await daemon.runcContainers();
      if (infra) {
        assert.ok(info.pid > 0, 'always: the pod runs an infra');
        assert.ok(runcIds.includes(pod.id), 'always: runc knows the infra');
      } else {
        assert.equal(info.pid, 0, 'auto: no infra pid');
        assert.ok(!runcIds.includes(pod.id), 'auto: no runc container with the sandbox id');
      }

      const a = await start(shared, 'a');
      const b = await start(shared, 'b');
      for (const type of ['net', 'ipc', 'uts']) {
        assert.equal(
          await nsOf(a, type),
          await nsOf(b, type),
          `${type} namespace differs between containers`,
        );
        assert.notEqual(
          await nsOf(a, type),
          await readlink(`/proc/self/ns/${type}`),
          `${type} is the host's`,
        );
      }
      assert.equal(
        await nsOf(a, 'net'),
        `net:[${(await stat(info.sandboxKey ?? '')).ino}]`,
        'net is the SandboxKey',
      );
      if (!infra) {
        const pins = join(info.sandboxDir, 'ns');
        assert.equal(await nsOf(a, 'ipc'), `ipc:[${await nsInode(join(pins, 'ipc'))}]`, 'ipc is the pin');
        assert.equal(await nsOf(a, 'uts'), `uts:[${await nsInode(join(pins, 'uts'))}]`, 'uts is the pin');
      }
      // Each container has a pid namespace of its own: kubelet's default.
      assert.notEqual(await nsOf(a, 'pid'), await nsOf(b, 'pid'));

      for (const id of [a, b]) {
        assert.equal((await execText(daemon.cri, id, ['hostname'])).trim(), 'shared');
        const read = async (path: string): Promise<string> =>
          (await execText(daemon.cri, id, ['cat', path])).trim();
        assert.equal(await read('/proc/sys/kernel/shm_rmid_forced'), '1');
        assert.equal(await read('/proc/sys/fs/mqueue/msg_max'), '100');
        assert.equal(await read('/proc/sys/net/ipv4/ip_unprivileged_port_start'), '42');
      }
      await execText(daemon.cri, a, ['sh', '-c', 'echo from-a > /dev/shm/note']);
      assert.equal(
        (await execText(daemon.cri, b, ['cat', '/dev/shm/note'])).trim(),
        'from-a',
        '/dev/shm is shared',
      );

      await daemon.cri.call('StopPodSandbox', { pod_sandbox_id: pod.id });
      assert.deepEqual(
        (await daemon.podMounts()).filter((path) => path.includes(pod.id)),
        [],
        'Stop unmounts shm, the pins and the netns',
      );
      await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id });
      assert.ok(!(await daemon.sandboxDirs()).includes(pod.id));
    });

    it('a pod that shares its pid namespace runs an infra, and its containers share that namespace', async () => {
      const pidshare = await podOf('pidshare', { ...KUBELET_NAMESPACES, pid: 'POD' });
      const { pod } = pidshare;
      const { info } = await podStatus(daemon.cri, pod.id);
      assert.ok(info.pid > 0, 'an infra pid');
      assert.ok((await daemon.runcContainers()).includes(pod.id), 'runc knows the infra');
      const a = await start(pidshare, 'a');
      const b = await start(pidshare, 'b');
      assert.equal(await nsOf(a, 'pid'), await nsOf(b, 'pid'));
      assert.equal(await nsOf(a, 'pid'), `pid:[${await nsInode(`/proc/${info.pid}/ns/pid`)}]`);
      assert.match(await execText(daemon.cri, a, ['cat', '/proc/1/cmdline']), /catatonit/);
      assert.equal((await execText(daemon.cri, a, ['hostname'])).trim(), 'pidshare');
      await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id });
      assert.ok(!(await daemon.runcContainers()).includes(pod.id));
    });

    it("a host-network, host-ipc pod keeps the host's net, uts and ipc namespaces", async () => {
      const hostns = await podOf('hostns', { network: 'NODE', pid: 'CONTAINER', ipc: 'NODE' });
      const { pod } = hostns;
      const { info } = await podStatus(daemon.cri, pod.id);
      assert.equal(info.sandboxKey, null);
      if (!infra) {
        assert.equal(info.pid, 0);
        // Nothing to pin: only the sandbox dir's files (no shm either, with the host's ipc).
        assert.deepEqual(
          (await daemon.podMounts()).filter((path) => path.includes(pod.id)),
          [],
        );
      }
      const a = await start(hostns, 'a');
      for (const type of ['net', 'uts', 'ipc']) {
        assert.equal(await nsOf(a, type), await readlink(`/proc/self/ns/${type}`), `${type} is the host's`);
      }
      await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id });
    });

    it('refuses a pod that asks for a user namespace of its own where its handler cannot, naming the field, and makes nothing', async () => {
      const mapping = [{ container_id: 0, host_id: 65536, length: 65536 }];
      const config = daemon.pod(`userns-${mode}`, {
        linux: {
          security_context: {
            namespace_options: {
              ...KUBELET_NAMESPACES,
              userns_options: { mode: 'POD', uids: mapping, gids: mapping },
            },
          },
        },
      });
      await rejectsWith(
        daemon.cri.call('RunPodSandbox', { config, runtime_handler: NO_USERNS }),
        status.INVALID_ARGUMENT,
        /namespace_options\.userns_options\.mode/,
      );
      const pods = await daemon.cri.call<{ items: { metadata: { name: string } }[] }>('ListPodSandbox', {});
      assert.ok(!pods.items.some((p) => p.metadata.name === `userns-${mode}`), 'no pod was recorded');
      const netns = await daemon.netnsFiles();
      assert.ok(!netns.some((f) => f.includes('userns')), `no netns was left: ${netns.join(' ')}`);
    });
  });
}
