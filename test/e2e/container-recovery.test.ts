/**
 * Containers across berthd crashes, end to end: a real berthd over its CRI socket, an image from a
 * real docker-registry on 127.0.0.1, containers run by runc under conmon. Each test breaks the
 * daemon the way kill -9, a dead monitor or a reboot would, starts it again, and checks that what
 * the API reports agrees with the host, and that nothing is left behind once the pod is removed:
 * no container dirs or rootfs mounts, no runc containers, no conmon, no exit or persist files.
 * Windows no test hook reaches (inside `runc create` or `runc start`) are opened by a runc wrapper
 * that holds those calls. Needs root. Traffic goes to loopback only.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { lstat, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, describe, test, type TestContext } from 'node:test';
import { status } from '@grpc/grpc-js';
import { REMOVE_FILES_STEP } from '../../src/container/teardown.js';
import { run } from '../../src/exec.js';
import { readMountInfo } from '../../src/mounts/mountinfo.js';
import { isRunning, parentPid } from '../../src/process/index.js';
import { PAUSE_BEFORE_STEP_ENV, TestDaemon, useDaemon } from '../harness/daemon.js';
import { changeRows, selectRows } from '../harness/database.js';
import { exists, namesIn } from '../harness/files.js';
import { rejectsWith } from '../harness/grpc.js';
import { useBusyboxImage } from '../harness/images.js';
import { assertLogged, startAndLog } from '../harness/log.js';
import {
  containerConfig,
  containerInfo,
  containerStatus,
  createContainer,
  execSync,
  runPod,
  startContainer,
  waitContainerState,
  type Pod,
} from '../harness/pods.js';
import { writeRuncWrapper } from '../harness/runtime-wrapper.js';
import { registrySkip as skip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 300_000;
/** CreateContainer's steps, in order: src/container/create.ts runs them, teardown.ts undoes them. */
const CREATE_STEPS = ['rootfs', 'spec', 'monitor'] as const;
type CreateStep = (typeof CREATE_STEPS)[number];

interface ContainerRowSummary {
  id: string;
  state: string;
  step: string;
  monitor_pid: number;
}

/** The test image (busybox, Cmd `sleep 1000`), pushed once for the whole file. */
let imageRef: () => string;

