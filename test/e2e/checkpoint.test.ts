/**
 * CheckpointContainer end to end: a real berthd, an image from a loopback docker-registry, real
 * runc and criu. Where criu works (the Debian 13 VM: `npm run test:vm -- test/e2e/checkpoint.test.ts`):
 * a running container's archive, every file of its layout inspected, the container running on;
 * the errors, with no partial archive left; and a kill -9 of berthd while the container is paused
 * for its dump, after which the restarted berthd resumes it and removes what the checkpoint left.
 * Where criu does not work (this repository's usual host): the clear error, and the features
 * saying so. Needs root and docker-registry.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import type { HostFeatures } from '../../src/host/features.js';
import { PAUSE_BEFORE_STEP_ENV, useDaemon, type TestDaemon } from '../harness/daemon.js';
import { exists, namesIn } from '../harness/files.js';
import { rejectsWith } from '../harness/grpc.js';
import { useBusyboxImage } from '../harness/images.js';
import { startAndLog } from '../harness/log.js';
import {
  containerConfig,
  containerInfo,
  containerStatus,
  execText,
  runPod,
  startContainer,
  type Pod,
} from '../harness/pods.js';
import { checkpointContainer } from '../harness/checkpoint-archive.js';
import { registrySkip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';
import { BOUND_SCALE } from '../harness/bounds.js';

const SUITE_TIMEOUT_MS = 600_000 * BOUND_SCALE;
const EXEC_TIMEOUT_MS = 60_000;
/** The step CheckpointContainer pauses before when asked: the container is frozen for its dump then. */
const DUMP_STEP = 'checkpoint-dump';

/** Whether criu can dump here at all: what berthd's own probe asks. */
const CRIU_USABLE = (() => {
  const check = spawnSync('criu', ['check'], { timeout: 60_000, stdio: 'ignore' });
  return check.status === 0;
})();
const VM_ONLY = 'criu is missing or fails `criu check` here (run it in the VM: npm run test:vm -- <file>)';
const criuSkip = registrySkip || (CRIU_USABLE ? false : VM_ONLY);
const noCriuSkip = registrySkip || (CRIU_USABLE ? 'criu works on this host' : false);
for (const reason of [criuSkip, noCriuSkip]) if (reason) console.log(`# skipped part: ${reason}`);

/** Counts into /count in its rootfs, after deleting an image file. */
const COUNTER = [
  '/bin/sh',
  '-c',
  'rm /etc/group; i=0; while true; do i=$((i+1)); echo $i > /count; sleep 0.2; done',
];

async function counter(d: TestDaemon, pod: Pod, name: string, image: string): Promise<string> {
  const id = await startContainer(d.cri, pod, containerConfig(name, image, { command: COUNTER }));
  await waitFor(async () => (await countOf(d, id)) > 0, 30_000, { what: 'the first count' });
  return id;
}

async function countOf(d: TestDaemon, id: string): Promise<number> {
  const text = await readFile(join((await containerInfo(d.cri, id)).rootfs, 'count'), 'utf8').catch(() => '');
  return Number(text.trim() || '0');
}

/** The count goes on: it grows past what it was. */
async function assertCounting(d: TestDaemon, id: string): Promise<void> {
  const was = await countOf(d, id);
  await waitFor(async () => (await countOf(d, id)) > was + 2, 30_000, { what: `counting past ${was}` });
}

async function runcStatus(d: TestDaemon, id: string): Promise<string> {
  const { stdout } = await run('runc', ['--root', join(d.stateDir, 'runc'), 'state', id], {
    timeoutMs: EXEC_TIMEOUT_MS,
  });
  return (JSON.parse(stdout) as { status: string }).status;
}

async function tarList(path: string): Promise<string[]> {
  const { stdout } = await run('tar', ['--list', '--file', path], { timeoutMs: EXEC_TIMEOUT_MS });
  return stdout.split('\n').filter((line) => line !== '');
}

