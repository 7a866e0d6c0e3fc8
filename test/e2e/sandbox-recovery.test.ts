/**
 * berthd's start-up repair (src/sandbox/recovery.ts) end to end: a real berthd over its CRI
 * socket, real netns pins, CNI plugins (bridge + host-local), runc and catatonit. Each test
 * breaks the daemon the way a crash, a kill -9 or a reboot would, starts it again and checks
 * the host and SQLite agree with what the API reports. Needs root; sends no traffic.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { run } from '../../src/exec.js';
import { isMounted } from '../../src/netns/index.js';
import { isRunning } from '../../src/process/index.js';
import { REMOVED_DIR_PREFIX } from '../../src/sandbox/files.js';
import { hierarchiesHolding, hostCgroups } from '../harness/cgroups.js';
import { changeRows, databasePath, selectRows } from '../harness/database.js';
import {
  FIXTURES,
  PAUSE_BEFORE_STEP_ENV,
  SHARED_PID_LINUX,
  TestDaemon,
  podConfig,
  useDaemon,
} from '../harness/daemon.js';
import { rejectsGrpc } from '../harness/grpc.js';
import { assertLogged, startAndLog, type LogEntry } from '../harness/log.js';
import { mountPointsBelow } from '../harness/mounts.js';
import { nsInode } from '../harness/namespaces.js';
import { podStatus, runPodSandbox, stopAndRemovePod } from '../harness/pods.js';
import { writeRuncWrapper } from '../harness/runtime-wrapper.js';
import { rootSkip as skip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 300_000;
const MODES = ['auto', 'always'] as const;
type PodInfraMode = (typeof MODES)[number];
/** Every step RunPodSandbox can be paused before, in the order it takes them, per pod_infra mode. */
const PAUSE_STEPS = {
  always: ['netns', 'cni-add', 'infra-create', 'infra-start'],
  auto: ['namespaces', 'cni-add'],
} as const satisfies Record<PodInfraMode, readonly string[]>;
type PauseStep = (typeof PAUSE_STEPS)[PodInfraMode][number];

/**
 * A pod as kubelet sends one that does not share its pid namespace: with pod_infra = auto it runs
 * no infra process, with always it runs one.
 */
function kubeletPod(name: string): Record<string, unknown> {
  return podConfig(name, { linux: { security_context: { namespace_options: { pid: 'CONTAINER' } } } });
}

/** The ipc and uts pins of a pod without infra. */
function pinsOf(daemon: TestDaemon, id: string): string[] {
  const dir = join(daemon.rootDir, 'sandboxes', id, 'ns');
  return [join(dir, 'ipc'), join(dir, 'uts')];
}

interface WireStatus {
  id: string;
  state: string;
  created_at: string;
  network: { ip: string };
}

interface RowSummary {
  id: string;
  state: string;
  step: string;
  network_state: string;
  pid: number;
}

// ---------------------------------------------------------------------------------------------
// Talking to the daemon

async function listedPods(daemon: TestDaemon): Promise<{ id: string; state: string }[]> {
  const res = await daemon.cri.call<{ items: { id: string; state: string }[] }>('ListPodSandbox', {});
  return res.items;
}

async function restart(daemon: TestDaemon, env: Record<string, string> = {}): Promise<LogEntry[]> {
  await daemon.stop();
  return (await startAndLog(daemon, env)).log;
}

// ---------------------------------------------------------------------------------------------
// Looking at the host

function sandboxRows(daemon: TestDaemon): RowSummary[] {
  if (!existsSync(databasePath(daemon.rootDir))) return [];
  return selectRows(daemon.rootDir, 'SELECT id, state, step, network_state, pid FROM sandboxes ORDER BY id');
}

/** Mount points inside the netns dir (the dir itself is bind-mounted on itself, and stays). */
async function netnsMounts(daemon: TestDaemon): Promise<string[]> {
  return mountPointsBelow(daemon.netnsDir);
}