describe('containers across berthd crashes and reboots', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  imageRef = useBusyboxImage('berth/recovery');

  describe('with an unmodified runtime', () => {
    const daemon = useDaemon({}, pullTestImage);

    for (const step of CREATE_STEPS) {
      test(`kill -9 while CreateContainer is before '${step}': rolled back at start-up, pod still works`, async (t) => {
        const d = daemon();
        const pod = await runPodFor(t, d, `pause-${step}`);
        await d.stop();
        await startAndLog(d, { [PAUSE_BEFORE_STEP_ENV]: step });
        // The rpc blocks for good at the pause point; it fails once the daemon is killed.
        const pending = create(d, pod, 'paused').catch((err: unknown) => err);
        const pauseFile = await d.pausedBefore(step);

        const [row] = containerRows(d);
        assert.ok(row, 'no journal row');
        assert.equal(row.state, 'CREATING');
        assert.equal(row.step, step);
        await assertStateBefore(d, step, row.id);
        assert.deepEqual(await listedContainers(d), [], 'a CREATING container is listed');
        await rejectsWith(containerStatus(d.cri, row.id), status.NOT_FOUND);

        await d.kill9();
        assert.ok((await pending) instanceof Error, 'the paused CreateContainer succeeded');
        await rm(pauseFile);

        const { log } = await startAndLog(d);
        assertLogged(log, 'rolled back a CreateContainer interrupted by a daemon exit', {
          container: row.id,
          step,
        });
        assert.deepEqual(await listedContainers(d), []);
        await rejectsWith(containerStatus(d.cri, row.id), status.NOT_FOUND);
        assert.deepEqual(await leftoversOf(d, row.id), []);

        // The pod survived, and the rolled-back row's (pod, name, attempt) reservation is free.
        assert.equal(await podState(d, pod.id), 'SANDBOX_READY');
        await assertPodWorks(d, pod, 'paused');
        await removePod(d, pod);
        await assertHostClean(d);
      });
    }

    test('kill -9 after RemoveContainer returned, before its files were deleted: start-up removes them', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'pause-remove');
      await d.stop();
      await startAndLog(d, { [PAUSE_BEFORE_STEP_ENV]: REMOVE_FILES_STEP });
      const id = await createStarted(d, pod, 'removed');
      const logFile = join(d.base, 'logs', 'pause-remove', 'removed', '0.log');
      await waitFor(() => exists(logFile), 10_000, { what: 'the container log file' });
      await d.cri.call('StopContainer', { container_id: id, timeout: 0 });
      // Returns although the deletion of its files is paused for good.
      await d.cri.call('RemoveContainer', { container_id: id });
      const pauseFile = await d.pausedBefore(REMOVE_FILES_STEP);
      await rejectsWith(containerStatus(d.cri, id), status.NOT_FOUND);
      assert.ok(!containerRows(d).some((row) => row.id === id), 'the row outlived RemoveContainer');
      const left = await leftoversOf(d, id);
      assert.ok(left.includes(`dir ${containerDir(d, id)}`), `no files left to sweep: ${left.join(', ')}`);
      assert.ok(left.includes(`file ${join(d.stateDir, 'exits', id)}`), `no exit file: ${left.join(', ')}`);

      await d.kill9();
      await rm(pauseFile);
      const { log } = await startAndLog(d);
      assertLogged(log, 'removed a container dir with no record', { container: id });
      assert.deepEqual(await leftoversOf(d, id), []);
      // The CRI log file is kubelet's: berth leaves it.
      assert.ok(await exists(logFile), 'the container log file was removed');
      await assertPodWorks(d, pod, 'after-remove');
      await removePod(d, pod);
      await assertHostClean(d);
    });

    test('kill -9 after conmon reported the container, before the row recorded it: rolled back', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'unrecorded');
      const id = await create(d, pod, 'unrecorded');
      assert.equal((await d.conmonPids(id)).length, 1);
      await d.kill9();
      // What CreateContainer leaves when it dies right after conmon.create resolved: the runc
      // container and its conmon exist, the row is still the journal without their pids.
      const update =
        "UPDATE containers SET state = 'CREATING', step = 'monitor', pid = 0, monitor_pid = 0 WHERE id = ?";
      assert.equal(changeRows(d.rootDir, update, id), 1);

      const { log } = await startAndLog(d);
      assertLogged(log, 'rolled back a CreateContainer interrupted by a daemon exit', { container: id });
      await rejectsWith(containerStatus(d.cri, id), status.NOT_FOUND);
      // conmon writes its exit file when its container dies, after the rollback killed it: once
      // that conmon is gone, nothing of the container may stay.
      await waitFor(async () => (await d.conmonPids(id)).length === 0, 30_000, { what: 'conmon to exit' });
      await assertNoLeftovers(d, id);
      await assertPodWorks(d, pod, 'unrecorded');
      await removePod(d, pod);
      await assertHostClean(d);
    });

    test('a running container survives kill -9 of berthd; exec, stop and later exits still work', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'survive');
      const keeps = await createStarted(d, pod, 'keeps');
      // Exits once the host drops /tmp/go into its rootfs: after the restart, and only then.
      const later = await createStarted(d, pod, 'later', {
        command: ['/bin/sh', '-c', 'while ! test -e /tmp/go; do sleep 0.1; done; exit 5'],
      });
      const before = await containerStatus(d.cri, keeps);
      const { pid } = await containerInfo(d.cri, keeps);
      const { rootfs: laterRootfs } = await containerInfo(d.cri, later);
      assert.equal(before.state, 'CONTAINER_RUNNING');

      await d.kill9();
      const { at: restartedAt } = await startAndLog(d);

      assert.deepEqual(await containerStatus(d.cri, keeps), before);
      assert.equal((await containerInfo(d.cri, keeps)).pid, pid);
      assert.ok(await isRunning(pid), 'the container process died with berthd');
      const res = await execSync(d.cri, keeps, ['echo', 'still here']);
      assert.equal(res.exit_code, 0, res.stderr.toString());
      assert.equal(res.stdout.toString(), 'still here\n');

      // An exit after the restart is learnt from conmon's exit file alone: only status is polled.
      assert.equal((await containerStatus(d.cri, later)).state, 'CONTAINER_RUNNING');
      await writeFile(join(laterRootfs, 'tmp', 'go'), '');
      const exited = await waitContainerState(d.cri, later, 'CONTAINER_EXITED');
      assert.equal(exited.exit_code, 5);
      assert.equal(exited.reason, 'Error');
      assert.ok(BigInt(exited.finished_at) > restartedAt, 'finished_at before the restart');

      await d.cri.call('StopContainer', { container_id: keeps, timeout: 10 });
      const stopped = await containerStatus(d.cri, keeps);
      assert.equal(stopped.state, 'CONTAINER_EXITED');
      assert.ok([137, 143].includes(stopped.exit_code), `exit code ${stopped.exit_code}`);
      assert.equal(stopped.reason, 'Error');
      assert.ok(!(await isRunning(pid)));

      await removePod(d, pod);
      assert.deepEqual(await leftoversOf(d, keeps, pid), []);
      assert.deepEqual(await leftoversOf(d, later), []);
      await assertHostClean(d);
    });

    test('a container that exits while berthd is down is EXITED with its code after the restart', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'down-exit');
      const id = await createStarted(d, pod, 'exit9', { command: ['/bin/sh', '-c', 'sleep 1; exit 9'] });
      const before = await containerStatus(d.cri, id);
      assert.equal(before.state, 'CONTAINER_RUNNING');
      await d.kill9();
      await d.waitForExitFile(id);

      const { log, at } = await startAndLog(d);

      assertLogged(log, 'container exited while berthd was down', { container: id, exitCode: 9 });
      const st = await containerStatus(d.cri, id);
      assert.equal(st.state, 'CONTAINER_EXITED');
      assert.equal(st.exit_code, 9);
      assert.equal(st.reason, 'Error');
      assert.equal(st.started_at, before.started_at);
      assert.ok(BigInt(st.finished_at) > BigInt(st.started_at), 'finished_at not after started_at');
      assert.ok(BigInt(st.finished_at) < at, 'finished_at not before the restart');

      await d.cri.call('RemoveContainer', { container_id: id });
      await assertNoLeftovers(d, id);
      await removePod(d, pod);
      await assertHostClean(d);
    });

    test('kill -9 mid-StopContainer: the exit that came meanwhile is recorded and released at start-up', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'mid-stop');
      // Takes its stop signal, then exits only once the host drops /go into its rootfs.
      const id = await createStarted(d, pod, 'mid-stop', {
        command: [
          '/bin/sh',
          '-c',
          'trap "touch /signalled; while ! test -e /go; do sleep 0.1; done; exit 4" TERM; while true; do sleep 1; done',
        ],
      });
      const { pid, rootfs } = await containerInfo(d.cri, id);
      const stopping = d.cri
        .call('StopContainer', { container_id: id, timeout: 60 })
        .catch((err: unknown) => err);
      await waitFor(() => exists(join(rootfs, 'signalled')), 10_000, { what: 'the stop signal' });
      await d.kill9();
      assert.ok((await stopping) instanceof Error, 'StopContainer returned');
      await writeFile(join(rootfs, 'go'), '');
      await d.waitForExitFile(id);

      const { log } = await startAndLog(d);

      // Start-up is the exit's owner for what happened while berthd was down: recorded, released.
      assertLogged(log, 'container exited while berthd was down', { container: id, exitCode: 4 });
      const st = await containerStatus(d.cri, id);
      assert.equal(st.state, 'CONTAINER_EXITED');
      assert.equal(st.exit_code, 4);
      assert.ok(!(await d.runcContainers()).includes(id), 'runc still has the exited container');
      assert.ok(!(await readMountInfo()).some((m) => m.mountPoint === rootfs), 'its rootfs is still mounted');
      assert.ok(!(await isRunning(pid)));
      // kubelet's retry of the stop finds it stopped.
      await d.cri.call('StopContainer', { container_id: id, timeout: 60 });
      assert.deepEqual(await containerStatus(d.cri, id), st);

      await d.cri.call('RemoveContainer', { container_id: id });
      await assertNoLeftovers(d, id, pid);
      await removePod(d, pod);
      await assertHostClean(d);
    });

    test('containers whose conmon was killed are ended and reported exited at start-up', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'no-monitor');
      const alive = await createStarted(d, pod, 'alive');
      const dead = await createStarted(d, pod, 'dead');
      const alivePid = (await containerInfo(d.cri, alive)).pid;
      const deadPid = (await containerInfo(d.cri, dead)).pid;
      const monitors = [await monitorOf(d, alive, alivePid), await monitorOf(d, dead, deadPid)];
      // berthd goes first: its monitor check (every 5 s) would find the conmons gone and end the
      // containers itself (another test's case), as it once did here between the kills.
      await d.kill9();
      for (const monitor of monitors) process.kill(monitor, 'SIGKILL');
      await waitFor(
        async () => !(await Promise.all(monitors.map((m) => isRunning(m)))).some(Boolean),
        10_000,
      );
      assert.ok(await isRunning(alivePid), 'the container died with its conmon');
      // Its process goes too while berthd is down: no exit code is left anywhere.
      process.kill(deadPid, 'SIGKILL');
      await waitFor(async () => !(await isRunning(deadPid)), 10_000);

      const { log } = await startAndLog(d);

      // Without a monitor nobody would record its exit or drain its output: berth ends it, and
      // kubelet sees an exit it can act on (restart policy) instead of a container nobody watches.
      assertLogged(log, 'container had lost its monitor: killed', { container: alive });
      const killed = await containerStatus(d.cri, alive);
      assert.equal(killed.state, 'CONTAINER_EXITED');
      assert.equal(killed.exit_code, 137);
      assert.equal(killed.reason, 'Error');
      assert.match(killed.message, /monitor \(conmon\) was gone/);
      await waitFor(async () => !(await isRunning(alivePid)), 10_000);
      assert.ok(['stopped', ''].includes(await d.runcStatus(alive)), 'runc still runs it');

      // Nothing to kill: the exit happened, its code is lost.
      assertLogged(log, 'container lost: reported exited with code 255', {
        container: dead,
        rebooted: false,
      });
      const lost = await containerStatus(d.cri, dead);
      assert.equal(lost.state, 'CONTAINER_EXITED');
      assert.equal(lost.exit_code, 255);
      assert.equal(lost.reason, 'Unknown');
      assert.match(lost.message, /monitor is gone/);
      assert.ok(!(await d.runcContainers()).includes(dead), 'runc still has the lost container');

      for (const monitor of monitors) assert.ok(!(await isRunning(monitor)));
      await d.cri.call('RemoveContainer', { container_id: alive });
      await assertNoLeftovers(d, alive, alivePid);
      await removePod(d, pod);
      assert.deepEqual(await leftoversOf(d, dead, deadPid), []);
      await assertHostClean(d);
    });

    test('after a reboot, running and created containers are EXITED 255 Unknown; removal cleans all', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'reboot');
      const running = await createStarted(d, pod, 'running');
      const created = await create(d, pod, 'created');
      const done = await createStarted(d, pod, 'done', { command: ['/bin/sh', '-c', 'exit 3'] });
      const doneBefore = await waitContainerState(d.cri, done, 'CONTAINER_EXITED');
      const { pid } = await containerInfo(d.cri, running);

      // What a reboot does to berth's world: berthd, conmon and every container die, mounts go,
      // and the state dir (tmpfs) comes back empty. The root dir with SQLite survives.
      await d.kill9();
      for (const monitor of await d.conmonPids()) process.kill(monitor, 'SIGKILL');
      await waitFor(async () => (await d.conmonPids()).length === 0, 10_000);
      for (const id of await d.runcContainers()) {
        await run('runc', ['--root', d.runcRoot, 'delete', '--force', id], { timeoutMs: 10_000 });
      }
      assert.ok(!(await isRunning(pid)));
      const mounts = (await readMountInfo())
        .map((m) => m.mountPoint)
        .filter((p) => p.startsWith(`${d.rootDir}/`) || p.startsWith(`${d.netnsDir}/`))
        .sort((a, b) => b.length - a.length);
      for (const target of mounts) await run('umount', [target], { timeoutMs: 10_000 });
      for (const name of await readdir(d.stateDir)) await rm(join(d.stateDir, name), { recursive: true });
      await d.forgetBoot();

      const { log } = await startAndLog(d);

      assertLogged(log, 'first start since boot: pod processes and netns mounts are gone');
      for (const id of [running, created]) {
        assertLogged(log, 'container lost: reported exited with code 255', { container: id, rebooted: true });
        const st = await containerStatus(d.cri, id);
        assert.equal(st.state, 'CONTAINER_EXITED', id === running ? 'running' : 'created');
        assert.equal(st.exit_code, 255);
        assert.equal(st.reason, 'Unknown');
        assert.match(st.message, /rebooted/);
        assert.notEqual(st.finished_at, '0');
      }
      // An exit recorded before the reboot is kept as it was.
      assert.deepEqual(await containerStatus(d.cri, done), doneBefore);
      assert.equal(await podState(d, pod.id), 'SANDBOX_NOTREADY');
      assert.deepEqual(await d.runcContainers(), []);

      await d.cri.call('RemoveContainer', { container_id: running });
      await assertNoLeftovers(d, running, pid);
      await removePod(d, pod);
      for (const id of [created, done]) assert.deepEqual(await leftoversOf(d, id), []);
      await assertHostClean(d);
    });

    test('RemovePodSandbox without a Stop first removes running, created and exited containers', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'remove-direct');
      const running = await createStarted(d, pod, 'running');
      const stubborn = await createStarted(d, pod, 'stubborn', {
        command: ['/bin/sh', '-c', 'trap "" TERM; while true; do sleep 1; done'],
      });
      const created = await create(d, pod, 'created');
      const exited = await createStarted(d, pod, 'exited', { command: ['/bin/sh', '-c', 'exit 0'] });
      await waitContainerState(d.cri, exited, 'CONTAINER_EXITED');
      const pids = [(await containerInfo(d.cri, running)).pid, (await containerInfo(d.cri, stubborn)).pid];
      assert.deepEqual(await listedContainers(d, pod.id), [running, stubborn, created, exited].sort());

      await removePod(d, pod);

      for (const id of [running, stubborn, created, exited]) {
        await rejectsWith(containerStatus(d.cri, id), status.NOT_FOUND);
        assert.deepEqual(await leftoversOf(d, id), [], id);
      }
      for (const pid of pids) assert.ok(!(await isRunning(pid)), `process ${pid} still runs`);
      await assertHostClean(d);
    });

    test('Stop and RemovePodSandbox work on containers whose conmon died while berthd runs', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'monitor-dies');
      const runs = await createStarted(d, pod, 'runs');
      const ends = await createStarted(d, pod, 'ends');
      const runsPid = (await containerInfo(d.cri, runs)).pid;
      const endsPid = (await containerInfo(d.cri, ends)).pid;
      await killMonitor(d, runs, runsPid);
      await killMonitor(d, ends, endsPid);
      process.kill(endsPid, 'SIGKILL');
      await waitFor(async () => !(await isRunning(endsPid)), 10_000);

      // Neither may wait for an exit file nobody will write, nor fail for want of one.
      await d.cri.call('StopContainer', { container_id: runs, timeout: 0 });
      const stopped = await containerStatus(d.cri, runs);
      assert.equal(stopped.state, 'CONTAINER_EXITED');
      assert.equal(stopped.exit_code, 137);
      assert.ok(!(await isRunning(runsPid)), 'StopContainer left the process running');
      await d.cri.call('StopContainer', { container_id: ends, timeout: 0 });
      assert.equal((await containerStatus(d.cri, ends)).state, 'CONTAINER_EXITED');

      await removePod(d, pod);
      assert.deepEqual(await leftoversOf(d, runs, runsPid), []);
      assert.deepEqual(await leftoversOf(d, ends, endsPid), []);
      await assertHostClean(d);
    });

    test('the exit of a container whose conmon died is reported without any call but ContainerStatus', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'monitor-dies-alone');
      const id = await createStarted(d, pod, 'ends');
      const { pid } = await containerInfo(d.cri, id);
      // Both at once: berthd's monitor check, finding conmon gone and the process still there,
      // kills the process itself and reports 137 (settle.ts); with the process gone too, its code is
      // lost. On a loaded machine the check can still fall between the two kills: then it is 137.
      const monitor = await monitorOf(d, id, pid);
      process.kill(monitor, 'SIGKILL');
      process.kill(pid, 'SIGKILL');
      await waitFor(async () => !(await isRunning(monitor)) && !(await isRunning(pid)), 10_000);

      // kubelet polls ContainerStatus and ListContainers (PLEG relists every second).
      const ended = await waitContainerState(d.cri, id, 'CONTAINER_EXITED');
      if (ended.exit_code === 137) assert.match(ended.message ?? '', /killed by berthd: its monitor/);
      else assert.deepEqual([ended.exit_code, ended.reason], [255, 'Unknown']);
      const exited = await d.cri.call<{ containers: { id: string }[] }>('ListContainers', {
        filter: { pod_sandbox_id: pod.id, state: { state: 'CONTAINER_EXITED' } },
      });
      assert.deepEqual(
        exited.containers.map((c) => c.id),
        [id],
      );
      await removePod(d, pod);
      assert.deepEqual(await leftoversOf(d, id, pid), []);
      await assertHostClean(d);
    });
  });

  describe('with a runtime that can hold `runc create` and `runc start`', () => {
    let holdDir = '';
    const daemon = useDaemon(async () => {
      holdDir = await mkdtemp('/run/berth-test-hold-');
      return { extraArgs: ['--runtime', await holdingRuntime(holdDir)] };
    }, pullTestImage);
    after(async () => {
      if (holdDir) await rm(holdDir, { recursive: true, force: true });
    });

    test('kill -9 while conmon runs `runc create`: start-up rolls back what runc created without berthd', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'mid-create');
      const hold = join(holdDir, 'hold-create');
      await writeFile(hold, '');
      const pending = create(d, pod, 'mid').catch((err: unknown) => err);
      await waitFor(() => exists(join(holdDir, 'held-create')), 30_000);
      const [row] = containerRows(d);
      assert.ok(row, 'no journal row');
      assert.deepEqual([row.state, row.step, row.monitor_pid], ['CREATING', 'monitor', 0]);

      // berthd dies while conmon waits for runc. runc then creates the container anyway; conmon,
      // whose sync pipe lost its reader, dies on reporting it, so no monitor pid is ever recorded.
      await d.kill9();
      assert.ok((await pending) instanceof Error, 'CreateContainer succeeded');
      await rm(hold);
      await waitFor(async () => (await d.runcContainers()).includes(row.id), 10_000);
      const { log } = await startAndLog(d);
      assertLogged(log, 'rolled back a CreateContainer interrupted by a daemon exit', { container: row.id });
      await rejectsWith(containerStatus(d.cri, row.id), status.NOT_FOUND);
      assert.deepEqual(await leftoversOf(d, row.id), []);

      await assertPodWorks(d, pod, 'mid');
      await removePod(d, pod);
      await assertHostClean(d);
    });

    test('kill -9 after `runc start` ran, before the row said RUNNING: RUNNING after the restart', async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, 'mid-start');
      const id = await create(d, pod, 'mid-start');
      const hold = join(holdDir, 'hold-start');
      await writeFile(hold, '');
      const pending = d.cri.call('StartContainer', { container_id: id }).catch((err: unknown) => err);
      await waitFor(() => exists(join(holdDir, 'held-start')), 30_000);
      await d.kill9();
      assert.ok((await pending) instanceof Error, 'StartContainer succeeded');
      // runc start goes on without berthd, as it would after a kill -9 in this window.
      await rm(hold);
      await waitFor(async () => (await d.runcStatus(id)) === 'running', 10_000);
      try {
        await startAndLog(d);
        const st = await containerStatus(d.cri, id);
        assert.equal(st.state, 'CONTAINER_RUNNING', 'a running container is reported as created');
        assert.notEqual(st.started_at, '0');
        const res = await execSync(d.cri, id, ['echo', 'up']);
        assert.equal(res.stdout.toString(), 'up\n');
        await d.cri.call('StopContainer', { container_id: id, timeout: 10 });
        const stopped = await containerStatus(d.cri, id);
        assert.equal(stopped.state, 'CONTAINER_EXITED');
        assert.ok([137, 143].includes(stopped.exit_code), `exit code ${stopped.exit_code}`);
      } finally {
        await removePod(d, pod);
      }
      assert.deepEqual(await leftoversOf(d, id), []);
      await assertHostClean(d);
    });
  });
});