describe('CheckpointContainer with a working criu', { skip: criuSkip, timeout: SUITE_TIMEOUT_MS }, () => {
  const image = useBusyboxImage('berth/checkpoint');
  const daemon = useDaemon({}, async (d) => {
    await d.cri.callImage('PullImage', { image: { image: image() } });
  });
  let out: string;
  let pod: Pod;
  before(async () => {
    out = await mkdtemp(join(tmpdir(), 'berth-checkpoint-'));
    pod = await runPod(daemon().cri, daemon().pod('checkpoint'));
  });
  after(async () => {
    await rm(out, { recursive: true, force: true });
  });

  test('a counting container is archived in the layout, and counts on', async () => {
    const d = daemon();
    const id = await counter(d, pod, 'counter', image());
    const info = await containerInfo(d.cri, id);
    const location = join(out, 'counter.tar');
    await checkpointContainer(d, id, location);

    assert.deepEqual(await namesIn(out), ['counter.tar'], 'a temp file was left next to the archive');
    assert.equal((await stat(location)).mode & 0o777, 0o600, "the archive is not root's alone");
    const listed = await tarList(location);
    for (const name of ['config.dump', 'spec.dump', 'rootfs-diff.tar', 'deleted.files', 'dump.log']) {
      assert.ok(listed.includes(name), `${name} missing from ${listed.join(', ')}`);
    }
    assert.ok(listed.includes('checkpoint/inventory.img'), `no criu images in ${listed.join(', ')}`);
    assert.ok(listed.includes('container.log'), 'the CRI log was not copied');

    const unpacked = join(out, 'unpacked');
    await mkdir(unpacked);
    await run('tar', ['--extract', '--file', location, '--directory', unpacked], {
      timeoutMs: EXEC_TIMEOUT_MS,
    });
    const spec = JSON.parse(await readFile(join(unpacked, 'spec.dump'), 'utf8')) as unknown;
    assert.deepEqual(spec, JSON.parse(await readFile(join(info.bundleDir, 'config.json'), 'utf8')));
    const config = JSON.parse(await readFile(join(unpacked, 'config.dump'), 'utf8')) as Record<
      string,
      string
    >;
    assert.equal(config.id, id);
    assert.equal(config.name, 'counter');
    assert.equal(config.rootfsImage, image());
    assert.match(config.rootfsImageRef ?? '', /^sha256:[0-9a-f]{64}$/);
    assert.equal(config.rootfsImageName, image());
    assert.equal(config.runtime, 'runc');
    for (const key of ['createdTime', 'checkpointedTime']) {
      assert.ok(!Number.isNaN(Date.parse(config[key] ?? '')), `${key}: ${config[key]}`);
    }
    const deleted = JSON.parse(await readFile(join(unpacked, 'deleted.files'), 'utf8')) as string[];
    assert.ok(deleted.includes('/etc/group'), `deleted.files: ${JSON.stringify(deleted)}`);
    const diff = await tarList(join(unpacked, 'rootfs-diff.tar'));
    assert.ok(diff.includes('count'), `rootfs-diff.tar: ${diff.join(', ')}`);
    assert.ok(!diff.includes('etc/group'), 'a whiteout went into rootfs-diff.tar');

    assert.equal((await containerStatus(d.cri, id)).state, 'CONTAINER_RUNNING');
    assert.equal(await runcStatus(d, id), 'running');
    await assertCounting(d, id);
    assert.equal((await execText(d.cri, id, ['cat', '/count'])).trim() !== '', true);
    assert.deepEqual(await namesIn(join(d.rootDir, 'checkpoints')), [], 'a staging dir was left');
  });

  test('errors name what is wrong, and leave no archive behind', async () => {
    const d = daemon();
    const id = await counter(d, pod, 'errors', image());
    await rejectsWith(checkpointContainer(d, 'f'.repeat(64), join(out, 'unknown.tar')), status.NOT_FOUND);
    await rejectsWith(checkpointContainer(d, id, 'relative.tar'), status.INVALID_ARGUMENT, /location/);
    await rejectsWith(
      checkpointContainer(d, id, join(out, 'no-such-dir', 'x.tar')),
      status.INVALID_ARGUMENT,
      /location/,
    );
    const readOnly = join(out, 'read-only');
    await mkdir(readOnly);
    await run('mount', ['--bind', readOnly, readOnly], { timeoutMs: EXEC_TIMEOUT_MS });
    try {
      await run('mount', ['-o', 'remount,bind,ro', readOnly], { timeoutMs: EXEC_TIMEOUT_MS });
      await rejectsWith(
        checkpointContainer(d, id, join(readOnly, 'x.tar')),
        status.INVALID_ARGUMENT,
        /not writable/,
      );
      assert.deepEqual(await namesIn(readOnly), []);
    } finally {
      await run('umount', [readOnly], { timeoutMs: EXEC_TIMEOUT_MS });
    }
    await d.cri.call('StopContainer', { container_id: id, timeout: 0 });
    await rejectsWith(
      checkpointContainer(d, id, join(out, 'stopped.tar')),
      status.FAILED_PRECONDITION,
      /exited/,
    );
    assert.equal(await exists(join(out, 'stopped.tar')), false);
    assert.equal(await exists(join(out, 'unknown.tar')), false);
    assert.deepEqual(await namesIn(join(d.rootDir, 'checkpoints')), []);
  });

  test('kill -9 of berthd while the container is paused for its dump: resumed at start-up', async (t) => {
    const d = daemon();
    const began = Date.now();
    const phase = (what: string): void => t.diagnostic(`${what} after ${Date.now() - began} ms`);
    const id = await counter(d, pod, 'killed', image());
    phase('counting');
    const dir = join(out, 'killed');
    await mkdir(dir);
    // Killed rather than stopped: the one restart that matters is the next, after the kill mid-dump.
    await d.kill9();
    await startAndLog(d, { [PAUSE_BEFORE_STEP_ENV]: DUMP_STEP });
    phase('restarted with the pause');
    const pending = checkpointContainer(d, id, join(dir, 'killed.tar')).catch((err: unknown) => err);
    const marker = await d.pausedBefore(DUMP_STEP);
    phase('paused before the dump');
    assert.equal(await runcStatus(d, id), 'paused');
    assert.equal((await namesIn(join(d.rootDir, 'checkpoints'))).length, 1);

    await d.kill9();
    assert.ok((await pending) instanceof Error, 'the paused CheckpointContainer succeeded');
    await rm(marker);
    phase('killed');
    await startAndLog(d);
    phase('restarted');
    assert.equal(await runcStatus(d, id), 'running');
    await assertCounting(d, id);
    phase('counting again');
    assert.deepEqual(await namesIn(join(d.rootDir, 'checkpoints')), [], 'a staging dir was left');
    assert.deepEqual(await namesIn(dir), [], 'a temp archive was left');
  });
});