async function assertNothingLeft(daemon: TestDaemon): Promise<void> {
  assert.deepEqual(await listedPods(daemon), [], 'ListPodSandbox');
  assert.deepEqual(sandboxRows(daemon), [], 'rows in SQLite');
  assert.deepEqual(await daemon.netnsFiles(), [], 'files in the netns dir');
  assert.deepEqual(await netnsMounts(daemon), [], 'mounts in the netns dir');
  assert.deepEqual(await daemon.leasedIps(), [], 'host-local leases');
  assert.deepEqual(await daemon.runcContainers(), [], 'runc containers');
  assert.deepEqual(await daemon.sandboxDirs(), [], 'sandbox dirs');
  assert.deepEqual(
    await mountPointsBelow(daemon.rootDir),
    [],
    'mounts (shm, namespace pins) in the root dir',
  );
}

/** Field 22 of /proc/<pid>/stat: tells a process from a later one that reused its pid. */
async function startTime(pid: number): Promise<string> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const value = fields[19];
  assert.ok(value, `cannot parse /proc/${pid}/stat`);
  return value;
}

/** A pod that shares its pid namespace: it runs an infra process in either pod_infra mode. */
function infraPod(name: string): Record<string, unknown> {
  return podConfig(name, { linux: SHARED_PID_LINUX });
}

async function killProcess(pid: number): Promise<void> {
  assert.ok(pid > 0 && (await isRunning(pid)), `infra pid ${pid} is not running`);
  process.kill(pid, 'SIGKILL');
  await waitFor(async () => !(await isRunning(pid)), 10_000);
}

async function infraPid(daemon: TestDaemon, id: string): Promise<number> {
  const { info } = await podStatus<WireStatus>(daemon.cri, id);
  assert.ok(info.pid > 0, `sandbox ${id} has no infra pid`);
  return info.pid;
}

/** Pids whose parent is `pid`. */
async function childPids(pid: number): Promise<number[]> {
  const children: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => '');
    const ppid = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1];
    if (ppid === String(pid)) children.push(Number(name));
  }
  return children;
}

/**
 * Waits until berthd has run no program (CNI plugin, runc, unshare) and its rows have not changed
 * for a while: what it can still do on its own is done.
 */
async function waitUntilIdle(daemon: TestDaemon): Promise<void> {
  const pid = daemon.proc?.pid;
  assert.ok(pid, 'daemon not running');
  let last = '';
  let quietPolls = 0;
  await waitFor(
    async () => {
      const busy = (await childPids(pid)).length > 0;
      const snapshot = JSON.stringify(sandboxRows(daemon));
      quietPolls = !busy && snapshot === last ? quietPolls + 1 : 0;
      last = snapshot;
      return quietPolls >= 5;
    },
    30_000,
    { pollMs: 100 },
  );
}

const hex = (): string => randomBytes(4).toString('hex');

// ---------------------------------------------------------------------------------------------

