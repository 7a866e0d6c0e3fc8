/**
 * INTERIM, to be replaced by helper "cluster"'s test/harness/cluster.ts when it is merged: a
 * bare-bones one-node cluster on loopback (etcd, kube-apiserver with a static token and
 * AlwaysAllow, kube-controller-manager, kube-scheduler, a kubelet on a TestDaemon's socket; no
 * kube-proxy) so the cluster-security and cluster-faults scenarios can run. The API server makes
 * its own self-signed serving certificate; the kubelet is named 127.0.0.1 and reached by that name,
 * since it refuses a loopback node IP. Everything it starts is stopped and its dir, mounts and the
 * kubepods cgroups removed by stop().
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../../src/exec.js';
import type { CriClient } from './client.js';
import { TestDaemon } from './daemon.js';
import type { Kubectl } from './cluster-pods.js';
import { freePort } from './registry.js';
import { waitFor } from './wait.js';
import { unmountAllBelow } from './mounts.js';
import { removeCgroupTree } from './cgroups.js';
import { rootSkip } from './skip.js';

/** Where ../shared/tools/kubernetes/unpack puts the v1.36.3 binaries, unless $KUBERNETES_BIN says. */
const BIN = process.env.KUBERNETES_BIN ?? '/var/tmp/kubernetes-v1.36.3';
export const clusterSkip: string | false =
  rootSkip ||
  (!existsSync(join(BIN, 'kubelet'))
    ? `no Kubernetes binaries in ${BIN}: set $KUBERNETES_BIN (official release tarballs) or run ../shared/tools/kubernetes/unpack`
    : !existsSync('/usr/bin/etcd')
      ? 'no etcd (Debian etcd-server)'
      : false);

