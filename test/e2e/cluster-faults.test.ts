/**
 * Restarts and faults of a kubelet 1.36 node on berth, seen as the cluster sees them: berthd
 * restarted (SIGTERM) and killed -9 and the kubelet restarted while pods run leave every pod as it
 * was (no restart, no second container, the same sandbox); a container's process killed from the
 * host is restarted by the kubelet; a pod's infra process killed makes the kubelet replace the
 * sandbox; a simulated reboot (node down, every pod process and mount gone) brings the pods back.
 * The steps share one cluster and run in order, each starting from Ready pods. Last, a test process
 * killed with its cluster up: the next start's sweep leaves nothing of that cluster on the host.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { run } from '../../src/exec.js';
import { readMountInfo } from '../../src/mounts/mountinfo.js';
import { isRunning, processesMentioning } from '../../src/process/index.js';
import { BOUND_SCALE } from '../harness/bounds.js';
import { cgroupNames } from '../harness/cgroups.js';
import {
  clusterSkip,
  OWNER_FILE,
  startCluster,
  sweepKilledClusters,
  type Cluster,
  type Owner,
} from '../harness/cluster.js';
import {
  applyObjects,
  containerPid,
  containersOf,
  getPod,
  runtimeId,
  sandboxesOf,
  waitPodReady,
  type Kubectl,
  type PodObject,
} from '../harness/cluster-pods.js';
import { busyboxLayer, pushImage } from '../harness/images.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { waitFor } from '../harness/wait.js';

const FILE_TIMEOUT_MS = 600_000 * BOUND_SCALE;
const READY_BOUND_MS = 180_000;
/**
 * How long a pod must stay as it was after a restart: the kubelet relists every second and acts on
 * a changed sandbox or container within its next sync, so a wrong restart shows well within this.
 */
const SETTLE_MS = 15_000;
const PODS = ['plain', 'shared'] as const;
type PodName = (typeof PODS)[number];

/** A pod as the kubelet and berth see it at one moment. */
interface PodSnapshot {
  uid: string;
  restarts: number;
  /** berth's ready sandboxes of the pod. */
  readySandboxes: string[];
  /** berth's containers of the pod that are not exited. */
  liveContainers: string[];
  /** Every container berth has of the pod, exited too. */
  allContainers: number;
}

