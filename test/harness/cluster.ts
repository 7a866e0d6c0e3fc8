/**
 * A one-node Kubernetes cluster on loopback whose node runs on berth: etcd, kube-apiserver (a
 * static token and AlwaysAllow), kube-controller-manager, kube-scheduler, a kubelet on a
 * TestDaemon's socket and kube-proxy in iptables mode. The API server makes its own self-signed
 * serving certificate; the kubelet is named 127.0.0.1 and reached by that name, since it refuses a
 * loopback node IP. Services get addresses of a /24 no interface on the machine routes, blackholed
 * while the cluster lives, so that a packet kube-proxy failed to translate goes nowhere; NodePorts
 * are opened on loopback only. stop() ends everything it started and removes its dir, mounts,
 * kubepods cgroups, iptables chains, route and the host settings the kubelet and kube-proxy
 * changed; a cluster whose test process was killed is swept the same way by the next start.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../../src/exec.js';
import { isRunning, killQuietly, processesMentioning } from '../../src/process/index.js';
import type { CriClient } from './client.js';
import { TestDaemon } from './daemon.js';
import type { Kubectl } from './cluster-pods.js';
import { unusedPrefix } from './network.js';
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
  /** Its dir under /run: logs, certificates, configs, the kubelet's root and what a sweep reads. */
  dir: string;
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
 * Host settings the kubelet writes at start (its protectKernelDefaults would instead refuse to
 * start on a host where they differ, as on most) and kube-proxy's route_localnet (for NodePorts on
 * loopback): not namespaced, so they are the host's. Read before the cluster starts, kept in its
 * dir (a killed run's sweep finds them there) and written back at teardown, so that a test run
 * leaves the host's panic, overcommit and routing policy as it found them.
 */
const HOST_SYSCTLS = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
  'net/ipv4/conf/all/route_localnet',
];

async function readHostSettings(): Promise<Record<string, string>> {
  const saved: Record<string, string> = {};
  for (const key of HOST_SYSCTLS) {
    const value = await readFile(join('/proc/sys', key), 'utf8').catch(() => null);
    if (value !== null) saved[key] = value.trim();
  }
  return saved;
}

async function writeHostSettings(saved: Record<string, string>): Promise<void> {
  for (const [key, value] of Object.entries(saved)) {
    if (HOST_SYSCTLS.includes(key)) await writeFile(join('/proc/sys', key), value).catch(() => {});
  }
}

const CLUSTER_DIR_PREFIX = 'berth-test-cluster-';
/** What a cluster's dir records for the sweep of a run that was killed before its stop(). */
export const OWNER_FILE = 'owner.json';
export interface Owner {
  pid: number;
  berthTag: string;
  serviceCidr: string;
  hostSettings: Record<string, string>;
}

/**
 * The iptables chains the node's Kubernetes parts made: kube-proxy's own cleanup removes its
 * rules (of every mode it has), and the KUBE- chains left (the kubelet's KUBE-FIREWALL, canaries
 * and hints, in IPv4 and IPv6) go with the built-in chains' jumps to them.
 */
