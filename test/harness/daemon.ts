import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, existsSync } from 'node:fs';
import { chmod, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ensureCgroup, membershipsOf, moveProcess } from '../../src/cgroups/hierarchy.js';
import { run } from '../../src/exec.js';
import { isMounted } from '../../src/netns/index.js';
import { commandLine, isRunning, killQuietly, processesMentioning } from '../../src/process/index.js';
import { hostCgroups } from './cgroups.js';
import { CriClient } from './client.js';
import { exists, namesIn } from './files.js';
import { watchRss } from './memory.js';
import { mountPointsBelow, unmountAllBelow } from './mounts.js';
import { bridgePlugin, leasedIps, unusedPrefix, type TestNetwork } from './network.js';
import { waitFor } from './wait.js';
import { REMOVED_DIR_PREFIX } from '../../src/sandbox/files.js';

/** berthd's launcher, in the source tree (from dist/test/harness): it starts dist/src/main.js with berthd's node flags. */
const LAUNCHER = fileURLToPath(new URL('../../../bin/berthd', import.meta.url));
/** The source tree's fixtures, from dist/test/harness. */
export const FIXTURES = fileURLToPath(new URL('../../../test/fixtures/', import.meta.url));

export interface TestDaemonOptions {
  /** Extra plugins chained after bridge (e.g. the failing fixture); `none` leaves the conf dir empty. */
  cni?: 'bridge' | 'bridge+portmap' | 'bridge+fail' | 'none';
  /**
   * Routes a pod gets through the bridge's gateway (CIDRs), besides its /24: none by default, so
   * that no pod of a test has a way off the machine; a cluster adds its Service CIDR.
   */
  podRoutes?: string[];
  env?: Record<string, string>;
  /** More berthd flags, e.g. ['--registry-config', path]. */
  extraArgs?: string[];
  /** Tests read berthd's debug lines; a benchmark runs it as a node would, at info. */
  logLevel?: 'debug' | 'info';
  /**
   * A cgroup berthd starts in, at the top of every hierarchy the test runs in, as a service
   * manager would start it: made if missing, left for the test to remove.
   */
  cgroup?: string;
  /** The umask berthd is started under (the test process's own by default). */
  umask?: number;
  /**
   * berthd's open-file limit (soft and hard), set by prlimit(1), which then execs the launcher: a
   * daemon that runs out of file descriptors soon.
   */
  fdLimit?: number;
  /**
   * The root dir one level further down, in a dir of this mode made before berthd starts (0700 is
   * what `mktemp -d` makes): berthd must not change it.
   */
  rootParentMode?: number;
}

/**
 * A berthd of the test's own: temp root/state/netns dirs, a bridge and a /24 no other interface on
 * the machine routes, and a host-local store in a temp dir, so tests can check leases directly.
 */
export class TestDaemon {
  readonly base: string;
  readonly socket: string;
  readonly rootDir: string;
  readonly stateDir: string;
  readonly netnsDir: string;
  readonly cniConfDir: string;
  readonly network: TestNetwork;
  proc: ChildProcess | null = null;
  /** Taken at the next start. */
  logLevel: 'debug' | 'info';
  client: CriClient | null = null;
  output = '';

  private constructor(
    readonly tag: string,
    private readonly opts: TestDaemonOptions,
    prefix: string,
  ) {
    this.base = join('/run', `berth-test-${tag}`);
    this.socket = join(this.base, 'berth.sock');
    this.rootDir = join(this.base, ...(opts.rootParentMode === undefined ? [] : ['parent']), 'root');
    this.stateDir = join(this.base, 'state');
    this.netnsDir = join(this.base, 'netns');
    this.cniConfDir = join(this.base, 'cni');
    this.network = { bridge: `bt${tag.slice(0, 8)}`, prefix, ipamDir: join(this.base, 'ipam') };
    this.logLevel = opts.logLevel ?? 'debug';
  }

  /** The name of the CNI network the daemon's pods are on. */
  get networkName(): string {
    return `berth-test-${this.tag}`;
  }