// ---------------------------------------------------------------------------------------------
// The daemon

async function pullTestImage(d: TestDaemon): Promise<void> {
  await d.cri.callImage('PullImage', { image: { image: imageRef() } });
}

/**
 * A shell wrapper around runc that holds `runc <verb>` (create, start) while `<dir>/hold-<verb>`
 * exists, touching `<dir>/held-<verb>` first: a window in which to kill berthd mid-call. runc
 * itself runs once the hold file is removed, whether or not berthd is still there.
 */
async function holdingRuntime(dir: string): Promise<string> {
  return writeRuncWrapper(join(dir, 'runc'), [
    'for arg in "$@"; do',
    '  case "$arg" in',
    '  create | start)',
    `    if [ -e "${dir}/hold-$arg" ]; then`,
    `      : > "${dir}/held-$arg"`,
    `      while [ -e "${dir}/hold-$arg" ]; do sleep 0.05; done`,
    '    fi',
    '    break',
    '    ;;',
    '  esac',
    'done',
  ]);
}

// ---------------------------------------------------------------------------------------------
// Talking to the daemon

/** Runs a pod for one test and removes it after the test whatever happened: later tests start clean. */
async function runPodFor(t: TestContext, d: TestDaemon, name: string): Promise<Pod> {
  const pod = await runPod(d.cri, d.pod(name));
  t.after(() => forceRemovePod(d, pod));
  return pod;
}

