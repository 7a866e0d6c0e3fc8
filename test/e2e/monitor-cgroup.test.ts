/**
 * Container monitors outside berthd's cgroup, end to end: berthd runs in a cgroup of its own, as
 * under a systemd unit, and every process in that cgroup is killed, as systemd's default
 * KillMode=control-group does when it stops or restarts the unit. The containers, their logs and
 * their exits must come through, because their conmons live in the monitors' cgroup. Needs root.
 * Traffic goes to loopback only.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { membershipsOf, processesIn, type CgroupMembership } from '../../src/cgroups/hierarchy.js';
import { isRunning, killQuietly } from '../../src/process/index.js';
import { removeCgroupTree } from '../harness/cgroups.js';
import { TestDaemon } from '../harness/daemon.js';
import { useBusyboxImage } from '../harness/images.js';
import {
  containerConfig,
  containerStatus,
  execSync,
  runPod,
  startContainer,
  stopAndRemovePod,
  waitContainerState,
  type Pod,
} from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';
import { BOUND_SCALE } from '../harness/bounds.js';

const SUITE_TIMEOUT_MS = 180_000 * BOUND_SCALE;
const MONITORS_CGROUP = 'berth-monitors';
const DAEMON_CGROUP = `berth-test-monitors-${randomBytes(4).toString('hex')}`;
/** Writes a numbered line every 100 ms. */
const LOGGER = ['sh', '-c', 'i=0; while true; do echo "line $i"; i=$((i+1)); sleep 0.1; done'];
const EXIT_CODE = 7;
/** Runs until /tmp/go exists, then exits with EXIT_CODE. */
const WAITER = ['sh', '-c', `while [ ! -e /tmp/go ]; do sleep 0.1; done; exit ${EXIT_CODE}`];

describe('monitors outside berthd cgroup', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const imageRef = useBusyboxImage('berth/monitor-cgroup');
  let daemon: TestDaemon | undefined;
  const configFile = `/run/${DAEMON_CGROUP}.toml`;

  before(async () => {
    // First as a berth from before monitors had a cgroup: they stay in berthd's.
    await writeConfig(configFile, 'inherit');
    daemon = await TestDaemon.create({ cgroup: DAEMON_CGROUP, extraArgs: ['--config', configFile] });
    await daemon.cri.callImage('PullImage', { image: { image: imageRef() } });
  });

  after(async () => {
    await daemon?.destroy();
    await killCgroup(await daemonCgroupDirs()).catch(() => undefined);
    await removeCgroupTree(DAEMON_CGROUP);
    await rm(configFile, { force: true });
  });

  test('containers, logs and exits survive killing every process in berthd cgroup', async () => {
    const d = daemon;
    assert.ok(d);
    const oldPod = await runPod(d.cri, d.pod('before-upgrade'));
    const oldLogger = await startContainer(d.cri, oldPod, loggerConfig('logger', imageRef()));
    const [oldMonitor] = await d.conmonPids(oldLogger);
    assert.ok(oldMonitor !== undefined, 'no conmon for the first container');
    assert.ok((await processesInAny(await daemonCgroupDirs())).includes(oldMonitor));

    // The upgrade: start-up moves the monitor the old berthd left in its cgroup.
    await writeConfig(configFile, MONITORS_CGROUP);
    await d.restart();
    await assertInMonitorsCgroup(oldMonitor);

    const pod = await runPod(d.cri, d.pod('after-upgrade'));
    const logger = await startContainer(d.cri, pod, loggerConfig('logger', imageRef()));
    const waiter = await startContainer(
      d.cri,
      pod,
      containerConfig('waiter', imageRef(), { command: WAITER }),
    );
    const containers = [oldLogger, logger, waiter];
    const monitors = new Map<string, number>();
    for (const id of containers) {
      const [pid] = await d.conmonPids(id);
      assert.ok(pid !== undefined, `no conmon for ${id}`);
      await assertInMonitorsCgroup(pid);
      monitors.set(id, pid);
    }

    // What KillMode=control-group does: SIGKILL to every process in berthd's cgroup.
    const killed = await killCgroup(await daemonCgroupDirs());
    assert.ok(d.proc?.pid !== undefined && killed.includes(d.proc.pid), 'berthd was not in its cgroup');
    await d.kill9();
    for (const [id, pid] of monitors) assert.ok(await isRunning(pid), `conmon of ${id} was killed`);

    await d.start();
    for (const id of containers) assert.equal((await containerStatus(d.cri, id)).state, 'CONTAINER_RUNNING');
    for (const [id, pid] of monitors) {
      assert.deepEqual(await d.conmonPids(id), [pid]);
      await assertInMonitorsCgroup(pid);
    }
    for (const [p, id] of [
      [oldPod, oldLogger],
      [pod, logger],
    ] as const) {
      await assertLogGrows(logPathOf(p, 'logger'), id);
    }

    await execSync(d.cri, waiter, ['touch', '/tmp/go']);
    const exited = await waitContainerState(d.cri, waiter, 'CONTAINER_EXITED');
    assert.equal(exited.exit_code, EXIT_CODE);

    await stopAndRemovePod(d.cri, oldPod.id);
    await stopAndRemovePod(d.cri, pod.id);
    assert.deepEqual(await d.conmonPids(), []);
    assert.deepEqual(await d.runcContainers(), []);
    const stillMonitored = await processesInAny(await monitorsCgroupDirs());
    for (const pid of monitors.values()) assert.ok(!stillMonitored.includes(pid), `conmon ${pid} left`);
  });
});