  /** runc's state of the daemon's containers (berthd's --state dir holds it). */
  get runcRoot(): string {
    return join(this.stateDir, 'runc');
  }

  static async create(opts: TestDaemonOptions = {}): Promise<TestDaemon> {
    const daemon = new TestDaemon(randomBytes(4).toString('hex'), opts, await unusedPrefix(210));
    await mkdir(daemon.cniConfDir, { recursive: true });
    if (opts.rootParentMode !== undefined) {
      await mkdir(dirname(daemon.rootDir));
      await chmod(dirname(daemon.rootDir), opts.rootParentMode);
    }
    await daemon.writeCniConfig(opts.cni ?? 'bridge');
    try {
      await daemon.start();
    } catch (err) {
      // A daemon that never served still made dirs and the netns self-bind.
      await daemon.kill9();
      await daemon.sweep();
      throw err;
    }
    return daemon;
  }

  get cri(): CriClient {
    if (!this.client) throw new Error('daemon not running');
    return this.client;
  }

  args(): string[] {
    return [
      '--socket',
      this.socket,
      '--root',
      this.rootDir,
      '--state',
      this.stateDir,
      '--netns-dir',
      this.netnsDir,
      '--cni-conf-dir',
      this.cniConfDir,
      '--log-level',
      this.logLevel,
      // Served, but on a port of its own: test daemons run side by side.
      '--metrics-address',
      '127.0.0.1:0',
      ...(this.opts.extraArgs ?? []),
    ];
  }

  async writeCniConfig(kind: NonNullable<TestDaemonOptions['cni']>): Promise<void> {
    if (kind === 'none') {
      for (const f of await readdir(this.cniConfDir)) await rm(join(this.cniConfDir, f));
      return;
    }
    const chained: Record<typeof kind, object[]> = {
      bridge: [],
      'bridge+portmap': [{ type: 'portmap', capabilities: { portMappings: true } }],
      'bridge+fail': [{ type: 'berth-test-fail' }],
    };
    await this.writeBridgeConfig(chained[kind]);
  }

  /** The conf dir's only network: the test bridge and host-local store, then `chained` plugins. */
  async writeBridgeConfig(chained: object[]): Promise<void> {
    for (const f of await readdir(this.cniConfDir)) await rm(join(this.cniConfDir, f));
    const routes = (this.opts.podRoutes ?? []).map((dst) => ({ dst }));
    const plugins = [bridgePlugin(this.network, routes.length > 0 ? { routes } : {}), ...chained];
    const conf = { cniVersion: '1.0.0', name: this.networkName, plugins };
    await writeFile(join(this.cniConfDir, '10-test.conflist'), JSON.stringify(conf));
  }