async function forceRemovePod(d: TestDaemon, pod: Pod): Promise<void> {
  try {
    await removePod(d, pod);
    return;
  } catch {
    // A pod that cannot be removed (or a daemon a failed test left down): a restart's recovery
    // settles what it can, then the removal is tried once more.
  }
  await d.kill9();
  await startAndLog(d);
  await removePod(d, pod).catch(() => undefined);
}

async function podState(d: TestDaemon, id: string): Promise<string> {
  const res = await d.cri.call<{ status: { state: string } }>('PodSandboxStatus', { pod_sandbox_id: id });
  return res.status.state;
}

async function removePod(d: TestDaemon, pod: Pod): Promise<void> {
  await d.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id });
}

/** A container of the test image in `pod`. */
function create(d: TestDaemon, pod: Pod, name: string, extra: Record<string, unknown> = {}): Promise<string> {
  return createContainer(d.cri, pod, containerConfig(name, imageRef(), extra));
}

function createStarted(
  d: TestDaemon,
  pod: Pod,
  name: string,
  extra: Record<string, unknown> = {},
): Promise<string> {
  return startContainer(d.cri, pod, containerConfig(name, imageRef(), extra));
}

async function listedContainers(d: TestDaemon, podId?: string): Promise<string[]> {
  const filter = podId ? { pod_sandbox_id: podId } : {};
  const res = await d.cri.call<{ containers: { id: string }[] }>('ListContainers', { filter });
  return res.containers.map((c) => c.id).sort();
}