async function cleanUpProxyRules(): Promise<void> {
  await run(join(BIN, 'kube-proxy'), ['--cleanup'], { timeoutMs: 60_000 }).catch(() => undefined);
  const ipt = (file: string, args: string[]): Promise<string> =>
    run(file, ['-w', '5', ...args], { timeoutMs: 30_000 }).then(
      (r) => r.stdout,
      () => '',
    );
  for (const [save, file] of [
    ['iptables-save', 'iptables'],
    ['ip6tables-save', 'ip6tables'],
  ] as const) {
    for (const table of ['filter', 'nat', 'mangle']) {
      const rules = await run(save, ['-t', table], { timeoutMs: 30_000 }).then(
        (r) => r.stdout.split('\n'),
        () => [] as string[],
      );
      const chains = rules.flatMap((l) => /^:(KUBE-\S+) /.exec(l)?.[1] ?? []);
      if (chains.length === 0) continue;
      const builtIn = rules.flatMap((l) => /^:([A-Z]+) [A-Z]+ /.exec(l)?.[1] ?? []);
      for (const chain of builtIn) {
        // Numbered, deleted from the last so that the numbers before stay right.
        const listed = (await ipt(file, ['-t', table, '-L', chain, '-n', '--line-numbers'])).split('\n');
        const jumps = listed.flatMap((l) => /^(\d+)\s+KUBE-/.exec(l)?.[1] ?? []);
        for (const n of jumps.reverse()) await ipt(file, ['-t', table, '-D', chain, n]);
      }
      for (const chain of chains) await ipt(file, ['-t', table, '-F', chain]);
      for (const chain of chains) await ipt(file, ['-t', table, '-X', chain]);
    }
  }
}

async function removeServiceRoute(cidr: string): Promise<void> {
  await run('ip', ['route', 'del', 'blackhole', cidr], { timeoutMs: 10_000 }).catch(() => undefined);
}

/** The pods' volume mounts below the kubelet's root dir, then the root dir itself, a mount of its own. */
async function unmountKubeletDir(kubeletDir: string): Promise<void> {
  await unmountAllBelow(kubeletDir);
  await run('umount', ['-R', kubeletDir], { timeoutMs: 10_000 }).catch(() => undefined);
}

/**
 * What a cluster leaves on the host once its processes are gone, removed the same way by stop()
 * and by the sweep of a killed run: iptables chains, the Service CIDR's route, the host settings
 * it changed, the kubelet dir's mounts, the kubepods cgroups and its dir.
 */
async function clearHost(dir: string, owner: Owner | undefined): Promise<void> {
  await cleanUpProxyRules();
  // No owner file (killed before it was written): no route was added, no setting changed.
  if (owner) {
    await removeServiceRoute(owner.serviceCidr);
    await writeHostSettings(owner.hostSettings);
  }
  await unmountKubeletDir(join(dir, 'kubelet'));
  await removeCgroupTree('kubepods');
  await rm(dir, { recursive: true, force: true });
}

/** A config file the Kubernetes binaries read: JSON, which their YAML loaders take as it is. */
async function writeJson(path: string, value: object): Promise<void> {
  await writeFile(path, JSON.stringify(value));
}

/**
 * Clusters whose test process is gone (killed before its stop()): their processes, berthd and its
 * pods, mounts, proxy rules, route, kubepods cgroups and dirs, and the host settings they changed.
 * A dir whose owner lives is another file's running cluster and is left alone.
 */
export async function sweepKilledClusters(): Promise<void> {
  const names = (await readdir('/run').catch(() => [] as string[])).filter((n) =>
    n.startsWith(CLUSTER_DIR_PREFIX),
  );
  for (const name of names) {
    const dir = join('/run', name);
    const owner = await readFile(join(dir, OWNER_FILE), 'utf8')
      .then((t) => JSON.parse(t) as Owner)
      .catch(() => undefined);
    if (owner && (await isRunning(owner.pid))) continue;
    for (const pid of await processesMentioning(dir)) killQuietly(pid);
    // An empty tag: killed before its berthd was made.
    if (owner && owner.berthTag !== '') await TestDaemon.sweepLeftover(owner.berthTag);
    await clearHost(dir, owner);
  }
}

export interface ClusterOptions {
  berthArgs?: string[];
  /** The kubelet's feature gates besides its defaults (KubeletConfiguration featureGates). */
  kubeletFeatureGates?: Record<string, boolean>;
}