for (const mode of MODES)
  describe(`restarts keep running pods (pod_infra = ${mode})`, { skip, timeout: SUITE_TIMEOUT_MS }, () => {
    const daemon = useDaemon({ extraArgs: ['--pod-infra', mode] });
    const infra = mode === 'always';

    const bounces: [string, (d: TestDaemon) => Promise<unknown>][] = [
      ['SIGTERM', (d) => restart(d)],
      [
        'kill -9',
        async (d) => {
          await d.kill9();
          await startAndLog(d);
        },
      ],
    ];
    for (const [how, bounce] of bounces) {
      test(`a ${how} restart leaves the pod READY with the same infra process or pins`, async () => {
        const d = daemon();
        const id = await runPodSandbox(d.cri, kubeletPod(`keep-${hex()}`));
        const before = await podStatus<WireStatus>(d.cri, id);
        assert.equal(before.status.state, 'SANDBOX_READY');
        assert.match(
          before.status.network.ip,
          new RegExp(`^${d.network.prefix.replaceAll('.', '\\.')}\\.\\d+$`),
        );
        const started = infra ? await startTime(before.info.pid) : '';
        const pinInodes = infra ? [] : await Promise.all(pinsOf(d, id).map(nsInode));

        await bounce(d);

        const now = await podStatus<WireStatus>(d.cri, id);
        assert.deepEqual(now.status, before.status);
        assert.equal(now.info.pid, before.info.pid);
        assert.equal(now.info.networkState, 'READY');
        if (infra) {
          assert.ok(await isRunning(before.info.pid), 'infra process died');
          assert.equal(await startTime(before.info.pid), started, 'infra process was replaced');
        } else {
          assert.equal(before.info.pid, 0, 'a pod without infra has no pid');
          assert.deepEqual(
            await Promise.all(pinsOf(d, id).map(nsInode)),
            pinInodes,
            'the same pinned namespaces',
          );
        }
        assert.ok(await isMounted(before.info.sandboxKey ?? ''), 'netns pin unmounted');
        assert.deepEqual(await d.leasedIps(), [before.status.network.ip]);

        await stopAndRemovePod(d.cri, id);
        await assertNothingLeft(d);
      });
    }

    if (infra)
      test('an infra process that died while the daemon was down makes the pod NOTREADY', async () => {
        const d = daemon();
        const id = await runPodSandbox(d.cri, kubeletPod(`dies-${hex()}`));
        const pid = await infraPid(d, id);
        await d.kill9();
        await killProcess(pid);

        const { log } = await startAndLog(d);

        const { status, info } = await podStatus<WireStatus>(d.cri, id);
        assert.equal(status.state, 'SANDBOX_NOTREADY');
        assert.equal(info.pid, 0);
        assert.deepEqual(
          (await listedPods(d)).map((p) => [p.id, p.state]),
          [[id, 'SANDBOX_NOTREADY']],
        );
        assertLogged(log, 'infra process is gone: sandbox is NOT READY', { sandbox: id });
        await stopAndRemovePod(d.cri, id);
        await assertNothingLeft(d);
      });

    if (!infra)
      test('namespace pins unmounted while the daemon was down make the pod NOTREADY', async () => {
        const d = daemon();
        const id = await runPodSandbox(d.cri, kubeletPod(`unpinned-${hex()}`));
        await d.kill9();
        const [ipcPin] = pinsOf(d, id);
        assert.ok(ipcPin);
        await run('umount', [ipcPin], { timeoutMs: 10_000 });

        const { log } = await startAndLog(d);

        const { status, info } = await podStatus<WireStatus>(d.cri, id);
        assert.equal(status.state, 'SANDBOX_NOTREADY');
        assert.equal(info.pid, 0);
        assertLogged(log, 'namespace pins are gone: sandbox is NOT READY', { sandbox: id });
        await stopAndRemovePod(d.cri, id);
        await assertNothingLeft(d);
      });
  });

describe('a CNI plugin that fails ADD', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const daemon = useDaemon({ cni: 'bridge+fail' });

  test('fails RunPodSandbox naming the step and the plugin, and leaves nothing', async () => {
    const d = daemon();
    const err = await rejectsGrpc(d.cri.call('RunPodSandbox', { config: infraPod(`fail-${hex()}`) }));
    assert.match(err.details, /refused by fixture/);
    assert.match(err.details, /\bcni-add\b/);
    assert.match(err.details, /berth-test-fail/);
    // bridge took a lease before berth-test-fail refused: the undo's DEL must have released it.
    await assertNothingLeft(d);
  });
});