/** Checks the pod still takes containers: create, start, exec, then remove it again. */
async function assertPodWorks(d: TestDaemon, pod: Pod, name: string): Promise<void> {
  const id = await createStarted(d, pod, name);
  assert.equal((await containerStatus(d.cri, id)).state, 'CONTAINER_RUNNING');
  const res = await execSync(d.cri, id, ['echo', 'alive']);
  assert.equal(res.exit_code, 0, res.stderr.toString());
  assert.equal(res.stdout.toString(), 'alive\n');
  await d.cri.call('RemoveContainer', { container_id: id });
  await assertNoLeftovers(d, id, 0, name);
}

// ---------------------------------------------------------------------------------------------
// Looking at the host

function containerRows(d: TestDaemon): ContainerRowSummary[] {
  return selectRows(d.rootDir, 'SELECT id, state, step, monitor_pid FROM containers ORDER BY id');
}

function containerDir(d: TestDaemon, id: string): string {
  return join(d.rootDir, 'containers', id);
}

/** What must be done, and what must not have begun, when CreateContainer pauses before `step`. */
async function assertStateBefore(d: TestDaemon, step: CreateStep, id: string): Promise<void> {
  const dir = containerDir(d, id);
  const rootfsMounted = (await readMountInfo()).some((m) => m.mountPoint === join(dir, 'rootfs'));
  const specWritten = existsSync(join(dir, 'bundle', 'config.json'));
  switch (step) {
    case 'rootfs':
      assert.ok(!existsSync(dir), 'container dir before rootfs');
      break;
    case 'spec':
      assert.ok(rootfsMounted, 'rootfs not mounted');
      assert.ok(!specWritten, 'spec written before its step');
      break;
    case 'monitor':
      assert.ok(rootfsMounted, 'rootfs not mounted');
      assert.ok(specWritten, 'spec not written');
      break;
  }
  assert.ok(!(await d.runcContainers()).includes(id), 'runc container before the monitor step');
  assert.deepEqual(await d.conmonPids(id), [], 'conmon before the monitor step');
}

