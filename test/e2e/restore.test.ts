/**
 * Containers created from a checkpoint archive, end to end: a real berthd over its CRI socket, the
 * archive made from one of its running containers with runc and criu (test/harness/
 * checkpoint-archive.ts), the restore done by conmon and runc at StartContainer into a NEW pod with
 * another IP. The restores need a criu that works on this kernel (the Debian 13 VM has one; the
 * Debian 12 host's fails `criu check`): without one CreateContainer of an archive is refused,
 * which the host asserts, and the restores skip, saying why. The archive checks, and the checks of
 * the archive's user against the request's, come first, need no criu and run everywhere. Needs
 * root. Traffic goes only to the test's own pods' addresses.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { after, before, describe, test, type TestContext } from 'node:test';
import { status } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import { CHECKPOINT_IMAGE_ANNOTATION } from '../../src/container/restore.js';
import { checkpointContainer } from '../harness/checkpoint-archive.js';
import { podConfig, useDaemon, type TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { layerFromTar, pushImage, tarball, useBusyboxImage, type LayerEntry } from '../harness/images.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import {
  containerConfig,
  containerStatus,
  createContainer,
  execText,
  podStatus,
  runPod,
  startContainer,
  stopAndRemovePod,
  usernsNamespaceOptions,
  waitContainerState,
  type Pod,
} from '../harness/pods.js';
import { hostProves, registrySkip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';
import { BOUND_SCALE } from '../harness/bounds.js';

const SUITE_TIMEOUT_MS = 300_000 * BOUND_SCALE;
const CRIU_CHECK_TIMEOUT_MS = 60_000;
const FIELD = 'config.image.image';
const PORT = 8080;
/** Counts every 0.2 s into a file of its rootfs; notes once that it began. */
const COUNTER = [
  'sh',
  '-c',
  'echo begun > /begun; i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done',
];
/** How far the count gets before the checkpoint: a fresh start would be far below it when read. */
const COUNT_BEFORE = 15;
/** Longer than berthd's monitor check period (5 s). */
const MONITOR_CHECK_WAIT_MS = 6_000;

/** Why criu cannot checkpoint here, or false: `criu check` is what runc relies on too. */
async function criuSkip(): Promise<string | false> {
  try {
    await run('criu', ['check'], { timeoutMs: CRIU_CHECK_TIMEOUT_MS });
    return false;
  } catch (err) {
    return `criu cannot checkpoint on this kernel: ${String(err).split('\n')[0]}`;
  }
}

let imageRef: () => string;
let workDir = '';