describe(
  'cluster: restarts and faults through the kubelet',
  { skip: clusterSkip, timeout: FILE_TIMEOUT_MS },
  () => {
    let registry: TestRegistry | undefined;
    let cluster: Cluster | undefined;
    let kubectl: Kubectl;

    before(async () => {
      registry = await startRegistry();
      const image = await pushBusybox(registry);
      cluster = await startCluster();
      kubectl = cluster.kubectl;
      await applyObjects(kubectl, [
        pod('plain', image, {}),
        // A shared pid namespace: berth runs an infra process for this pod.
        pod('shared', image, { shareProcessNamespace: true }),
      ]);
      await allReady();
    });

    after(async () => {
      await cluster?.stop();
      await registry?.stop();
    });

    const allReady = (): Promise<PodObject[]> =>
      Promise.all(PODS.map((name) => waitPodReady(kubectl, name, READY_BOUND_MS)));

    async function snapshot(name: PodName): Promise<PodSnapshot> {
      const p = await getPod(kubectl, name);
      const cri = cluster!.berth.cri;
      const containers = await containersOf(cri, p.metadata.uid);
      return {
        uid: p.metadata.uid,
        restarts: (p.status.containerStatuses ?? []).reduce((sum, c) => sum + c.restartCount, 0),
        readySandboxes: (await sandboxesOf(cri, p.metadata.uid))
          .filter((s) => s.state === 'SANDBOX_READY')
          .map((s) => s.id),
        liveContainers: containers.filter((c) => c.state !== 'CONTAINER_EXITED').map((c) => c.id),
        allContainers: containers.length,
      };
    }

    const snapshots = async (): Promise<Record<PodName, PodSnapshot>> => ({
      plain: await snapshot('plain'),
      shared: await snapshot('shared'),
    });

    /** Pods are ready again and, for SETTLE_MS, exactly as in `before`: checked a few times over. */
    async function assertUnchanged(before: Record<PodName, PodSnapshot>, what: string): Promise<void> {
      await allReady();
      const until = Date.now() + SETTLE_MS;
      do {
        const now = await snapshots();
        for (const name of PODS) {
          assert.deepEqual(now[name], before[name], `${name} changed after ${what}`);
          assert.equal(now[name].readySandboxes.length, 1, `${name}: ready sandboxes after ${what}`);
          assert.equal(now[name].liveContainers.length, 1, `${name}: live containers after ${what}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 3000));
      } while (Date.now() < until);
    }

    test('berthd restarted (SIGTERM) while pods run: no pod restarted, duplicated or given a new sandbox', async () => {
      const before = await snapshots();
      await cluster!.restartBerth({ signal: 'SIGTERM' });
      await assertUnchanged(before, 'a berthd restart');
    });

    test('berthd killed -9 while pods run: no pod restarted, duplicated or given a new sandbox', async () => {
      const before = await snapshots();
      await cluster!.restartBerth({ signal: 'SIGKILL' });
      await assertUnchanged(before, 'a kill -9 of berthd');
    });

    test('the kubelet restarted: no pod restarted, duplicated or given a new sandbox', async () => {
      const before = await snapshots();
      await cluster!.restartKubelet();
      await assertUnchanged(before, 'a kubelet restart');
    });

    test("a container's process killed from the host: the kubelet restarts it in the same sandbox", async () => {
      const before = await snapshot('plain');
      const [id] = before.liveContainers;
      assert.ok(id);
      const pid = await containerPid(cluster!.berth.cri, id);
      process.kill(pid, 'SIGKILL');
      await waitFor(async () => (await snapshot('plain')).restarts === before.restarts + 1, READY_BOUND_MS, {
        pollMs: 500,
        what: 'the kubelet restarting the killed container',
      });
      await waitPodReady(kubectl, 'plain', READY_BOUND_MS);
      const afterKill = await snapshot('plain');
      assert.deepEqual(afterKill.readySandboxes, before.readySandboxes);
      assert.equal(afterKill.liveContainers.length, 1);
      assert.notEqual(afterKill.liveContainers[0], id);
      const status = (await getPod(kubectl, 'plain')).status.containerStatuses?.[0];
      assert.ok(status);
      assert.equal(runtimeId(status), afterKill.liveContainers[0]);
    });

    test("a pod's infra process killed: the kubelet sees the sandbox NOTREADY and makes a new one", async () => {
      const before = await snapshot('shared');
      const [sandbox] = before.readySandboxes;
      assert.ok(sandbox);
      const status = await cluster!.berth.cri.call<{ info: Record<string, string> }>('PodSandboxStatus', {
        pod_sandbox_id: sandbox,
        verbose: true,
      });
      const pid = (JSON.parse(status.info.info ?? '{}') as { pid?: number }).pid ?? 0;
      assert.ok(pid > 0, `the shared pod has no infra process: ${status.info.info}`);
      process.kill(pid, 'SIGKILL');
      await waitFor(
        async () => {
          const now = await snapshot('shared');
          return now.readySandboxes.length === 1 && now.readySandboxes[0] !== sandbox;
        },
        READY_BOUND_MS,
        { pollMs: 500, what: 'a new sandbox of the shared pod' },
      );
      await waitPodReady(kubectl, 'shared', READY_BOUND_MS);
      const afterKill = await snapshot('shared');
      assert.equal(afterKill.liveContainers.length, 1);
      assert.ok(!before.liveContainers.includes(afterKill.liveContainers[0] ?? ''));
    });

    test('a node reboot (berthd and kubelet down, pod processes and mounts gone): the pods come back', async () => {
      const before = await snapshots();
      const pids = await Promise.all(
        PODS.map(async (name) => containerPid(cluster!.berth.cri, before[name].liveContainers[0] ?? '')),
      );
      await cluster!.stopNode();
      await simulateReboot(cluster!);
      for (const pid of pids)
        assert.ok(!(await isRunning(pid)), `container process ${pid} outlived the reboot`);
      await cluster!.startNode();
      // The API server still holds the pods' status from before the reboot (Running, ready) until
      // the kubelet writes a new one: what counts is berth's new sandbox and container of each pod.
      for (const name of PODS) {
        await waitFor(
          async () => {
            const now = await snapshot(name);
            return (
              now.readySandboxes.length === 1 &&
              !before[name].readySandboxes.includes(now.readySandboxes[0] ?? '') &&
              now.liveContainers.length === 1 &&
              !before[name].liveContainers.includes(now.liveContainers[0] ?? '')
            );
          },
          READY_BOUND_MS,
          { pollMs: 500, what: `a new sandbox and container of ${name}` },
        );
      }
      const ready = await allReady();
      for (const [i, name] of PODS.entries()) {
        const now = await snapshot(name);
        assert.equal(now.uid, before[name].uid, `${name} is another pod`);
        assert.equal(now.readySandboxes.length, 1, `${name}: ready sandboxes`);
        assert.equal(now.liveContainers.length, 1, `${name}: live containers`);
        const status = ready[i]?.status.containerStatuses?.[0];
        assert.ok(status);
        assert.equal(
          runtimeId(status),
          now.liveContainers[0],
          `${name}: the kubelet reports another container`,
        );
      }
    });
  },
);

describe(
  'cluster: a test process killed with its cluster up',
  { skip: clusterSkip, timeout: FILE_TIMEOUT_MS },
  () => {
    test("the next start's sweep leaves nothing of it on the host", async () => {
      const registry = await startRegistry();
      const child = spawn(
        process.execPath,
        [fileURLToPath(new URL('../harness/cluster-child.js', import.meta.url)), await pushBusybox(registry)],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      try {
        const localnet = await readFile('/proc/sys/net/ipv4/conf/all/route_localnet', 'utf8');
        const dir = await new Promise<string>((resolve, reject) => {
          let out = '';
          const bound = setTimeout(
            () => reject(new Error('the cluster of the child not up in time')),
            READY_BOUND_MS * 2,
          );
          child.stdout.on('data', (chunk: Buffer) => {
            out += chunk.toString();
            const up = /^up (\S+)$/m.exec(out);
            if (up?.[1]) {
              clearTimeout(bound);
              resolve(up[1]);
            }
          });
          child.once('exit', (code) => {
            clearTimeout(bound);
            reject(new Error(`the child exited (${code}) before its cluster was up`));
          });
        });
        const owner = JSON.parse(await readFile(join(dir, OWNER_FILE), 'utf8')) as Owner;
        const berthBase = join('/run', `berth-test-${owner.berthTag}`);
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGKILL');
        await exited;
        // conmon outlives its parents by design: the pod is left running.
        assert.notDeepEqual(
          await processesMentioning(berthBase),
          [],
          'nothing of the killed cluster was left to sweep',
        );

        await sweepKilledClusters();
        assert.deepEqual(await processesMentioning(dir), [], 'processes of the cluster');
        assert.deepEqual(await processesMentioning(berthBase), [], "processes of the cluster's berthd");
        assert.ok(!existsSync(dir), `${dir} is left`);
        assert.ok(!existsSync(berthBase), `${berthBase} is left`);
        const mounts = (await readMountInfo())
          .map((m) => m.mountPoint)
          .filter((p) => p.startsWith(`${dir}/`) || p.startsWith(`${berthBase}/`));
        assert.deepEqual(mounts, [], 'mounts of the cluster');
        for (const save of ['iptables-save', 'ip6tables-save']) {
          const { stdout } = await run(save, [], { timeoutMs: 30_000 });
          assert.doesNotMatch(stdout, /KUBE-/, `${save} still has Kubernetes chains`);
        }
        const { stdout: routes } = await run('ip', ['route', 'show', 'table', 'all'], { timeoutMs: 10_000 });
        assert.ok(!routes.includes(owner.serviceCidr), `the Service CIDR's route is left: ${routes}`);
        assert.equal(await readFile('/proc/sys/net/ipv4/conf/all/route_localnet', 'utf8'), localnet);
        assert.ok(!(await cgroupNames()).includes('kubepods'), 'the kubepods cgroups are left');
      } finally {
        child.kill('SIGKILL');
        await sweepKilledClusters();
        await registry.stop();
      }
    });
  },
);

/** The busybox image of the file's pods, pushed to `registry`: its reference. */
async function pushBusybox(registry: TestRegistry): Promise<string> {
  return (
    await pushImage(registry, 'cluster/busybox', '1', {
      layers: [await busyboxLayer()],
      config: { Cmd: ['/bin/sleep', '100000'], WorkingDir: '/' },
    })
  ).reference;
}

/**
 * What a reboot does to the node, the node's services being down already: every conmon and
 * container process dies, every mount of berth's and of the kubelet's pods goes, and the state dir
 * (tmpfs on a node) comes back empty. berth's root dir with its database survives, as on disk.
 */
async function simulateReboot(cluster: Cluster): Promise<void> {
  const berth = cluster.berth;
  for (const monitor of await berth.conmonPids()) process.kill(monitor, 'SIGKILL');
  await waitFor(async () => (await berth.conmonPids()).length === 0, 10_000, { what: 'conmons gone' });
  for (const id of await berth.runcContainers()) {
    await run('runc', ['--root', berth.runcRoot, 'delete', '--force', id], { timeoutMs: 10_000 });
  }
  const below = [berth.rootDir, berth.netnsDir, cluster.kubeletDir].map((d) => `${d}/`);
  const mounts = (await readMountInfo())
    .map((m) => m.mountPoint)
    .filter((p) => below.some((dir) => p.startsWith(dir)))
    .sort((a, b) => b.length - a.length);
  for (const target of mounts) await run('umount', ['-l', target], { timeoutMs: 10_000 }).catch(() => {});
  for (const name of await readdir(berth.stateDir)) await rm(join(berth.stateDir, name), { recursive: true });
  await berth.forgetBoot();
}

function pod(name: string, image: string, spec: Record<string, unknown>): object {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { app: `berth-${name}` } },
    spec: {
      terminationGracePeriodSeconds: 1,
      automountServiceAccountToken: false,
      containers: [
        { name: 'main', image, imagePullPolicy: 'IfNotPresent', command: ['/bin/sleep', '100000'] },
      ],
      ...spec,
    },
  };
}