/** Everything of container `id` still on the host, as readable descriptions; [] when clean. */
async function leftoversOf(d: TestDaemon, id: string, pid = 0): Promise<string[]> {
  const found: string[] = [];
  if (containerRows(d).some((r) => r.id === id)) found.push('SQLite row');
  if (existsSync(containerDir(d, id))) found.push(`dir ${containerDir(d, id)}`);
  if ((await d.runcContainers()).includes(id)) found.push('runc container');
  for (const path of [
    join(d.stateDir, 'exits', id),
    join(d.stateDir, 'monitor', id),
    join(d.stateDir, 'sockets', id),
  ]) {
    const there = await lstat(path).then(
      () => true,
      () => false,
    );
    if (there) found.push(`file ${path}`);
  }
  for (const m of await readMountInfo()) {
    if (m.mountPoint.includes(id)) found.push(`mount ${m.mountPoint}`);
  }
  for (const monitor of await d.conmonPids(id)) found.push(`conmon ${monitor}`);
  if (pid > 0 && (await isRunning(pid))) found.push(`container process ${pid}`);
  return found;
}

/**
 * After RemoveContainer: its record goes at once, its files in the background; nothing of it may
 * stay once they are done.
 */
async function assertNoLeftovers(d: TestDaemon, id: string, pid = 0, name = id): Promise<void> {
  await waitFor(async () => (await leftoversOf(d, id, pid)).length === 0, 10_000).catch(() => undefined);
  assert.deepEqual(await leftoversOf(d, id, pid), [], `leftovers of ${name}`);
}

