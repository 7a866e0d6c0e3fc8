/**
 * A cluster user's pods' volumes and security settings, through a real kubelet 1.36 on berth: each
 * pod is applied with kubectl and what it asked for is read back inside it with kubectl exec (and,
 * for cgroups and the runtime used, on the host and through berth's socket). All pods are applied
 * at once and started side by side; each test then looks at its own pod.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { run } from '../../src/exec.js';
import { BOUND_SCALE } from '../harness/bounds.js';
import { CGROUP_V2 } from '../harness/cgroups.js';
import { clusterSkip, startCluster, type Cluster } from '../harness/cluster.js';
import {
  applyObjects,
  cgroupOfProcess,
  containerPid,
  containerStatusOf,
  containersOf,
  getPod,
  kubectlExec,
  procStatusField,
  runtimeId,
  sandboxesOf,
  waitPodReady,
  type Kubectl,
} from '../harness/cluster-pods.js';
import { buildLayer, busyboxLayer, pushImage } from '../harness/images.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { writeCrunHandler, type CrunHandler } from '../harness/crun.js';

const FILE_TIMEOUT_MS = 600_000 * BOUND_SCALE;
/** Pulls, volume set-up and starts of eight pods on a busy 2-core machine. */
const READY_BOUND_MS = 180_000;

const CONFIG_TEXT = 'hello from a configmap';
const SECRET_TEXT = 's3cret';
const IMAGE_FILE_TEXT = 'from an image volume';
const FS_GROUP = 2500;
const AUDIENCE = 'berth-test-audience';
/** CAP_NET_BIND_SERVICE alone: bit 10. */
const NET_BIND_ONLY = '0000000000000400';