describe(
  'CheckpointContainer where criu cannot work',
  { skip: noCriuSkip, timeout: SUITE_TIMEOUT_MS },
  () => {
    const image = useBusyboxImage('berth/no-checkpoint');
    const daemon = useDaemon({}, async (d) => {
      await d.cri.callImage('PullImage', { image: { image: image() } });
    });

    test('features say checkpoints cannot be made, and why', async () => {
      const res = await daemon().cri.call<{ info: Record<string, string> }>('Status', { verbose: true });
      const shown = JSON.parse(res.info.probedFeatures ?? '{}') as {
        host: HostFeatures;
        runtimeHandlers: Record<string, { checkpointRestore: boolean }>;
      };
      const { criu } = shown.host;
      if (criu !== null) {
        assert.equal(criu.usable, false);
        assert.match(criu.reason ?? '', /criu check failed: ./);
      }
      assert.equal(shown.runtimeHandlers.runc?.checkpointRestore, false);
    });

    test('CheckpointContainer fails with FAILED_PRECONDITION, saying what is wrong with criu', async () => {
      const d = daemon();
      const pod = await runPod(d.cri, d.pod('no-criu'));
      const id = await counter(d, pod, 'counter', image());
      const out = await mkdtemp(join(tmpdir(), 'berth-no-checkpoint-'));
      try {
        const err = await rejectsWith(
          checkpointContainer(d, id, join(out, 'x.tar')),
          status.FAILED_PRECONDITION,
        );
        assert.match(
          err.details,
          /cannot checkpoint container [0-9a-f]{64}: criu (is not installed|\S+ cannot)/,
        );
        assert.deepEqual(await namesIn(out), []);
        // A path that is taken is refused before criu is asked: no archive replaces a file.
        const taken = join(out, 'taken');
        await writeFile(taken, "the node's own file\n");
        await rejectsWith(checkpointContainer(d, id, taken), status.ALREADY_EXISTS, /taken exists/);
        assert.equal(await readFile(taken, 'utf8'), "the node's own file\n");
        assert.equal(await runcStatus(d, id), 'running');
      } finally {
        await rm(out, { recursive: true, force: true });
      }
    });
  },
);