for (const mode of MODES)
  describe(
    `kill -9 in the middle of RunPodSandbox (pod_infra = ${mode})`,
    { skip, timeout: SUITE_TIMEOUT_MS },
    () => {
      const daemon = useDaemon({ extraArgs: ['--pod-infra', mode] });

      /**
       * What must be done, and what must not have begun, when RunPodSandbox is paused before `step`.
       * Only what holds whether steps run one after another or side by side: e.g. with infra and CNI
       * in parallel, pausing before 'cni-add' may leave a running infra, so that is not checked.
       */
      async function assertStateBefore(d: TestDaemon, step: PauseStep, id: string): Promise<void> {
        const pinned = await isMounted(join(d.netnsDir, `berth-${id}`));
        const leases = (await d.leasedIps()).length;
        assert.deepEqual(await d.sandboxDirs(), [id], 'sandbox dir');
        const pinsMounted = await Promise.all(pinsOf(d, id).map(isMounted));
        switch (step) {
          case 'namespaces':
            assert.ok(!pinned, 'netns pinned before its step');
            assert.deepEqual(pinsMounted, [false, false], 'ipc and uts pinned before their step');
            assert.equal(leases, 0, 'lease before namespaces');
            assert.deepEqual(await d.runcContainers(), [], 'a runc container for a pod without infra');
            break;
          case 'netns':
            assert.ok(!pinned, 'netns pinned before its step');
            assert.equal(leases, 0, 'lease before netns');
            assert.deepEqual(await d.runcContainers(), [], 'runc container before netns');
            break;
          case 'cni-add':
            assert.ok(pinned, 'netns not pinned');
            assert.equal(leases, 0, 'lease taken before cni-add');
            if (mode === 'auto') assert.deepEqual(pinsMounted, [true, true], 'ipc and uts not pinned');
            break;
          case 'infra-create':
            assert.ok(pinned, 'netns not pinned');
            assert.equal(leases, 1, 'CNI ADD not done');
            assert.deepEqual(await d.runcContainers(), [], 'runc container before infra-create');
            break;
          case 'infra-start':
            assert.ok(pinned, 'netns not pinned');
            assert.equal(leases, 1, 'CNI ADD not done');
            assert.deepEqual(await d.runcContainers(), [id], 'runc create not done');
            assert.equal(await d.runcStatus(id), 'created', 'infra started before infra-start');
            break;
        }
      }

      for (const step of PAUSE_STEPS[mode]) {
        test(`before '${step}': start-up rolls the sandbox back, and the pod can then be run`, async () => {
          const d = daemon();
          const config = kubeletPod(`crash-${step}-${hex()}`);
          await restart(d, { [PAUSE_BEFORE_STEP_ENV]: step });
          // The rpc blocks for good at the pause point; it fails once the daemon is killed.
          const pending = d.cri.call('RunPodSandbox', { config }).catch((err: unknown) => err);
          const pauseFile = await d.pausedBefore(step);
          // Steps running beside the paused one finish first, so the kill finds a settled state.
          await waitUntilIdle(d);

          const [row] = sandboxRows(d);
          assert.ok(row, 'no journal row');
          assert.equal(row.state, 'CREATING');
          await assertStateBefore(d, step, row.id);
          assert.deepEqual(await listedPods(d), [], 'a CREATING sandbox is listed');

          await d.kill9();
          assert.ok((await pending) instanceof Error, 'the paused RunPodSandbox succeeded');
          await rm(pauseFile);

          const { log } = await startAndLog(d);
          assertLogged(log, 'rolled back a RunPodSandbox interrupted by a daemon exit', { sandbox: row.id });
          await assertNothingLeft(d);

          const id = (await d.cri.call<{ pod_sandbox_id: string }>('RunPodSandbox', { config }))
            .pod_sandbox_id;
          assert.notEqual(id, row.id);
          assert.equal((await podStatus<WireStatus>(d.cri, id)).status.state, 'SANDBOX_READY');
          await stopAndRemovePod(d.cri, id);
          await assertNothingLeft(d);
        });
      }
    },
  );

/**
 * The netns dir is on tmpfs by default (/var/run/netns), so a reboot usually takes the pin
 * files with it; on disk, only their mounts go.
 */