describe(
  'cluster: pod volumes and security through the kubelet',
  { skip: clusterSkip, timeout: FILE_TIMEOUT_MS },
  () => {
    let registry: TestRegistry | undefined;
    let cluster: Cluster | undefined;
    let crun: CrunHandler | null = null;
    let kubectl: Kubectl;
    let image = '';

    before(async () => {
      registry = await startRegistry();
      image = (
        await pushImage(registry, 'cluster/busybox', '1', {
          layers: [await busyboxLayer()],
          config: { Cmd: ['/bin/sleep', '100000'], WorkingDir: '/' },
        })
      ).reference;
      const artifact = await pushImage(registry, 'cluster/artifact', '1', {
        layers: [
          await buildLayer([
            { type: 'file', path: 'top.txt', content: 'top' },
            { type: 'dir', path: 'data' },
            { type: 'file', path: 'data/hello.txt', content: IMAGE_FILE_TEXT },
          ]),
        ],
      });
      crun = await writeCrunHandler(`/run/berth-test-crun-${randomBytes(4).toString('hex')}`);
      cluster = await startCluster({ berthArgs: crun === null ? [] : crun.berthArgs });
      kubectl = cluster.kubectl;
      await applyObjects(kubectl, manifests(image, artifact.reference, crun !== null));
      await Promise.all(podNames(crun !== null).map((name) => waitPodReady(kubectl, name, READY_BOUND_MS)));
    });

    after(async () => {
      await cluster?.stop();
      await crun?.remove();
      await registry?.stop();
    });

    const exec = (pod: string, cmd: string[], container?: string): Promise<string> =>
      kubectlExec(kubectl, pod, cmd, { container });

    test('a hostUsers: false pod runs in its own user namespace, its volumes owned by its root and readable by its user', async () => {
      const map = (await exec('userns', ['cat', '/proc/self/uid_map'])).trim().split(/\s+/).map(Number);
      assert.notDeepEqual(map, [0, 0, 4294967295], 'the pod is in the host user namespace');
      const [inside, host, length] = map;
      assert.equal(inside, 0);
      assert.ok((host ?? 0) >= 65536, `host id ${host} is the host's own`);
      assert.equal(length, 65536);
      const gidMap = (await exec('userns', ['cat', '/proc/self/gid_map'])).trim().split(/\s+/).map(Number);
      assert.deepEqual(gidMap, map);

      // Ownership as seen inside: the namespace's root, not the overflow id (65534) of an unmapped owner.
      assert.equal((await exec('userns', ['stat', '-c', '%u %g', '/ed'])).trim(), '0 0');
      assert.equal((await exec('userns', ['stat', '-L', '-c', '%u %g', '/cm/greeting'])).trim(), '0 0');
      assert.equal((await exec('userns', ['cat', '/cm/greeting'])).trim(), CONFIG_TEXT);
      await exec('userns', ['touch', '/ed/by-root']);
      assert.equal((await exec('userns', ['stat', '-c', '%u', '/ed/by-root'])).trim(), '0');

      // The pod's user (1000 in the namespace) reads the configMap and writes the emptyDir.
      assert.equal((await exec('userns', ['id', '-u'], 'user')).trim(), '1000');
      assert.equal((await exec('userns', ['cat', '/cm/greeting'], 'user')).trim(), CONFIG_TEXT);
      await exec('userns', ['touch', '/ed/by-user'], 'user');
      assert.equal(
        (await exec('userns', ['stat', '-c', '%u %g', '/ed/by-user'], 'user')).trim(),
        '1000 1000',
      );
    });

    test('an image volume is mounted, whole and by subPath, and its files are read in the container', async () => {
      assert.equal((await exec('imagevol', ['cat', '/sub/hello.txt'])).trim(), IMAGE_FILE_TEXT);
      // Only the sub path: the image's top-level file is not there.
      assert.equal((await exec('imagevol', ['ls', '/sub'])).trim(), 'hello.txt');
      assert.equal((await exec('imagevol', ['cat', '/whole/top.txt'])).trim(), 'top');
      assert.equal((await exec('imagevol', ['cat', '/whole/data/hello.txt'])).trim(), IMAGE_FILE_TEXT);
      // Read-only, as the kubelet asks for every image volume.
      await assert.rejects(exec('imagevol', ['touch', '/whole/new']), /Read-only file system/);
    });

    test('supplementalGroupsPolicy Strict gives only the declared groups; Merge adds the image /etc/group ones', async () => {
      // The image's /etc/group puts app (1000) in extra (2000).
      assert.equal((await exec('strict', ['id', '-G'])).trim(), '1000 3000');
      assert.deepEqual(
        (await exec('merge', ['id', '-G']))
          .trim()
          .split(' ')
          .map(Number)
          .sort((a, b) => a - b),
        [1000, 2000, 3000],
      );
      // The kubelet reports the ids the runtime says the container runs with.
      const strict = containerStatusOf(await getPod(kubectl, 'strict'), 'main').user?.linux;
      assert.ok(strict, 'no user in the Strict pod container status');
      assert.equal(strict.uid, 1000);
      assert.equal(strict.gid, 1000);
      assert.deepEqual(
        [...(strict.supplementalGroups ?? [])].sort((a, b) => a - b),
        [1000, 3000],
      );
      const merge = containerStatusOf(await getPod(kubectl, 'merge'), 'main').user?.linux;
      assert.ok(merge, 'no user in the Merge pod container status');
      assert.ok(merge.supplementalGroups?.includes(2000), `Merge groups: ${JSON.stringify(merge)}`);
    });

    test('pod-level resources size the pod cgroup', async () => {
      const cri = cluster!.cri;
      const pod = await getPod(kubectl, 'podres');
      const pid = await containerPid(cri, runtimeId(containerStatusOf(pod, 'main')));
      const memory = await cgroupOfProcess(pid, 'memory');
      const cpu = await cgroupOfProcess(pid, 'cpu');
      // The container's cgroup is below the pod's.
      const podMemory = join(memory, '..');
      const podCpu = join(cpu, '..');
      assert.ok(podMemory.includes(pod.metadata.uid.replaceAll('-', CGROUP_V2 ? '_' : '-')), podMemory);
      const read = (...parts: string[]): Promise<string> =>
        readFile(join('/sys/fs/cgroup', ...parts), 'utf8').then((s) => s.trim());
      if (CGROUP_V2) {
        assert.equal(await read(podMemory, 'memory.max'), String(96 * 1024 * 1024));
        assert.equal(await read(podCpu, 'cpu.max'), '40000 100000');
      } else {
        assert.equal(await read('memory', podMemory, 'memory.limit_in_bytes'), String(96 * 1024 * 1024));
        assert.equal(await read('cpu', podCpu, 'cpu.cfs_quota_us'), '40000');
        assert.equal(await read('cpu', podCpu, 'cpu.cfs_period_us'), '100000');
      }
    });

    test('a RuntimeClass whose handler is crun runs its pod with crun', async (t) => {
      if (crun === null) {
        t.skip('crun is not installed');
        return;
      }
      const cri = cluster!.cri;
      const pod = await getPod(kubectl, 'crun');
      const [sandbox] = (await sandboxesOf(cri, pod.metadata.uid)).filter((s) => s.state === 'SANDBOX_READY');
      assert.ok(sandbox, 'berth has no ready sandbox of the crun pod');
      assert.equal(sandbox.runtime_handler, 'crun');
      const id = runtimeId(containerStatusOf(pod, 'main'));
      assert.ok((await crun.containers()).includes(id), `crun's root does not hold ${id}`);
      const runcRoot = cluster!.berth.runcRoot;
      const { stdout } = await run('runc', ['--root', runcRoot, 'list', '-q'], { timeoutMs: 10_000 });
      assert.ok(!stdout.split('\n').includes(id), 'runc runs the crun pod container too');
      assert.equal((await exec('crun', ['cat', '/etc/hostname'])).trim(), 'crun');
      // Pods without the class stay on runc.
      const plain = runtimeId(containerStatusOf(await getPod(kubectl, 'sec'), 'main'));
      assert.ok(stdout.split('\n').includes(plain), 'a pod without a RuntimeClass is not on runc');
      assert.equal((await containersOf(cri, pod.metadata.uid)).length, 1);
    });

    test('configMap, secret, emptyDir (disk and Memory), downward API and projected token volumes hold what they should', async () => {
      assert.equal((await exec('vols', ['cat', '/cm/greeting'])).trim(), CONFIG_TEXT);
      assert.equal((await exec('vols', ['cat', '/sec/password'])).trim(), SECRET_TEXT);
      await exec('vols', ['sh', '-c', 'echo on-disk > /ed/f && echo in-memory > /mem/f']);
      assert.equal((await exec('vols', ['cat', '/ed/f'])).trim(), 'on-disk');
      assert.equal((await exec('vols', ['cat', '/mem/f'])).trim(), 'in-memory');
      const mounts = await exec('vols', ['cat', '/proc/mounts']);
      const fsOf = (path: string): string | undefined =>
        mounts
          .split('\n')
          .map((l) => l.split(' '))
          .find((f) => f[1] === path)?.[2];
      assert.equal(fsOf('/mem'), 'tmpfs', 'medium: Memory is no tmpfs');
      assert.equal(fsOf('/sec'), 'tmpfs', 'the secret is not on tmpfs');

      assert.equal((await exec('vols', ['cat', '/dapi/name'])).trim(), 'vols');
      assert.match(await exec('vols', ['cat', '/dapi/labels']), /app="berth-vols"/);
      assert.equal((await exec('vols', ['cat', '/dapi/mem_limit'])).trim(), String(64 * 1024 * 1024));

      const token = (await exec('vols', ['cat', '/tok/token'])).trim();
      const parts = token.split('.');
      assert.equal(parts.length, 3, 'the token is no JWT');
      const claims = JSON.parse(Buffer.from(parts[1] ?? '', 'base64url').toString()) as {
        aud: string[] | string;
        sub: string;
        'kubernetes.io'?: { pod?: { name: string } };
      };
      assert.ok([claims.aud].flat().includes(AUDIENCE), `aud: ${JSON.stringify(claims.aud)}`);
      assert.equal(claims.sub, 'system:serviceaccount:default:default');
      assert.equal(claims['kubernetes.io']?.pod?.name, 'vols');
      assert.equal((await exec('vols', ['cat', '/tok/greeting'])).trim(), CONFIG_TEXT);
    });

    test('runAsUser, runAsGroup and fsGroup: the process ids and the volumes group-owned', async () => {
      assert.equal((await exec('vols', ['id', '-u'])).trim(), '1000');
      assert.equal((await exec('vols', ['id', '-g'])).trim(), '1001');
      assert.ok((await exec('vols', ['id', '-G'])).trim().split(' ').includes(String(FS_GROUP)));
      // fsGroup: the volume dirs and their files are the group's, and new files inherit it (setgid).
      assert.equal((await exec('vols', ['stat', '-c', '%g', '/ed'])).trim(), String(FS_GROUP));
      assert.equal(
        (await exec('vols', ['stat', '-L', '-c', '%g', '/sec/password'])).trim(),
        String(FS_GROUP),
      );
      await exec('vols', ['touch', '/ed/by-user']);
      assert.equal((await exec('vols', ['stat', '-c', '%u %g', '/ed/by-user'])).trim(), `1000 ${FS_GROUP}`);
    });

    test('readOnlyRootFilesystem, capabilities and seccomp RuntimeDefault', async () => {
      await assert.rejects(exec('sec', ['touch', '/new-file']), /Read-only file system/);
      // Volumes stay writable.
      await exec('sec', ['touch', '/scratch/ok']);
      assert.equal(await procStatusField(kubectl, 'sec', 'CapEff'), NET_BIND_ONLY);
      assert.equal(await procStatusField(kubectl, 'sec', 'Seccomp'), '2');
      // The contrast: a root pod asking for no profile is unconfined, with the default capability set.
      assert.equal(await procStatusField(kubectl, 'podres', 'Seccomp'), '0');
      const defaults = BigInt(`0x${await procStatusField(kubectl, 'podres', 'CapEff')}`);
      assert.ok(
        defaults !== BigInt(`0x${NET_BIND_ONLY}`) && (defaults & 0x400n) !== 0n,
        defaults.toString(16),
      );
    });
  },
);