export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  await sweepKilledClusters();
  // One cluster on the host at a time: a second kubelet would fight over /kubepods.
  if (
    await run('pgrep', ['-x', 'kubelet'], { timeoutMs: 10_000 }).then(
      () => true,
      () => false,
    )
  ) {
    throw new Error('a kubelet already runs on this host');
  }
  const hostSettings = await readHostSettings();
  const serviceCidr = `${await unusedPrefix(233)}.0/24`;
  const dir = join('/run', `${CLUSTER_DIR_PREFIX}${randomBytes(4).toString('hex')}`);
  await mkdir(dir, { recursive: true });
  const owner: Owner = { pid: process.pid, berthTag: '', serviceCidr, hostSettings };
  const recordOwner = (berthTag: string): Promise<void> =>
    writeJson(join(dir, OWNER_FILE), Object.assign(owner, { berthTag }));
  await recordOwner('');
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
  const [etcdPort, peerPort, apiPort, kubeletPort, proxyMetricsPort, proxyHealthPort] = [
    await freePort(),
    await freePort(),
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
  await writeJson(kc, {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      { name: 'c', cluster: { server: `https://127.0.0.1:${apiPort}`, 'insecure-skip-tls-verify': true } },
    ],
    users: [{ name: 'u', user: { token } }],
    contexts: [{ name: 'c', context: { cluster: 'c', user: 'u', namespace: 'default' } }],
    'current-context': 'c',
  });
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
    // The node's parts before the host is cleared: a running kube-proxy or kubelet would make
    // again the chains the clearing removes.
    for (const n of ['proxy', 'kubelet']) await stopProc(n);
    await berth?.destroy();
    for (const n of ['sched', 'cm', 'apiserver', 'etcd']) await stopProc(n);
    await clearHost(dir, owner);
  };
  try {
    berth = await TestDaemon.create({ extraArgs: opts.berthArgs ?? [], podRoutes: [serviceCidr] });
    await recordOwner(berth.tag);
    // What no kube-proxy rule translates goes nowhere, rather than out of the default route.
    await run('ip', ['route', 'add', 'blackhole', serviceCidr], { timeoutMs: 10_000 });
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
      `--service-cluster-ip-range=${serviceCidr}`,
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
    await writeJson(cfg, {
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
    });
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
    const proxyCfg = join(dir, 'kube-proxy.yaml');
    await writeJson(proxyCfg, {
      apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
      kind: 'KubeProxyConfiguration',
      mode: 'iptables',
      clientConnection: { kubeconfig: kc },
      hostnameOverride: '127.0.0.1',
      bindAddress: '127.0.0.1',
      clusterCIDR: `${berth.network.prefix}.0/24`,
      healthzBindAddress: `127.0.0.1:${proxyHealthPort}`,
      metricsBindAddress: `127.0.0.1:${proxyMetricsPort}`,
      // NodePorts on loopback only: nothing of the test cluster is opened to the machine's network.
      nodePortAddresses: ['127.0.0.0/8'],
      // Every Service packet masqueraded: pods on one bridge answer each other through the host,
      // which un-NATs the reply (without it they would need br_netfilter, a host-wide setting).
      iptables: { masqueradeAll: true, localhostNodePorts: true, syncPeriod: '1s', minSyncPeriod: '0s' },
      // Zeros leave the host's conntrack table size and timeouts as they are.
      conntrack: {
        maxPerCore: 0,
        min: 0,
        tcpEstablishedTimeout: '0s',
        tcpCloseWaitTimeout: '0s',
        udpTimeout: '0s',
        udpStreamTimeout: '0s',
      },
    });
    start('proxy', join(BIN, 'kube-proxy'), [`--config=${proxyCfg}`]);
    await waitFor(
      async () =>
        (await fetch(`http://127.0.0.1:${proxyHealthPort}/healthz`)
          .then((r) => r.status)
          .catch(() => 0)) === 200,
      60_000,
      { pollMs: 500, what: 'kube-proxy healthy' },
    );
    await waitFor(async () => (await kubectl(['get', 'sa', 'default']).catch(() => '')) !== '', 60_000, {
      pollMs: 500,
    });
    const cluster: Cluster = {
      dir,
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