const pinFates: [string, (path: string) => Promise<void>][] = [
  ['unmounted', (path) => run('umount', [path], { timeoutMs: 10_000 }).then(() => undefined)],
  [
    'gone',
    async (path) => {
      await run('umount', [path], { timeoutMs: 10_000 });
      await rm(path);
    },
  ],
];
for (const mode of MODES)
  for (const [fate, reboot] of pinFates) {
    describe(
      `a reboot (netns pins ${fate}, pod_infra = ${mode})`,
      { skip, timeout: SUITE_TIMEOUT_MS },
      () => {
        const daemon = useDaemon({ extraArgs: ['--pod-infra', mode] });

        test('makes pods NOTREADY and releases their leases', async () => {
          const d = daemon();
          const ids = [
            await runPodSandbox(d.cri, kubeletPod(`reboot-a-${hex()}`)),
            await runPodSandbox(d.cri, kubeletPod(`reboot-b-${hex()}`)),
          ];
          const statuses = await Promise.all(ids.map((id) => podStatus<WireStatus>(d.cri, id)));
          assert.equal((await d.leasedIps()).length, 2);

          // What a reboot does to berth's world: the daemon and every pod process die, the netns
          // pins lose their mounts, and the boot marker on tmpfs is gone. The SQLite file survives.
          await d.kill9();
          for (const [i, { info }] of statuses.entries()) {
            if (mode === 'always') await killProcess(info.pid);
            // The ipc and uts pins live in the sandbox dir, on disk: only their mounts go.
            else for (const pin of pinsOf(d, ids[i] ?? '')) await run('umount', [pin], { timeoutMs: 10_000 });
            assert.ok(info.sandboxKey);
            await reboot(info.sandboxKey);
          }
          await d.forgetBoot();

          const { log } = await startAndLog(d);

          assertLogged(log, 'first start since boot: pod processes and netns mounts are gone');
          for (const id of ids) {
            assertLogged(log, 'released the network of a sandbox lost in a reboot', { sandbox: id });
            const { status, info } = await podStatus<WireStatus>(d.cri, id);
            assert.equal(status.state, 'SANDBOX_NOTREADY');
            assert.equal(info.pid, 0);
            assert.equal(info.networkState, 'TORN_DOWN');
          }
          assert.deepEqual(await d.leasedIps(), []);
          assert.deepEqual(await netnsMounts(d), []);
          assert.deepEqual(await d.runcContainers(), []);

          // A second start in the same boot is no reboot.
          await d.kill9();
          const { log: again } = await startAndLog(d);
          assert.ok(!again.some((e) => e.msg?.startsWith('first start since boot')), 'reboot detected twice');

          for (const id of ids) await d.cri.call('RemovePodSandbox', { pod_sandbox_id: id });
          await assertNothingLeft(d);
        });
      },
    );
  }