export interface Cluster {
  kubectl: Kubectl;
  /** kubectl's file and arguments against this cluster, for a kubectl the caller runs itself. */
  kubectlCommand(args: readonly string[]): { file: string; args: string[] };
  /** The kubelet's own HTTPS server (anonymous, AlwaysAllow): the apiserver proxies no loopback node. */
  kubeletUrl: string;
  cri: CriClient;
  berth: TestDaemon;
  kubeletDir: string;
  restartBerth(opts: { signal: NodeJS.Signals }): Promise<void>;
  restartKubelet(): Promise<void>;
  stopNode(): Promise<void>;
  startNode(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Settings the kubelet writes at start (its protectKernelDefaults would instead refuse to start on
 * a host where they differ, as on most): not namespaced, so they are the host's. Read before the
 * cluster starts and written back at its teardown, so that a test run leaves the host's panic and
 * overcommit policy as it found them.
 */
const KUBELET_SYSCTLS = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
];

async function readKernelSettings(): Promise<Map<string, string>> {
  const saved = new Map<string, string>();
  for (const key of KUBELET_SYSCTLS) {
    const value = await readFile(join('/proc/sys', key), 'utf8').catch(() => null);
    if (value !== null) saved.set(key, value.trim());
  }
  return saved;
}

async function writeKernelSettings(saved: Map<string, string>): Promise<void> {
  for (const [key, value] of saved) await writeFile(join('/proc/sys', key), value).catch(() => {});
}

export interface ClusterOptions {
  berthArgs?: string[];
  /** The kubelet's feature gates besides its defaults (KubeletConfiguration featureGates). */
  kubeletFeatureGates?: Record<string, boolean>;
}

export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  // One cluster on the host at a time: a second kubelet would fight over /kubepods.
  if (
    await run('pgrep', ['-x', 'kubelet'], { timeoutMs: 10_000 }).then(
      () => true,
      () => false,
    )
  ) {
    throw new Error('a kubelet already runs on this host');
  }
  const kernelSettings = await readKernelSettings();
  const dir = `/run/berth-test-cluster-${randomBytes(4).toString('hex')}`;
  await mkdir(dir, { recursive: true });
  const procs = new Map<string, ChildProcess>();
  const start = (name: string, file: string, args: string[]): ChildProcess => {
    const p = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const log = createWriteStream(join(dir, `${name}.log`), { flags: 'a' });
    p.stdout?.pipe(log);
    p.stderr?.pipe(log);
    procs.set(name, p);
    return p;
  };
  const stopProc = async (name: string, sig: NodeJS.Signals = 'SIGTERM'): Promise<void> => {
    const p = procs.get(name);
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const gone = new Promise((r) => p.once('exit', r));
    p.kill(sig);
    await gone;
  };
  const [etcdPort, peerPort, apiPort, kubeletPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  const token = randomBytes(16).toString('hex');
  await writeFile(join(dir, 'tokens.csv'), `${token},admin,admin,system:masters\n`);
  await run('openssl', ['genrsa', '-out', join(dir, 'sa.key'), '2048'], { timeoutMs: 30_000 });
  await run('openssl', ['rsa', '-in', join(dir, 'sa.key'), '-pubout', '-out', join(dir, 'sa.pub')], {
    timeoutMs: 30_000,
  });
  const kc = join(dir, 'kubeconfig');
  await writeFile(
    kc,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        { name: 'c', cluster: { server: `https://127.0.0.1:${apiPort}`, 'insecure-skip-tls-verify': true } },
      ],
      users: [{ name: 'u', user: { token } }],
      contexts: [{ name: 'c', context: { cluster: 'c', user: 'u', namespace: 'default' } }],
      'current-context': 'c',
    }),
  );
  const kubectlCommand = (args: readonly string[]): { file: string; args: string[] } => ({
    file: join(BIN, 'kubectl'),
    args: ['--kubeconfig', kc, ...args],
  });
  const kubectl: Kubectl = async (args, o = {}) => {
    const { file, args: argv } = kubectlCommand(args);
    return (await run(file, argv, { timeoutMs: o.timeoutMs ?? 60_000, input: o.input })).stdout;
  };
  let berth: TestDaemon | undefined;
  const kubeletDir = join(dir, 'kubelet');
  const teardown = async (): Promise<void> => {
    await stopProc('kubelet');
    await writeKernelSettings(kernelSettings);
    await berth?.destroy();
    for (const n of ['sched', 'cm', 'apiserver', 'etcd']) await stopProc(n);
    await unmountAllBelow(kubeletDir);
    await run('umount', ['-R', kubeletDir], { timeoutMs: 10_000 }).catch(() => undefined);
    await removeCgroupTree('kubepods');
    await rm(dir, { recursive: true, force: true });
  };
  try {
    berth = await TestDaemon.create({ extraArgs: opts.berthArgs ?? [] });
    return await boot(berth);
  } catch (err) {
    await teardown();
    throw err;
  }
  async function boot(berth: TestDaemon): Promise<Cluster> {
    start('etcd', 'etcd', [
      '--data-dir',
      join(dir, 'etcd'),
      '--name',
      'default',
      '--listen-client-urls',
      `http://127.0.0.1:${etcdPort}`,
      '--advertise-client-urls',
      `http://127.0.0.1:${etcdPort}`,
      '--listen-peer-urls',
      `http://127.0.0.1:${peerPort}`,
      '--initial-advertise-peer-urls',
      `http://127.0.0.1:${peerPort}`,
      '--initial-cluster',
      `default=http://127.0.0.1:${peerPort}`,
    ]);
    start('apiserver', join(BIN, 'kube-apiserver'), [
      `--etcd-servers=http://127.0.0.1:${etcdPort}`,
      `--secure-port=${apiPort}`,
      '--bind-address=127.0.0.1',
      '--advertise-address=127.0.0.1',
      `--cert-dir=${join(dir, 'apiserver')}`,
      `--token-auth-file=${join(dir, 'tokens.csv')}`,
      '--authorization-mode=AlwaysAllow',
      '--service-account-issuer=https://kubernetes.default.svc',
      `--service-account-key-file=${join(dir, 'sa.pub')}`,
      `--service-account-signing-key-file=${join(dir, 'sa.key')}`,
      '--service-cluster-ip-range=10.233.0.0/24',
      '--kubelet-preferred-address-types=Hostname',
      '--allow-privileged=true',
    ]);
    await waitFor(
      async () => (await kubectl(['get', '--raw', '/readyz']).catch(() => '')) === 'ok',
      120_000,
      { pollMs: 500, what: 'apiserver' },
    );
    start('cm', join(BIN, 'kube-controller-manager'), [
      `--kubeconfig=${kc}`,
      `--service-account-private-key-file=${join(dir, 'sa.key')}`,
      '--leader-elect=false',
      '--secure-port=0',
    ]);
    start('sched', join(BIN, 'kube-scheduler'), [
      `--kubeconfig=${kc}`,
      '--leader-elect=false',
      '--secure-port=0',
    ]);
    const resolv = join(dir, 'resolv.conf');
    await writeFile(resolv, 'nameserver 127.0.0.1\n');
    const cfg = join(dir, 'kubelet.yaml');
    await writeFile(
      cfg,
      JSON.stringify({
        apiVersion: 'kubelet.config.k8s.io/v1beta1',
        kind: 'KubeletConfiguration',
        failCgroupV1: false,
        cgroupDriver: 'cgroupfs',
        containerRuntimeEndpoint: `unix://${berth.socket}`,
        authentication: { anonymous: { enabled: true }, webhook: { enabled: false } },
        authorization: { mode: 'AlwaysAllow' },
        address: '127.0.0.1',
        port: kubeletPort,
        readOnlyPort: 0,
        healthzPort: 0,
        failSwapOn: false,
        resolvConf: resolv,
        evictionHard: { 'memory.available': '1Mi', 'nodefs.available': '0%', 'imagefs.available': '0%' },
        imageGCHighThresholdPercent: 100,
        imageGCLowThresholdPercent: 99,
        serializeImagePulls: false,
        featureGates: opts.kubeletFeatureGates ?? {},
      }),
    );
    const startKubelet = (): void => {
      start('kubelet', join(BIN, 'kubelet'), [
        `--kubeconfig=${kc}`,
        `--config=${cfg}`,
        `--root-dir=${kubeletDir}`,
        '--hostname-override=127.0.0.1',
        `--cert-dir=${join(dir, 'kubelet-pki')}`,
      ]);
    };
    startKubelet();
    const nodeReady = async (): Promise<void> =>
      waitFor(
        async () =>
          (await kubectl([
            'get',
            'node',
            '127.0.0.1',
            '-o',
            'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
          ]).catch(() => '')) === 'True',
        120_000,
        { pollMs: 1000, what: 'node Ready' },
      );
    await nodeReady();
    await waitFor(async () => (await kubectl(['get', 'sa', 'default']).catch(() => '')) !== '', 60_000, {
      pollMs: 500,
    });
    const cluster: Cluster = {
      kubectl,
      kubectlCommand,
      kubeletUrl: `https://127.0.0.1:${kubeletPort}`,
      get cri() {
        return berth.cri;
      },
      berth,
      kubeletDir,
      async restartBerth({ signal }) {
        await berth.signalAndWait(signal);
        await berth.start();
      },
      async restartKubelet() {
        await stopProc('kubelet');
        startKubelet();
        await nodeReady();
      },
      async stopNode() {
        await stopProc('kubelet', 'SIGKILL');
        await berth.kill9();
      },
      async startNode() {
        await berth.start();
        startKubelet();
        await nodeReady();
      },
      async stop() {
        await kubectl(['delete', 'pods', '--all', '--grace-period=1', '--wait=true'], {
          timeoutMs: 60_000,
        }).catch(() => '');
        await teardown();
      },
    };
    return cluster;
  }
}