  async start(env: Record<string, string> = {}): Promise<void> {
    const binDirs = ['/usr/lib/cni', join(FIXTURES, 'cni')].flatMap((d) => ['--cni-bin-dir', d]);
    const argv = [LAUNCHER, ...this.args(), ...binDirs];
    const limit = this.opts.fdLimit;
    const [file = LAUNCHER, ...rest] =
      limit === undefined ? argv : ['prlimit', `--nofile=${limit}:${limit}`, '--', ...argv];
    // A child inherits the umask, and spawn forks before it returns: set only around it.
    const ownUmask = this.opts.umask === undefined ? undefined : process.umask(this.opts.umask);
    let proc: ChildProcess;
    try {
      proc = spawn(file, rest, {
        env: { ...process.env, BERTH_NODE: process.execPath, ...this.opts.env, ...env },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
    } finally {
      if (ownUmask !== undefined) process.umask(ownUmask);
    }
    this.proc = proc;
    // The launcher execs node (same pid), which boots far longer than this move takes: what berthd
    // starts is born in the cgroup.
    if (this.opts.cgroup !== undefined && proc.pid !== undefined) {
      for (const { mountPoint } of await membershipsOf('self')) {
        await moveProcess(proc.pid, await ensureCgroup(mountPoint, this.opts.cgroup));
      }
    }
    // After a kill -9 the old socket file and the old "serving" line are still there.
    const outputBefore = this.output.length;
    const logFile = daemonLogFile(this.tag);
    proc.stderr?.on('data', (chunk: Buffer) => {
      this.output += chunk.toString();
      // Written as it comes: a test process killed by its bound keeps nothing in memory.
      if (logFile !== null) appendFileSync(logFile, chunk);
    });
    const spawnedAt = Date.now();
    await waitFor(async () => {
      if (proc.exitCode !== null) throw new Error(`berthd exited with ${proc.exitCode}:\n${this.output}`);
      return existsSync(this.socket) && this.output.includes('serving CRI', outputBefore);
    }, SERVE_BOUND_MS).catch(async (err: unknown) => {
      // Busy all along (a starved machine: start more than the bound) or blocked (a hang).
      const cpu = await cpuSeconds(proc.pid);
      const used = cpu === null ? '' : `; it used ${cpu} s of CPU in ${(Date.now() - spawnedAt) / 1000} s`;
      throw new Error(
        `berthd did not serve: ${String(err)}${used}; its output:\n${this.output.slice(outputBefore).slice(-4000) || '(none)'}`,
      );
    });
    this.client = new CriClient(this.socket);
  }

  /** A clean shutdown (SIGTERM): pods keep running. */
  async stop(): Promise<void> {
    await this.signal('SIGTERM');
  }

  /** kill -9: the daemon gets no chance to clean anything. */
  async kill9(): Promise<void> {
    await this.signal('SIGKILL');
  }

  private async signal(sig: NodeJS.Signals): Promise<void> {
    this.client?.close();
    this.client = null;
    if (this.proc) await this.signalAndWait(sig);
  }

  /**
   * Sends `sig` at once, leaving the client open so that calls in flight carry on, and resolves with
   * how berthd exited.
   */
  async signalAndWait(sig: NodeJS.Signals): Promise<DaemonExit> {
    const proc = this.proc;
    if (!proc) throw new Error('daemon not running');
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      proc.kill(sig);
      await exited;
    }
    this.client?.close();
    this.client = null;
    this.proc = null;
    return { code: proc.exitCode, signal: proc.signalCode };
  }

  async restart(env: Record<string, string> = {}): Promise<void> {
    await this.stop();
    await this.start(env);
  }

  /** Simulates a reboot as far as berth can see one: its tmpfs marker gone. */
  async forgetBoot(): Promise<void> {
    await rm(join(this.stateDir, 'boot-id'), { force: true });
  }

  /** Removes every pod through the API, stops the daemon, then sweeps anything left on the host. */
  async destroy(): Promise<void> {
    if (this.client) {
      const list = await this.cri
        .call<{ items: { id: string }[] }>('ListPodSandbox', {})
        .catch(() => ({ items: [] }));
      for (const item of list.items)
        await this.cri.call('RemovePodSandbox', { pod_sandbox_id: item.id }).catch(() => {});
    }
    await this.kill9();
    await this.sweep();
  }

  /**
   * The sweep of a daemon whose test process was killed, known only by its tag (a cluster records
   * it): its processes, runc state, mounts, bridge and dirs, as sweep() does for a live one.
   */
  static async sweepLeftover(tag: string): Promise<void> {
    await new TestDaemon(tag, {}, '').sweep();
  }

  /** Best-effort removal of whatever a failed test left behind on the host. */
  async sweep(): Promise<void> {
    if (existsSync(this.runcRoot)) {
      for (const id of await this.runcContainers().catch(() => [] as string[])) {
        await run('runc', ['--root', this.runcRoot, 'delete', '--force', id], { timeoutMs: 10_000 }).catch(
          () => {},
        );
      }
    }
    // conmon outlives berthd by design; a test's monitors must not outlive the test.
    for (const pid of await processesMentioning(this.base)) killQuietly(pid);
    // Container rootfs overlays and pod shm mounts.
    await unmountAllBelow(this.rootDir);
    for (const name of await this.netnsFiles()) {
      const path = join(this.netnsDir, name);
      if (await isMounted(path)) await run('umount', ['-l', path], { timeoutMs: 10_000 }).catch(() => {});
    }
    if (await isMounted(this.netnsDir))
      await run('umount', ['-l', this.netnsDir], { timeoutMs: 10_000 }).catch(() => {});
    await run('ip', ['link', 'del', this.network.bridge], { timeoutMs: 10_000 }).catch(() => {});
    // The cgroups berthd made for pods it was killed before removing (cgroupfs: a systemd slice is
    // systemd's, and goes with a stop).
    const cgroups = await hostCgroups();
    for (const id of await namesIn(join(this.rootDir, 'sandboxes'))) {
      await cgroups.removePodCgroup(cgroups.podCgroupFor(id), 10_000).catch(() => {});
    }
    await rm(this.base, { recursive: true, force: true });
  }

  /** IPs host-local currently holds for this network. */
  async leasedIps(): Promise<string[]> {
    return leasedIps(this.network, this.networkName);
  }

  async netnsFiles(): Promise<string[]> {
    return namesIn(this.netnsDir);
  }

  async runcContainers(): Promise<string[]> {
    const { stdout } = await run('runc', ['--root', this.runcRoot, 'list', '-q'], { timeoutMs: 10_000 });
    return stdout.split('\n').filter(Boolean);
  }

  /** runc's status word for `id` ('created', 'running', 'stopped'), '' when runc does not know it. */
  async runcStatus(id: string): Promise<string> {
    const out = await run('runc', ['--root', this.runcRoot, 'state', id], { timeoutMs: 10_000 }).catch(
      () => null,
    );
    return out ? (JSON.parse(out.stdout) as { status: string }).status : '';
  }

  /**
   * The pods' dirs, once those of removed pods are deleted: berthd sets a removed pod's dir aside
   * as `.removed-*` and deletes it in the background. One still there after a while is returned too.
   */
  async sandboxDirs(): Promise<string[]> {
    const dir = join(this.rootDir, 'sandboxes');
    const settled = async (): Promise<boolean> =>
      !(await namesIn(dir)).some((name) => name.startsWith(REMOVED_DIR_PREFIX));
    await waitFor(settled, REMOVED_DIR_WAIT_MS).catch(() => {});
    return namesIn(dir);
  }

  /**
   * Live conmons of this daemon, or only the one monitoring container `id`. They run detached, so
   * they are found by their command line, which names the daemon's dirs.
   */
  async conmonPids(id?: string): Promise<number[]> {
    const pids: number[] = [];
    for (const pid of await processesMentioning(this.base)) {
      const argv = (await commandLine(pid)) ?? [];
      if (basename(argv[0] ?? '') !== 'conmon') continue;
      if (id !== undefined && argv[argv.indexOf('--cid') + 1] !== id) continue;
      if (await isRunning(pid)) pids.push(pid);
    }
    return pids;
  }

  /**
   * Mount points below the daemon's dir but the netns dir's self-bind, which lasts as long as the
   * daemon: what pods and containers mounted (netns pins, rootfs overlays, shm).
   */
  async podMounts(): Promise<string[]> {
    return (await mountPointsBelow(this.base)).filter((p) => p !== this.netnsDir);
  }

  /** Waits until berthd stands at its test pause before `step`; returns the pause's marker file. */
  async pausedBefore(step: string): Promise<string> {
    const marker = join(this.stateDir, `test-paused-${step}`);
    await waitFor(() => exists(marker), 30_000);
    return marker;
  }

  /** podConfig with a log directory of this daemon's own, so containers in the pod have logs. */
  pod(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
    return podConfig(name, { log_directory: join(this.base, 'logs', name), ...extra });
  }

  /** Runs `fn` while sampling berthd's RSS; returns its result and the growth in KiB. */
  async rssGrowthDuring<T>(fn: () => Promise<T>): Promise<{ value: T; growthKiB: number }> {
    const [value, rss] = await watchRss(this.proc?.pid, fn);
    return { value, growthKiB: rss.peak - rss.before };
  }

  /**
   * Waits until conmon has recorded container `id`'s exit in its exit file, berthd up or not: the
   * moment a test that needs an exit to happen while berthd is down may start it again.
   */
  async waitForExitFile(id: string, timeoutMs = 30_000): Promise<void> {
    await waitFor(() => exists(join(this.stateDir, 'exits', id)), timeoutMs, {
      what: `the exit file of ${id}`,
    });
  }

  async waitForOutput(text: string, timeoutMs = 30_000): Promise<void> {
    await waitFor(async () => this.output.includes(text), timeoutMs);
  }
}

/**
 * Where berthd's output goes too, one file per daemon, when BERTH_TEST_DAEMON_LOG_DIR names a dir:
 * the VM's file runner (scripts/vm/guest/files.sh) shows their tails after a file fails.
 */
function daemonLogFile(tag: string): string | null {
  const dir = process.env.BERTH_TEST_DAEMON_LOG_DIR;
  return dir ? join(dir, `berthd-${tag}.log`) : null;
}

/**
 * berthd's start to serving, a bound for a hang that waitFor scales by BOUND_SCALE. About 1 s on an
 * idle host; 85 s in the emulated VM on a 2-core host at load 12, 68 s of it before berthd's first
 * log line, loading its modules (measured); more than 120 s with both host cores busy besides.
 */
const SERVE_BOUND_MS = 60_000;

/** User and system CPU a process has used, from /proc/<pid>/stat (in USER_HZ, 100 a second). */
async function cpuSeconds(pid: number | undefined): Promise<number | null> {
  const stat = pid === undefined ? '' : await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  // Fields after the command name, which may hold spaces: state is the first, utime the 12th.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return Number.isFinite(ticks) ? ticks / 100 : null;
}

/** An exit code, or the signal that killed the process. */
export interface DaemonExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Room for the background removal of a removed pod's dir on a loaded machine (idle: milliseconds). */
const REMOVED_DIR_WAIT_MS = 30_000;

/** The env that makes berthd's next RunPodSandbox or CreateContainer stop for good before a step. */
export const PAUSE_BEFORE_STEP_ENV = 'BERTH_TEST_PAUSE_BEFORE_STEP';

/**
 * A daemon for the enclosing describe block, made in its before hook and destroyed (with all it
 * left on the host) after it. `options` may be a function, called in the before hook, so that it
 * can make files the daemon's flags name; `ready` runs once the daemon serves.
 */
export function useDaemon(
  options: TestDaemonOptions | (() => Promise<TestDaemonOptions>) = {},
  ready: (daemon: TestDaemon) => Promise<void> = async () => {},
): () => TestDaemon {
  let daemon: TestDaemon | undefined;
  before(async () => {
    daemon = await TestDaemon.create(typeof options === 'function' ? await options() : options);
    await ready(daemon);
  });
  after(async () => {
    await daemon?.destroy();
  });
  return () => {
    assert.ok(daemon, 'daemon not created');
    return daemon;
  };
}

/** A minimal valid RunPodSandbox config for a pod of the given name. */
export function podConfig(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    metadata: { name, namespace: 'berth-test', uid: `uid-${name}`, attempt: 0 },
    hostname: name,
    log_directory: `/var/log/pods/berth-test_${name}`,
    labels: { app: name, suite: 'berth' },
    annotations: { 'berth.test/name': name },
    // As kubelet sends a pod that does not share its process namespace (the common case), so the
    // suite runs pods the way nodes do: without an infra process under pod_infra = auto.
    linux: KUBELET_POD_LINUX,
    ...extra,
  };
}

/** kubelet's namespace options for a pod without shareProcessNamespace. */
export const KUBELET_POD_LINUX = {
  security_context: { namespace_options: { network: 'POD', pid: 'CONTAINER', ipc: 'POD' } },
};

/** kubelet's namespace options for a pod with shareProcessNamespace: it runs an infra init. */
export const SHARED_PID_LINUX = {
  security_context: { namespace_options: { network: 'POD', pid: 'POD', ipc: 'POD' } },
};