describe('orphans', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const daemon = useDaemon();

  test('start-up removes netns pins, runc containers and dirs that no row records', async () => {
    const d = daemon();
    const kept = await runPodSandbox(d.cri, infraPod(`kept-${hex()}`));
    const keptBefore = await podStatus<WireStatus>(d.cri, kept);
    const lost = await runPodSandbox(d.cri, infraPod(`lost-${hex()}`));
    const lostPid = await infraPid(d, lost);
    await d.kill9();

    // A row lost with the daemon down: its netns pin, runc container and dir are orphans.
    assert.equal(changeRows(d.rootDir, 'DELETE FROM sandboxes WHERE id = ?', lost), 1);
    // A pin of berth's naming that nothing ever recorded, and a file that is not berth's.
    const orphanNetns = join(d.netnsDir, `berth-orphan-${hex()}`);
    await writeFile(orphanNetns, '');
    await run('unshare', [`--net=${orphanNetns}`, 'true'], { timeoutMs: 10_000 });
    assert.ok(await isMounted(orphanNetns));
    const foreign = join(d.netnsDir, `other-${hex()}`);
    await writeFile(foreign, '');
    // The dir of a removed pod that a kill -9 caught while it was being deleted.
    const setAside = `${REMOVED_DIR_PREFIX}${hex()}-0badf00d`;
    await mkdir(join(d.rootDir, 'sandboxes', setAside, 'ns'), { recursive: true });
    await writeFile(join(d.rootDir, 'sandboxes', setAside, 'hostname'), 'gone\n');

    const { log } = await startAndLog(d);

    const lostNetns = join(d.netnsDir, `berth-${lost}`);
    for (const path of [orphanNetns, lostNetns]) {
      assert.ok(!existsSync(path), `${path} still exists`);
      assert.ok(!(await isMounted(path)), `${path} still mounted`);
      assertLogged(log, 'removed a netns pin with no sandbox record', { netns: path });
    }
    assert.ok(existsSync(foreign), 'a netns dir file without the berth- prefix was removed');
    await rm(foreign);
    assert.deepEqual(await d.runcContainers(), [kept]);
    assertLogged(log, 'deleted a runc container with no sandbox or container record', { container: lost });
    assert.ok(!(await isRunning(lostPid)), 'the orphan infra process still runs');
    const cgroups = await hostCgroups();
    const lostCgroup = cgroups.podPath(cgroups.podCgroupFor(lost));
    assert.deepEqual(await hierarchiesHolding(lostCgroup), [], `the lost pod's cgroup ${lostCgroup} is left`);
    assert.deepEqual(await d.sandboxDirs(), [kept]);
    assertLogged(log, 'removed a sandbox dir with no record', { dir: lost });
    assertLogged(log, 'removed a sandbox dir with no record', { dir: setAside });

    // The recorded pod is untouched.
    assert.deepEqual(await podStatus<WireStatus>(d.cri, kept), keptBefore);
    assert.ok(await isRunning(keptBefore.info.pid));
    assert.deepEqual(await netnsMounts(d), [keptBefore.info.sandboxKey]);
    await stopAndRemovePod(d.cri, kept);
    // Not checked: the lost pod's host-local lease. Without its row berth has no CNI config and
    // result to run DEL with, so nothing releases it (the describe's daemon takes it away).
    assert.deepEqual(sandboxRows(d), []);
    assert.deepEqual(await d.netnsFiles(), []);
    assert.deepEqual(await netnsMounts(d), []);
    assert.deepEqual(await d.runcContainers(), []);
    assert.deepEqual(await d.sandboxDirs(), []);
  });
});

describe('a CNI DEL that fails', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const daemon = useDaemon();
  let failDelFile = '';
  let callLog = '';

  /** The harness's bridge network with berth-test-flaky chained after it. */
  before(async () => {
    const d = daemon();
    failDelFile = join(d.base, 'fail-del');
    callLog = join(d.base, 'flaky-calls');
    assert.ok(existsSync(join(FIXTURES, 'cni', 'berth-test-flaky')));
    await d.writeBridgeConfig([{ type: 'berth-test-flaky', failDelFile, callLogFile: callLog }]);
  });

  /** How many DELs berth-test-flaky has seen for the sandbox. */
  async function flakyDels(id: string): Promise<number> {
    const text = await readFile(callLog, 'utf8').catch(() => '');
    return text.split('\n').filter((line) => line === `DEL ${id}`).length;
  }

  test('is retried by Stop, Remove and after a restart, never forgotten', async () => {
    const d = daemon();
    const id = await runPodSandbox(d.cri, infraPod(`flaky-${hex()}`));
    const { status } = await podStatus<WireStatus>(d.cri, id);
    assert.deepEqual(await d.leasedIps(), [status.network.ip]);
    assert.equal(await flakyDels(id), 0);
    await writeFile(failDelFile, '');

    const stopErr = await rejectsGrpc(d.cri.call('StopPodSandbox', { pod_sandbox_id: id }));
    assert.match(stopErr.details, /\bcni-del\b/);
    assert.match(stopErr.details, /berth-test-flaky: DEL refused/);
    assert.equal(await flakyDels(id), 1);
    // libcni stops a chain's DEL at the first failure: the IP must not go to another pod while a
    // plugin chained after the IPAM one (portmap, firewall, ...) may still hold state for it.
    assert.deepEqual(await d.leasedIps(), [status.network.ip], 'lease released by a failed DEL');
    let now = await podStatus<WireStatus>(d.cri, id);
    assert.equal(now.status.state, 'SANDBOX_NOTREADY');
    assert.equal(now.info.networkState, 'READY', 'a failed DEL marked the network torn down');

    const removeErr = await rejectsGrpc(d.cri.call('RemovePodSandbox', { pod_sandbox_id: id }));
    assert.match(removeErr.details, /berth-test-flaky: DEL refused/);
    assert.equal(await flakyDels(id), 2, 'Remove did not retry the DEL');
    assert.deepEqual(
      sandboxRows(d).map((r) => [r.id, r.network_state]),
      [[id, 'READY']],
    );

    await restart(d);
    assert.deepEqual(
      (await listedPods(d)).map((p) => [p.id, p.state]),
      [[id, 'SANDBOX_NOTREADY']],
    );
    now = await podStatus<WireStatus>(d.cri, id);
    assert.equal(now.info.networkState, 'READY');

    await rm(failDelFile);
    await d.cri.call('StopPodSandbox', { pod_sandbox_id: id });
    assert.equal(await flakyDels(id), 3);
    assert.equal((await podStatus<WireStatus>(d.cri, id)).info.networkState, 'TORN_DOWN');
    assert.deepEqual(await d.leasedIps(), []);
    await d.cri.call('RemovePodSandbox', { pod_sandbox_id: id });
    await assertNothingLeft(d);
  });
});