/** SIGKILLs the conmon of container `id` (its init's parent) and returns its pid once it is gone. */
async function killMonitor(d: TestDaemon, id: string, containerPid: number): Promise<number> {
  const monitor = await monitorOf(d, id, containerPid);
  process.kill(monitor, 'SIGKILL');
  await waitFor(async () => !(await isRunning(monitor)), 10_000);
  return monitor;
}

/** The conmon of container `id`, which is its process's parent. */
async function monitorOf(d: TestDaemon, id: string, containerPid: number): Promise<number> {
  const monitor = await parentPid(containerPid);
  assert.ok(monitor !== null && monitor > 1, `no parent for ${containerPid}`);
  assert.deepEqual(await d.conmonPids(id), [monitor], "the container's parent is not its conmon");
  return monitor;
}

/** Once every pod is removed: nothing of any container may remain. */
async function assertHostClean(d: TestDaemon): Promise<void> {
  assert.deepEqual(await listedContainers(d), [], 'ListContainers');
  assert.deepEqual(containerRows(d), [], 'container rows in SQLite');
  assert.deepEqual(await namesIn(join(d.rootDir, 'containers')), [], 'container dirs');
  assert.deepEqual(await d.runcContainers(), [], 'runc containers');
  assert.deepEqual(await namesIn(join(d.stateDir, 'exits')), [], 'exit files');
  assert.deepEqual(await namesIn(join(d.stateDir, 'monitor')), [], 'persist dirs');
  assert.deepEqual(await namesIn(join(d.stateDir, 'sockets')), [], 'attach socket links');
  assert.deepEqual(await d.conmonPids(), [], 'conmon processes');
  // The netns dir is bind-mounted on itself for the daemon's lifetime; nothing else may be.
  assert.deepEqual(await d.podMounts(), [], 'mounts under the test dir');
}
