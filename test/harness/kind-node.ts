/**
 * A Kubernetes node as kind makes one, without Docker or kind: a privileged runc container with its
 * own mount, PID, IPC, UTS and cgroup namespaces, systemd as its init, berth installed as the
 * repository's unit (deploy/systemd/berth.service) with the checkout at /opt/berth, and berth's
 * root dir on a directory bind-mounted from the host (overlayfs cannot stack on a node's own
 * overlay root). /dev/shm is a 64 MiB tmpfs and /sys/fs/cgroup the node's own cgroup namespace,
 * writable, as Docker gives a privileged kind node.
 *
 * The node shares the host's network namespace, so that its berth reaches the tests' loopback
 * registry and its CNI bridge is one more test bridge. For that reason every unit that would
 * touch the host through it (sysctls, modules, udev, binfmt, time sync, network set-up, timers
 * that fetch) is kept from starting: only what Debian's systemd starts by itself, D-Bus, and berth.
 */
import { randomBytes } from 'node:crypto';
import { cp, mkdir, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { run, type ExecResult } from '../../src/exec.js';
import { probeOwnProcess } from '../../src/host/features.js';
import { infraMounts } from '../../src/oci/infra.js';
import { killQuietly } from '../../src/process/index.js';
import { removeCgroupTree } from './cgroups.js';
import { CriClient } from './client.js';
import { bridgePlugin, unusedPrefix, type TestNetwork } from './network.js';
import { waitFor } from './wait.js';

/** The checkout, from dist/test/harness: mounted read-only where the unit expects berth. */
const CHECKOUT = fileURLToPath(new URL('../../../', import.meta.url));
export const UNIT_FILE = join(CHECKOUT, 'deploy', 'systemd', 'berth.service');
const INSTALL_DIR = '/opt/berth';
/** berth's default socket, reached from the host through the node's root. */
const SOCKET_IN_NODE = '/run/berth/berth.sock';

/** Units that would reach past the node into the shared host (or the network) from inside it. */
const MASKED_UNITS = [
  'systemd-udevd.service',
  'systemd-udev-trigger.service',
  'systemd-udev-settle.service',
  'systemd-sysctl.service',
  'systemd-modules-load.service',
  'kmod-static-nodes.service',
  'systemd-binfmt.service',
  'proc-sys-fs-binfmt_misc.automount',
  'systemd-timesyncd.service',
  'systemd-networkd.service',
  'systemd-resolved.service',
  'networking.service',
  'sys-kernel-debug.mount',
  'sys-kernel-tracing.mount',
  'sys-kernel-config.mount',
  'sys-fs-fuse-connections.mount',
  'getty.target',
];

/** berth's config in the node: the defaults, or deploy/kind/berth.toml (the systemd cgroup driver). */
export type NodeConfig = 'defaults' | 'kind';
const KIND_CONFIG = join(CHECKOUT, 'deploy', 'kind', 'berth.toml');

export interface KindNodeOptions {
  config: NodeConfig;
}

export class KindNode {
  readonly name: string;
  readonly base: string;
  readonly network: TestNetwork;
  private client: CriClient | null = null;
  private initPid = 0;

  private constructor(tag: string, prefix: string) {
    this.name = `berth-kind-${tag}`;
    this.base = join('/run', `berth-test-kind-${tag}`);
    this.network = { bridge: `bk${tag.slice(0, 8)}`, prefix, ipamDir: '/var/lib/cni/networks' };
  }

  /** Boots the node and waits until systemd reports berth active (READY=1 received). */
  static async boot(opts: KindNodeOptions): Promise<KindNode> {
    const node = new KindNode(randomBytes(4).toString('hex'), await unusedPrefix(211));
    try {
      await node.prepare(opts);
      await node.runc(['run', '--detach', '--bundle', node.bundle, node.name], 60_000);
      node.initPid = await node.readInitPid();
      await node.waitActive('berth.service');
    } catch (err) {
      const journal = await node.journal().catch(() => '');
      await node.destroy();
      throw new Error(`kind node did not come up: ${String(err)}\n${journal}`);
    }
    return node;
  }

  /** berth's host-side path of the socket: through the node's root, as kubelet in the node sees it. */
  get socket(): string {
    return `/proc/${this.initPid}/root${SOCKET_IN_NODE}`;
  }

  get cri(): CriClient {
    this.client ??= new CriClient(this.socket);
    return this.client;
  }

  /** Forgets the client: its channel may hold a connection to a berthd that is gone. */
  reconnect(): void {
    this.client?.close();
    this.client = null;
  }

  /** berth's root dir as the host sees it: the bind-mounted host directory. */
  get hostRootDir(): string {
    return join(this.base, 'var-lib-berth');
  }

  exec(args: string[], timeoutMs = 30_000): Promise<ExecResult> {
    return this.runc(['exec', this.name, ...args], timeoutMs);
  }

  async systemctl(...args: string[]): Promise<string> {
    return (await this.exec(['systemctl', ...args], 120_000)).stdout.trim();
  }

  /** One property of a unit, as `systemctl show -p` gives it. */
  async unitProperty(unit: string, property: string): Promise<string> {
    return this.systemctl('show', '--value', '-p', property, unit);
  }

  async waitActive(unit: string, timeoutMs = 90_000): Promise<void> {
    await waitFor(
      async () => (await this.unitProperty(unit, 'ActiveState').catch(() => '')) === 'active',
      timeoutMs,
      {
        pollMs: 200,
        what: `${unit} active`,
      },
    );
  }

  /** The tail of berth's journal in the node, for failure messages. */
  async journal(lines = 60): Promise<string> {
    return (await this.exec(['journalctl', '-u', 'berth.service', '--no-pager', '-n', String(lines)])).stdout;
  }

  /** Kills the node (every process in its PID namespace goes with its init), then its leftovers. */
  async destroy(): Promise<void> {
    this.client?.close();
    this.client = null;
    await this.runc(['kill', this.name, 'KILL'], 10_000).catch(() => undefined);
    if (this.initPid > 0) {
      killQuietly(this.initPid);
      await waitFor(async () => !(await pidAlive(this.initPid)), 10_000).catch(() => undefined);
    }
    await this.runc(['delete', '--force', this.name], 10_000).catch(() => undefined);
    // The node's own cgroups (systemd's slices, berth's pods and monitors) sit below its cgroup.
    await removeCgroupTree(this.name);
    await run('ip', ['link', 'del', this.network.bridge], { timeoutMs: 10_000 }).catch(() => undefined);
    await rm(this.base, { recursive: true, force: true });
  }

  private get bundle(): string {
    return join(this.base, 'bundle');
  }

  private runc(args: string[], timeoutMs: number): Promise<ExecResult> {
    return run('runc', ['--root', join(this.base, 'runc'), ...args], { timeoutMs });
  }

  private async readInitPid(): Promise<number> {
    const { stdout } = await this.runc(['state', this.name], 10_000);
    return (JSON.parse(stdout) as { pid: number }).pid;
  }

  private async prepare(opts: KindNodeOptions): Promise<void> {
    const rootfs = join(this.bundle, 'rootfs');
    await mkdir(rootfs, { recursive: true });
    await mkdir(this.hostRootDir, { recursive: true });
    // Debian's merged /usr: the host's /usr is the node's, mounted read-only.
    for (const dir of [
      'usr',
      'etc',
      'opt/berth',
      'var/lib/berth',
      'run',
      'tmp',
      'proc',
      'sys',
      'dev',
      'root',
    ])
      await mkdir(join(rootfs, dir), { recursive: true });
    for (const link of ['bin', 'sbin', 'lib', 'lib64']) await symlink(`usr/${link}`, join(rootfs, link));
    await this.prepareEtc(join(this.base, 'etc'), opts);
    const nodeDir = dirname(dirname(process.execPath));
    const extraNode = process.execPath.startsWith('/usr/') ? [] : [nodeDir];
    for (const dir of extraNode) await mkdir(join(rootfs, dir), { recursive: true });
    // Privileged, as Docker makes kind's nodes: every capability the host lets root hold.
    const { capabilities } = await probeOwnProcess();
    await writeFile(join(this.bundle, 'config.json'), JSON.stringify(this.spec(extraNode, capabilities)));
  }

  /** The host's /etc, copied, with berth's unit enabled and only the node's own units left. */
  private async prepareEtc(etc: string, opts: KindNodeOptions): Promise<void> {
    await cp('/etc', etc, { recursive: true, verbatimSymlinks: true });
    const units = join(etc, 'systemd', 'system');
    // What the host enabled (its servers, timers, network set-up) is not the node's.
    await rm(units, { recursive: true, force: true });
    await mkdir(join(units, 'multi-user.target.wants'), { recursive: true });
    for (const unit of MASKED_UNITS) await symlink('/dev/null', join(units, unit));
    await cp(UNIT_FILE, join(units, 'berth.service'));
    await symlink(
      '/etc/systemd/system/berth.service',
      join(units, 'multi-user.target.wants', 'berth.service'),
    );
    // This VM's root has a lower hard limit on open files than the unit asks for; systemd would
    // refuse to start berth rather than lower it.
    const hardLimit = await hardOpenFilesLimit();
    if (hardLimit !== null && hardLimit < 1_048_576) {
      await mkdir(join(units, 'berth.service.d'), { recursive: true });
      await writeFile(
        join(units, 'berth.service.d', 'host-limits.conf'),
        `[Service]\nLimitNOFILE=${hardLimit}\n`,
      );
    }
    if (!process.execPath.startsWith('/usr/')) {
      await mkdir(join(units, 'berth.service.d'), { recursive: true });
      await writeFile(
        join(units, 'berth.service.d', 'node.conf'),
        `[Service]\nEnvironment=BERTH_NODE=${process.execPath}\n`,
      );
    }
    await rm(join(etc, 'cni', 'net.d'), { recursive: true, force: true });
    await mkdir(join(etc, 'cni', 'net.d'), { recursive: true });
    const conf = { cniVersion: '1.0.0', name: 'kind', plugins: [bridgePlugin(this.network)] };
    await writeFile(join(etc, 'cni', 'net.d', '10-kind.conflist'), JSON.stringify(conf));
    await rm(join(etc, 'berth'), { recursive: true, force: true });
    await mkdir(join(etc, 'berth'), { recursive: true });
    // The kind image's file as it ships (top-level keys only), then what a test node needs.
    const shipped = opts.config === 'kind' ? await readFile(KIND_CONFIG, 'utf8') : '';
    const forTests = [
      'log_level = "debug"',
      '[metrics]',
      // The node shares the host's network: a port of its own, like every test daemon.
      'address = "127.0.0.1:0"',
    ];
    await writeFile(join(etc, 'berth', 'berth.toml'), `${shipped}\n${forTests.join('\n')}\n`);
    await writeFile(join(etc, 'hostname'), 'kind-node\n');
    await rm(join(etc, 'machine-id'), { force: true });
    await writeFile(join(etc, 'machine-id'), `${randomBytes(16).toString('hex')}\n`);
  }

  private spec(extraNodeDirs: string[], capabilities: string[]): object {
    const bind = (source: string, destination: string, mode: 'ro' | 'rw') => ({
      destination,
      type: 'bind',
      source,
      options: ['rbind', mode],
    });
    return {
      ociVersion: '1.0.2',
      process: {
        terminal: false,
        user: { uid: 0, gid: 0 },
        args: ['/lib/systemd/systemd'],
        // systemd's own test for running in a container, as Docker's kind nodes have it.
        env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'container=docker'],
        cwd: '/',
        capabilities: {
          bounding: capabilities,
          effective: capabilities,
          permitted: capabilities,
        },
        noNewPrivileges: false,
      },
      root: { path: 'rootfs', readonly: false },
      hostname: 'kind-node',
      mounts: [
        // What Docker gives a container: /dev a tmpfs with its own devpts, a 64 MiB /dev/shm. /sys,
        // writable in a privileged kind node, stays read-only here so that nothing in the node can
        // poke the host's devices through it; berth needs only /sys/fs/cgroup writable.
        ...infraMounts(),
        {
          destination: '/sys/fs/cgroup',
          type: 'cgroup',
          source: 'cgroup',
          options: ['nosuid', 'noexec', 'nodev', 'relatime', 'rw'],
        },
        bind('/usr', '/usr', 'ro'),
        bind(join(this.base, 'etc'), '/etc', 'rw'),
        bind(CHECKOUT, INSTALL_DIR, 'ro'),
        bind(this.hostRootDir, '/var/lib/berth', 'rw'),
        ...extraNodeDirs.map((dir) => bind(dir, dir, 'ro')),
        { destination: '/run', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=755'] },
        { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev'] },
      ],
      linux: {
        resources: { devices: [{ allow: true, access: 'rwm' }] },
        cgroupsPath: `/${this.name}`,
        namespaces: [
          { type: 'pid' },
          { type: 'ipc' },
          { type: 'uts' },
          { type: 'mount' },
          { type: 'cgroup' },
        ],
      },
    };
  }
}

async function hardOpenFilesLimit(): Promise<number | null> {
  const limits = await readFile('/proc/self/limits', 'utf8');
  const line = limits.split('\n').find((l) => l.startsWith('Max open files'));
  const hard = line?.trim().split(/\s+/)[4];
  return hard === undefined || hard === 'unlimited' ? null : Number(hard);
}

async function pidAlive(pid: number): Promise<boolean> {
  return readdir(`/proc/${pid}`).then(
    () => true,
    () => false,
  );
}