/**
 * A runc stand-in at `<flag>.sh` for the suite: while file `flag` exists, it runs `act` (sh) for
 * each argument matching `verbs` (a case pattern) before the real runc; both are removed after.
 */
function runcWrapperWhile(flag: string, verbs: string, act: string): string {
  const wrapper = `${flag}.sh`;
  before(async () => {
    await writeRuncWrapper(wrapper, [
      `if [ -e '${flag}' ]; then`,
      '  for arg in "$@"; do',
      `    case "$arg" in ${verbs}) ${act};; esac`,
      '  done',
      'fi',
    ]);
  });
  after(async () => {
    await rm(flag, { force: true });
    await rm(wrapper, { force: true });
  });
  return wrapper;
}

describe('a runc that cannot report at start-up', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  // runc's `state` and `list` fail while this file exists; every other verb runs the real runc.
  const failFile = join('/run', `berth-test-runc-fails-${hex()}`);
  const wrapper = runcWrapperWhile(failFile, 'state|list', 'echo "runc: simulated failure" >&2; exit 1');
  const daemon = useDaemon({ extraArgs: ['--runtime', wrapper] });

  test('a failing runc list or state leaves a live pod READY, logged, rather than marking it dead', async () => {
    const d = daemon();
    const id = await runPodSandbox(d.cri, infraPod(`unchecked-${hex()}`));
    const before = await podStatus<WireStatus>(d.cri, id);
    await d.kill9();
    await writeFile(failFile, '');
    const { log } = await startAndLog(d);
    await rm(failFile, { force: true });
    assertLogged(log, 'runc list failed at start-up; the sandbox is left as it was', { sandbox: id });
    const after = await podStatus<WireStatus>(d.cri, id);
    assert.equal(after.status.state, 'SANDBOX_READY');
    assert.ok(await isRunning(before.info.pid), 'the infra was killed');
    await stopAndRemovePod(d.cri, id);
  });
});

describe('start-up asks each runc for its containers once', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  // Every `runc list` is logged while the log exists; every call then runs the real runc.
  const callLog = join('/run', `berth-test-runc-lists-${hex()}`);
  const wrapper = runcWrapperWhile(callLog, 'list', `echo list >> '${callLog}'`);
  const daemon = useDaemon({ extraArgs: ['--runtime', wrapper] });

  test('one `runc list` serves both the infra checks and the orphan sweep', async () => {
    const d = daemon();
    const id = await runPodSandbox(d.cri, infraPod(`listed-${hex()}`));
    await d.kill9();
    await writeFile(callLog, '');
    await startAndLog(d);
    const lists = (await readFile(callLog, 'utf8')).split('\n').filter(Boolean);
    await rm(callLog, { force: true });
    assert.equal(lists.length, 1);
    assert.equal((await podStatus<WireStatus>(d.cri, id)).status.state, 'SANDBOX_READY');
    await stopAndRemovePod(d.cri, id);
  });
});