async function writeConfig(path: string, monitorCgroup: string): Promise<void> {
  await writeFile(path, `[runtime]\nmonitor_cgroup = "${monitorCgroup}"\n`, { mode: 0o644 });
}

function loggerConfig(name: string, image: string): Record<string, unknown> {
  return containerConfig(name, image, { command: LOGGER });
}

function logPathOf(pod: Pod, container: string): string {
  const dir = pod.config.log_directory;
  assert.ok(typeof dir === 'string', `pod ${pod.id} has no log directory`);
  return join(dir, container, '0.log');
}

async function assertLogGrows(path: string, id: string): Promise<void> {
  const before = (await stat(path)).size;
  await waitFor(async () => (await stat(path)).size > before, 10_000).catch(() => {
    throw new Error(`the log of ${id} stopped growing at ${before} bytes`);
  });
}

/** Every hierarchy the test runs in, where berthd was put too. */
async function hierarchies(): Promise<CgroupMembership[]> {
  return membershipsOf('self');
}

async function daemonCgroupDirs(): Promise<string[]> {
  return (await hierarchies()).map((h) => join(h.mountPoint, DAEMON_CGROUP));
}

async function monitorsCgroupDirs(): Promise<string[]> {
  return (await hierarchies()).map((h) => join(h.mountPoint, MONITORS_CGROUP));
}

async function processesInAny(dirs: readonly string[]): Promise<number[]> {
  const pids = new Set<number>();
  for (const dir of dirs) for (const pid of await processesIn(dir).catch(() => [])) pids.add(pid);
  return [...pids];
}

/** SIGKILLs every process in the cgroups until they are empty; returns the pids killed. */
async function killCgroup(dirs: readonly string[]): Promise<number[]> {
  const killed = new Set<number>();
  await waitFor(async () => {
    const left = await processesInAny(dirs);
    for (const pid of left) {
      killQuietly(pid);
      killed.add(pid);
    }
    if (left.length > 0) await sleep(20);
    return left.length === 0;
  }, 10_000);
  return [...killed];
}

/** The conmon is in the monitors' cgroup in every hierarchy berthd is in, and nowhere else. */
async function assertInMonitorsCgroup(pid: number): Promise<void> {
  const expected = (await hierarchies()).map((h) => h.mountPoint).sort();
  const memberships = await membershipsOf(pid);
  assert.deepEqual(
    memberships.map((m) => m.mountPoint).sort(),
    expected,
    `conmon ${pid}: ${await readFile(`/proc/${pid}/cgroup`, 'utf8')}`,
  );
  for (const m of memberships) {
    assert.equal(m.path, `/${MONITORS_CGROUP}`, `conmon ${pid} in ${m.mountPoint}${m.path}`);
  }
}