function podNames(withCrun: boolean): string[] {
  return ['userns', 'imagevol', 'strict', 'merge', 'podres', 'vols', 'sec', ...(withCrun ? ['crun'] : [])];
}

const sleeper = ['/bin/sleep', '100000'];

function pod(name: string, spec: Record<string, unknown>): object {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { app: `berth-${name}` } },
    spec: { terminationGracePeriodSeconds: 1, automountServiceAccountToken: false, ...spec },
  };
}

function container(image: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { name: 'main', image, imagePullPolicy: 'IfNotPresent', command: sleeper, ...extra };
}

function manifests(image: string, artifact: string, withCrun: boolean): object[] {
  const groups = (policy: string): Record<string, unknown> => ({
    securityContext: {
      runAsUser: 1000,
      runAsGroup: 1000,
      supplementalGroups: [3000],
      supplementalGroupsPolicy: policy,
    },
    containers: [container(image)],
  });
  return [
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'berth-cm' },
      data: { greeting: CONFIG_TEXT },
    },
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'berth-secret' },
      stringData: { password: SECRET_TEXT },
    },
    pod('userns', {
      hostUsers: false,
      volumes: [
        { name: 'ed', emptyDir: {} },
        { name: 'cm', configMap: { name: 'berth-cm' } },
      ],
      containers: [
        container(image, {
          volumeMounts: [
            { name: 'ed', mountPath: '/ed' },
            { name: 'cm', mountPath: '/cm' },
          ],
        }),
        container(image, {
          name: 'user',
          securityContext: { runAsUser: 1000, runAsGroup: 1000 },
          volumeMounts: [
            { name: 'ed', mountPath: '/ed' },
            { name: 'cm', mountPath: '/cm' },
          ],
        }),
      ],
    }),
    pod('imagevol', {
      volumes: [{ name: 'iv', image: { reference: artifact, pullPolicy: 'IfNotPresent' } }],
      containers: [
        container(image, {
          volumeMounts: [
            { name: 'iv', mountPath: '/sub', subPath: 'data' },
            { name: 'iv', mountPath: '/whole' },
          ],
        }),
      ],
    }),
    pod('strict', groups('Strict')),
    pod('merge', groups('Merge')),
    pod('podres', {
      resources: {
        requests: { cpu: '200m', memory: '64Mi' },
        limits: { cpu: '400m', memory: '96Mi' },
      },
      containers: [container(image)],
    }),
    pod('vols', {
      securityContext: { runAsUser: 1000, runAsGroup: 1001, fsGroup: FS_GROUP },
      volumes: [
        { name: 'cm', configMap: { name: 'berth-cm' } },
        { name: 'sec', secret: { secretName: 'berth-secret' } },
        { name: 'ed', emptyDir: {} },
        { name: 'mem', emptyDir: { medium: 'Memory', sizeLimit: '16Mi' } },
        {
          name: 'dapi',
          downwardAPI: {
            items: [
              { path: 'name', fieldRef: { fieldPath: 'metadata.name' } },
              { path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } },
              { path: 'mem_limit', resourceFieldRef: { containerName: 'main', resource: 'limits.memory' } },
            ],
          },
        },
        {
          name: 'tok',
          projected: {
            sources: [
              { serviceAccountToken: { path: 'token', audience: AUDIENCE, expirationSeconds: 3600 } },
              { configMap: { name: 'berth-cm' } },
            ],
          },
        },
      ],
      containers: [
        container(image, {
          resources: { limits: { memory: '64Mi' } },
          volumeMounts: ['cm', 'sec', 'ed', 'mem', 'dapi', 'tok'].map((n) => ({
            name: n,
            mountPath: `/${n}`,
          })),
        }),
      ],
    }),
    pod('sec', {
      volumes: [{ name: 'scratch', emptyDir: {} }],
      containers: [
        container(image, {
          volumeMounts: [{ name: 'scratch', mountPath: '/scratch' }],
          securityContext: {
            readOnlyRootFilesystem: true,
            capabilities: { drop: ['ALL'], add: ['NET_BIND_SERVICE'] },
            seccompProfile: { type: 'RuntimeDefault' },
          },
        }),
      ],
    }),
    ...(withCrun
      ? [
          {
            apiVersion: 'node.k8s.io/v1',
            kind: 'RuntimeClass',
            metadata: { name: 'berth-crun' },
            handler: 'crun',
          },
          pod('crun', { runtimeClassName: 'berth-crun', hostname: 'crun', containers: [container(image)] }),
        ]
      : []),
  ];
}