describe(
  'containers restored from a checkpoint archive',
  { skip: registrySkip, timeout: SUITE_TIMEOUT_MS },
  () => {
    imageRef = useBusyboxImage('berth/restore');
    const daemon = useDaemon({}, async (d) => {
      await d.cri.callImage('PullImage', { image: { image: imageRef() } });
    });
    let noCriu: string | false = 'not probed';
    /** Where the checkpoint images are pushed. */
    let registry: TestRegistry | undefined;
    let images = 0;
    /** Pushes `archive` as CRI-O's checkpoint images hold one (one layer, annotated manifest) and pulls it. */
    const checkpointImage = async (d: TestDaemon, archive: Buffer): Promise<string> => {
      registry ??= await startRegistry();
      const pushed = await pushImage(registry, 'berth/checkpoint', String(++images), {
        layers: [await layerFromTar(archive)],
        annotations: { [CHECKPOINT_IMAGE_ANNOTATION]: 'counter' },
      });
      await d.cri.callImage('PullImage', { image: { image: pushed.reference } });
      return pushed.reference;
    };
    before(async () => {
      workDir = await mkdtemp(join(tmpdir(), 'berth-restore-'));
      noCriu = await criuSkip();
      if (noCriu) console.log(`# restores skipped: ${noCriu}`);
    });
    after(async () => {
      await registry?.stop();
      if (workDir) await rm(workDir, { recursive: true, force: true });
    });

    describe('archives that cannot be restored, and a restore that fails', () => {
      // One pod for all: none of these leaves a container in it.
      let shared: Pod | undefined;
      before(async () => {
        shared = await runPod(daemon().cri, podConfig('restore-bad'));
      });
      after(async () => {
        if (shared) await stopAndRemovePod(daemon().cri, shared.id).catch(() => {});
      });
      const badPod = (): Pod => {
        assert.ok(shared, 'no pod for the bad archives');
        return shared;
      };
      const cases: [string, () => Buffer, RegExp][] = [
        ['is not a tar', () => Buffer.from('not a tar archive at all\n'.repeat(40)), /is not a tar archive/],
        [
          'lacks spec.dump',
          () => tarball([configDump(imageRef()), { type: 'dir', path: 'checkpoint' }]),
          /has no spec\.dump/,
        ],
        [
          'lacks config.dump',
          () => tarball([specDump(), { type: 'dir', path: 'checkpoint' }]),
          /has no config\.dump/,
        ],
        [
          'lacks checkpoint/',
          () => tarball([configDump(imageRef()), specDump()]),
          /has no checkpoint\/ directory/,
        ],
        [
          'leads out with ".."',
          () => archiveOf(imageRef(), { type: 'file', path: 'checkpoint/../../escaped', content: 'x' }),
          /escapes/,
        ],
        [
          'has a member claiming more than the file holds',
          () => archiveOf(imageRef()).subarray(0, 3 * 512 + 100),
          /truncated/,
        ],
        [
          'has a truncated rootfs-diff.tar',
          () => archiveOf(imageRef(), rootfsDiff(tarball([BIG_FILE]).subarray(0, 1024))),
          /member rootfs-diff\.tar: .*"big".*truncated/,
        ],
        [
          'has a rootfs-diff.tar leading out with ".."',
          () =>
            archiveOf(
              imageRef(),
              rootfsDiff(tarball([{ type: 'file', path: 'a/../../../escaped', content: 'x' }])),
            ),
          /member rootfs-diff\.tar: .*escapes/,
        ],
        [
          'holds a symlink',
          () =>
            archiveOf(imageRef(), { type: 'symlink', path: 'checkpoint/core-1.img', target: '/etc/shadow' }),
          /is a symlink/,
        ],
      ];
      for (const [what, archive, problem] of cases) {
        test(
          `an archive that ${what}: INVALID_ARGUMENT naming ${FIELD}, nothing left behind`,
          { skip: hostProves },
          async () => {
            const d = daemon();
            const pod = badPod();
            const path = join(workDir, `bad-${what.replace(/\W+/g, '-')}.tar`);
            await writeFile(path, archive());
            const err = await rejectsWith(createRestored(d, pod, path), status.INVALID_ARGUMENT, FIELD);
            assert.match(err.details, problem);
            await assertNothingLeft(d);
          },
        );
      }

      test(
        'a file that is no archive (/etc/shadow, say): the error and the log name it, never its bytes',
        { skip: hostProves },
        async () => {
          const d = daemon();
          const pod = badPod();
          const secret = 'BERTH-SECRET-7f3a9c';
          const path = join(workDir, 'shadow');
          // More than a tar header block, so that the reader parses a "header" out of it.
          const users = Array.from({ length: 30 }, (_, i) => `user${i}:*:19000:0:99999:7:::`);
          await writeFile(path, [`root:${secret}:19000:0:99999:7:::`, ...users].join('\n'));
          const logged = d.output.length;
          const err = await rejectsWith(createRestored(d, pod, path), status.INVALID_ARGUMENT, FIELD);
          assert.ok(!d.output.slice(logged).includes(secret), 'the log quotes none of it');
          assert.ok(!err.details.includes(secret), err.details);
          assert.ok(!err.details.includes('user1'), err.details);
          assert.ok(err.details.includes(path), err.details);
          assert.match(err.details, /is not a tar archive: its first 512 bytes are no valid tar header/);
          await assertNothingLeft(d);
        },
      );

      test(
        'an archive whose image berth has not pulled: FAILED_PRECONDITION naming the image',
        { skip: hostProves },
        async () => {
          const d = daemon();
          const pod = badPod();
          const missing = 'registry.invalid/berth/never-pulled:1';
          const path = join(workDir, 'missing-image.tar');
          await writeFile(path, archiveOf(missing));
          await rejectsWith(createRestored(d, pod, path), status.FAILED_PRECONDITION, missing);
          await assertNothingLeft(d);
        },
      );

      test(
        'a checkpoint image whose image berth has not pulled: FAILED_PRECONDITION naming the image',
        { skip: hostProves },
        async () => {
          const d = daemon();
          const pod = badPod();
          const missing = 'registry.invalid/berth/never-pulled:2';
          const image = await checkpointImage(d, archiveOf(missing));
          await rejectsWith(createRestored(d, pod, image), status.FAILED_PRECONDITION, missing);
          await assertNothingLeft(d);
        },
      );

      test(
        'a checkpoint image with a link in checkpoint/: INVALID_ARGUMENT naming the field',
        { skip: hostProves },
        async () => {
          const d = daemon();
          const pod = badPod();
          const image = await checkpointImage(
            d,
            archiveOf(imageRef(), { type: 'symlink', path: 'checkpoint/pages-1.img', target: '/etc/shadow' }),
          );
          const err = await rejectsWith(createRestored(d, pod, image), status.INVALID_ARGUMENT, FIELD);
          assert.match(err.details, /neither a file nor a dir/);
          await assertNothingLeft(d);
        },
      );

      test(
        'an archive of uid 0 and groups 0,6,42 for a request of run_as_user 1000: INVALID_ARGUMENT naming run_as_user and both uids, nothing left behind',
        { skip: hostProves },
        async () => {
          const d = daemon();
          const pod = badPod();
          const path = join(workDir, 'root-user.tar');
          await writeFile(
            path,
            tarball([configDump(imageRef()), specDump(ROOT_USER), { type: 'dir', path: 'checkpoint' }]),
          );
          const err = await rejectsWith(
            createContainer(
              d.cri,
              pod,
              containerConfig('restored', path, {
                linux: { security_context: { run_as_user: { value: 1000 } } },
              }),
            ),
            status.INVALID_ARGUMENT,
            'config.linux.security_context.run_as_user',
          );
          assert.match(err.details, /uid 0 \(spec\.dump\), the request asks for uid 1000/);
          await assertNothingLeft(d);
        },
      );

      test('the same archive as a checkpoint image: refused alike', { skip: hostProves }, async () => {
        const d = daemon();
        const pod = badPod();
        const image = await checkpointImage(
          d,
          tarball([configDump(imageRef()), specDump(ROOT_USER), { type: 'dir', path: 'checkpoint' }]),
        );
        await rejectsWith(
          createContainer(
            d.cri,
            pod,
            containerConfig('restored', image, {
              linux: { security_context: { run_as_user: { value: 1000 } } },
            }),
          ),
          status.INVALID_ARGUMENT,
          'config.linux.security_context.run_as_user',
        );
        await assertNothingLeft(d);
      });

      test("on a node whose criu cannot restore: FAILED_PRECONDITION at CreateContainer with criu's reason, nothing copied", async (t) => {
        if (!noCriu) return t.skip('criu can restore here');
        const d = daemon();
        const pod = badPod();
        const path = join(workDir, 'no-criu.tar');
        await writeFile(path, archiveOf(imageRef()));
        const err = await rejectsWith(createRestored(d, pod, path), status.FAILED_PRECONDITION, /criu/);
        assert.match(
          err.details,
          /cannot restore checkpoint .*: criu .* cannot restore on this host: criu check failed/,
        );
        await assertNothingLeft(d);
      });

      test('a restored container waits CREATED for its start, across monitor checks and a restart; a failed restore leaves it EXITED', async (t) => {
        // Where criu cannot restore, CreateContainer refuses (the test above).
        if (noCriu) return t.skip(noCriu);
        const d = daemon();
        const pod = await podFor(t, d, 'fails');
        // Valid as an archive, but its checkpoint/ holds only what runc reads before it runs criu:
        // criu (or, without one, runc) fails.
        const path = join(workDir, 'empty-checkpoint.tar');
        const descriptors = JSON.stringify(['/dev/null', '/dev/null', '/dev/null']);
        await writeFile(
          path,
          archiveOf(imageRef(), { type: 'file', path: 'checkpoint/descriptors.json', content: descriptors }),
        );
        const id = await createRestored(d, pod, path);
        // Past berthd's monitor check (every 5 s), which must not take the missing monitor for a lost one.
        await sleep(MONITOR_CHECK_WAIT_MS);
        assert.equal((await containerStatus(d.cri, id)).state, 'CONTAINER_CREATED');
        await d.restart();
        assert.equal((await containerStatus(d.cri, id)).state, 'CONTAINER_CREATED');

        await assert.rejects(d.cri.call('StartContainer', { container_id: id }));
        const ended = await containerStatus(d.cri, id);
        assert.equal(ended.state, 'CONTAINER_EXITED');
        assert.equal(ended.reason, 'StartError');
        assert.match(ended.message, /^conmon: restore container /);
        assert.match(ended.message, /criu's restore\.log: /);
        const dir = join(d.rootDir, 'containers', id);
        assert.deepEqual(
          (await readdir(dir)).filter((name) => name === 'restore-work'),
          [],
          'criu work dir left',
        );
        await d.cri.call('RemoveContainer', { container_id: id });
      });

      test(
        'into a pod of its own user namespace: FAILED_PRECONDITION, nothing left behind',
        { skip: hostProves },
        async (t) => {
          const d = daemon();
          const options = usernsNamespaceOptions(65536 * 47);
          const pod = await runPod(
            d.cri,
            podConfig('restore-userns', { linux: { security_context: { namespace_options: options } } }),
          );
          t.after(() => stopAndRemovePod(d.cri, pod.id).catch(() => {}));
          const path = join(workDir, 'userns.tar');
          await writeFile(path, archiveOf(imageRef()));
          await rejectsWith(
            createContainer(
              d.cri,
              pod,
              containerConfig('restored', path, {
                linux: { security_context: { namespace_options: options } },
              }),
            ),
            status.FAILED_PRECONDITION,
            /own user namespace is not supported/,
          );
          await assertNothingLeft(d);
        },
      );

      test('a path that is no file: INVALID_ARGUMENT naming the field', { skip: hostProves }, async () => {
        const d = daemon();
        const pod = badPod();
        await rejectsWith(
          createRestored(d, pod, join(workDir, 'absent.tar')),
          status.INVALID_ARGUMENT,
          FIELD,
        );
        await assertNothingLeft(d);
      });
    });

    describe('restores (need criu)', () => {
      let counterArchive = '';

      test('a counting container restored into a new pod counts on from where it was', async (t) => {
        if (noCriu) return t.skip(noCriu);
        const d = daemon();
        const first = await podFor(t, d, 'count-a');
        const original = await startContainer(
          d.cri,
          first,
          containerConfig('counter', imageRef(), { command: COUNTER }),
        );
        await waitFor(async () => (await count(d, original)) >= COUNT_BEFORE, 30_000);
        counterArchive = join(workDir, 'counter.tar');
        await checkpointContainer(d, original, counterArchive);
        const atCheckpoint = await count(d, original);
        // The original goes first: what counts on afterwards can only be the restored process.
        await stopAndRemovePod(d.cri, first.id);

        const second = await podFor(t, d, 'count-b');
        assert.notEqual(await podIp(d, second), '', 'the new pod has no IP');
        const restored = await createRestored(d, second, counterArchive);
        await d.cri.call('StartContainer', { container_id: restored });
        await waitContainerState(d.cri, restored, 'CONTAINER_RUNNING');
        const resumed = await count(d, restored);
        assert.ok(resumed >= COUNT_BEFORE, `the count began again: ${resumed} (was ${atCheckpoint})`);
        await waitFor(async () => (await count(d, restored)) > resumed, 20_000);
        assert.equal((await execText(d.cri, restored, ['cat', '/begun'])).trim(), 'begun');
      });

      test("a checkpoint image (CRI-O's: the archive as its one layer) restores as the archive does, also with berthd restarted between create and start", async (t) => {
        if (noCriu) return t.skip(noCriu);
        if (!counterArchive) return t.skip('the counting test made no archive');
        const d = daemon();
        const image = await checkpointImage(d, await readFile(counterArchive));
        const pod = await podFor(t, d, 'count-img');
        const restored = await createRestored(d, pod, image);
        await d.restart();
        assert.equal((await containerStatus(d.cri, restored)).state, 'CONTAINER_CREATED');
        await d.cri.call('StartContainer', { container_id: restored });
        await waitContainerState(d.cri, restored, 'CONTAINER_RUNNING');
        const resumed = await count(d, restored);
        assert.ok(resumed >= COUNT_BEFORE, `the count began again: ${resumed}`);
        await waitFor(async () => (await count(d, restored)) > resumed, 20_000);
        assert.equal((await execText(d.cri, restored, ['cat', '/begun'])).trim(), 'begun');
      });

      test("a container on a terminal comes back on one, though the new request asks for none: the terminal is the archive's", async (t) => {
        if (noCriu) return t.skip(noCriu);
        const d = daemon();
        const first = await podFor(t, d, 'tty-a');
        const original = await startContainer(
          d.cri,
          first,
          containerConfig('counter', imageRef(), { command: COUNTER, tty: true }),
        );
        await waitFor(async () => (await count(d, original)) >= COUNT_BEFORE, 30_000);
        const archive = join(workDir, 'tty.tar');
        await checkpointContainer(d, original, archive);
        await stopAndRemovePod(d.cri, first.id);

        const second = await podFor(t, d, 'tty-b');
        const restored = await createContainer(
          d.cri,
          second,
          containerConfig('restored', archive, { tty: false }),
        );
        await d.cri.call('StartContainer', { container_id: restored });
        await waitContainerState(d.cri, restored, 'CONTAINER_RUNNING');
        const resumed = await count(d, restored);
        assert.ok(resumed >= COUNT_BEFORE, `the count began again: ${resumed}`);
        await waitFor(async () => (await count(d, restored)) > resumed, 20_000);
        const stdin = await execText(d.cri, restored, ['readlink', '/proc/1/fd/0']);
        assert.match(stdin.trim(), /^\/dev\/pts\/\d+$/, 'the restored process lost its terminal');
      });

      test('a listening process restored into a pod with another IP accepts connections there', async (t) => {
        if (noCriu) return t.skip(noCriu);
        const d = daemon();
        const first = await podFor(t, d, 'listen-a');
        const server = ['nc', '-ll', '-p', String(PORT), '-e', '/bin/echo', 'hello'];
        const original = await startContainer(
          d.cri,
          first,
          containerConfig('server', imageRef(), { command: server }),
        );
        const firstIp = await podIp(d, first);
        await waitFor(async () => (await fetchGreeting(firstIp).catch(() => '')) === 'hello', 20_000);
        const archive = join(workDir, 'server.tar');
        await checkpointContainer(d, original, archive);
        await stopAndRemovePod(d.cri, first.id);

        const second = await podFor(t, d, 'listen-b');
        const secondIp = await podIp(d, second);
        assert.notEqual(secondIp, firstIp);
        const restored = await createRestored(d, second, archive);
        await d.cri.call('StartContainer', { container_id: restored });
        await waitContainerState(d.cri, restored, 'CONTAINER_RUNNING');
        assert.equal(await fetchGreeting(secondIp), 'hello');
      });
    });
  },
);

/** A well-formed archive of a checkpoint of `image`, its checkpoint/ holding `extra` (no images: criu fails). */
function archiveOf(image: string, ...extra: LayerEntry[]): Buffer {
  return tarball([configDump(image), specDump(), { type: 'dir', path: 'checkpoint' }, ...extra]);
}

function configDump(image: string): LayerEntry {
  const config = {
    id: 'c'.repeat(64),
    name: 'counter',
    rootfsImage: image,
    rootfsImageRef: '',
    runtime: 'runc',
  };
  return { type: 'file', path: 'config.dump', content: JSON.stringify(config) };
}

/** A member of 2000 bytes: a tar cut after its first block of data ends inside it. */
const BIG_FILE: LayerEntry = { type: 'file', path: 'big', content: 'b'.repeat(2000) };
/** What a process of a privileged image ran as. */
const ROOT_USER = { uid: 0, gid: 0, additionalGids: [0, 6, 42], umask: 0 };

function rootfsDiff(tar: Buffer): LayerEntry {
  return { type: 'file', path: 'rootfs-diff.tar', content: tar };
}

function specDump(user?: object): LayerEntry {
  const spec = {
    ociVersion: '1.0.2',
    process: { args: ['sh'], cwd: '/', ...(user ? { user } : {}) },
    root: { path: 'rootfs' },
    linux: {},
  };
  return { type: 'file', path: 'spec.dump', content: JSON.stringify(spec) };
}

async function podFor(t: TestContext, d: TestDaemon, name: string): Promise<Pod> {
  const pod = await runPod(d.cri, podConfig(`restore-${name}`));
  t.after(() => stopAndRemovePod(d.cri, pod.id).catch(() => {}));
  return pod;
}

function createRestored(d: TestDaemon, pod: Pod, archive: string): Promise<string> {
  return createContainer(d.cri, pod, containerConfig('restored', archive));
}

async function count(d: TestDaemon, id: string): Promise<number> {
  return Number((await execText(d.cri, id, ['cat', '/tmp/count'])).trim());
}

async function podIp(d: TestDaemon, pod: Pod): Promise<string> {
  const { status: s } = await podStatus<{ network: { ip: string } | null }>(d.cri, pod.id);
  return s.network?.ip ?? '';
}

/** One bounded connection to the test's own pod: what the server says before it closes. */
function fetchGreeting(ip: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: ip, port: PORT });
    let got = '';
    socket.setTimeout(5_000, () => socket.destroy(new Error(`no answer from ${ip}:${PORT} in 5 s`)));
    socket.on('data', (chunk: Buffer) => (got += chunk.toString('utf8')));
    socket.on('error', reject);
    socket.on('close', () => resolve(got.trim()));
  });
}

/** No container record, and no container dir under berth's root. */
async function assertNothingLeft(d: TestDaemon): Promise<void> {
  const listed = await d.cri.call<{ containers: unknown[] }>('ListContainers', {});
  assert.deepEqual(listed.containers, []);
  const dirs = await readdir(join(d.rootDir, 'containers')).catch(() => []);
  assert.deepEqual(dirs, [], 'a container dir was left behind');
}
