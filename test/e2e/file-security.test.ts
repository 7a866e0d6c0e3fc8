/**
 * What berthd keeps on the host, tried as any local user would (uid 65534): the database and specs
 * with the containers' secrets, image content with setuid files, file capabilities and device
 * nodes, and containers' writes. berthd is started under umask 000, so every mode checked here is
 * one berthd chose. Then two berthds on one dir. Needs root; traffic stays on loopback.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { chmod, chown, lstat, mkdir, readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { containerDir, rootfsPath } from '../../src/imagestore/rootfs.js';
import { LayerStore } from '../../src/imagestore/layers.js';
import { SHARED_PID_LINUX, TestDaemon } from '../harness/daemon.js';
import {
  busyboxEntries,
  buildLayer,
  pushImage,
  useBusyboxImage,
  type PushedImage,
} from '../harness/images.js';
import { mountPointsBelow } from '../harness/mounts.js';
import { containerConfig, execSync, execText, runPod, startContainer, type Pod } from '../harness/pods.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { registrySkip } from '../harness/skip.js';
import { asNobody, NOBODY } from '../harness/unprivileged.js';

const SUITE_TIMEOUT_MS = 600_000;
/** A secret kubelet hands a container in its env. */
const SECRET = 'hunter2-file-security';

/** security.capability (VFS_CAP_REVISION_2, effective): cap_dac_read_search, which reads any file. */
const CAP_DAC_READ_SEARCH = Buffer.from([1, 0, 0, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);

/** The block device the host's / is on (the probe opened 253:0); /dev/null's numbers without one. */
async function hostRootDevice(): Promise<{ major: number; minor: number }> {
  const dev = BigInt((await stat('/', { bigint: true })).dev);
  const major = Number(((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn));
  const minor = Number((dev & 0xffn) | ((dev >> 12n) & ~0xffn));
  return major === 0 ? { major: 1, minor: 3 } : { major, minor };
}

/**
 * Image content a local user must never reach on the host: the host's own `id` setuid-root (it
 * runs there and says euid=0), busybox with cap_dac_read_search as `cat`, a 0666 node of the
 * host's root disk.
 */
async function hostileImage(registry: TestRegistry): Promise<PushedImage> {
  const device = await hostRootDevice();
  const layer = await buildLayer([
    ...busyboxEntries(['cp', 'chmod']),
    { type: 'dir', path: 'suid' },
    { type: 'file', path: 'suid/id', content: readFileSync('/usr/bin/id'), mode: 0o4755 },
    { type: 'dir', path: 'caps' },
    {
      type: 'file',
      path: 'caps/cat',
      content: readFileSync('/bin/busybox'),
      mode: 0o755,
      xattrs: { 'security.capability': CAP_DAC_READ_SEARCH },
    },
    { type: 'dir', path: 'hostdev' },
    { type: 'block', path: 'hostdev/disk', ...device, mode: 0o666 },
  ]);
  return pushImage(registry, 'berth/file-security', '1', {
    layers: [layer],
    config: { Cmd: ['/bin/sleep', '1000'], Env: ['PATH=/bin'] },
  });
}

/** Asserts that uid 65534 cannot get past the path's dirs to use what `path` is. */
async function assertUnreachable(path: string, argv: readonly string[]): Promise<void> {
  const attempt = await asNobody(argv);
  assert.equal(attempt.ok, false, `uid ${NOBODY} used ${path}: ${attempt.stdout}${attempt.stderr}`);
  assert.match(attempt.stderr, /Permission denied/, `${argv.join(' ')}: ${attempt.stderr}`);
}

/** Every setuid binary, file capability and device node of the image, under `dir` (a tree of it). */
async function assertImageContentUnreachable(dir: string): Promise<void> {
  const suid = join(dir, 'suid/id');
  await assertUnreachable(suid, [suid]);
  const cat = join(dir, 'caps/cat');
  await assertUnreachable(cat, [cat, '/etc/shadow']);
  const disk = join(dir, 'hostdev/disk');
  await assertUnreachable(disk, ['dd', `if=${disk}`, 'of=/dev/null', 'count=0', 'status=none']);
}

interface Entry {
  path: string;
  mode: number;
}

/**
 * What berthd made below `dir`: every entry but symlinks, mounts (netns pins, shm, rootfs) and the
 * trees an image or a container owns (a layer's fs/, a container's upper/ and work/), whose modes
 * are theirs to choose.
 */
async function berthMade(dir: string, mounts: ReadonlySet<string>): Promise<Entry[]> {
  const found: Entry[] = [];
  const walk = async (path: string): Promise<void> => {
    const st = await lstat(path).catch(() => null);
    if (st === null || st.isSymbolicLink()) return;
    found.push({ path, mode: st.mode & 0o7777 });
    if (!st.isDirectory()) return;
    for (const name of await readdir(path).catch(() => [] as string[])) {
      const child = join(path, name);
      if (mounts.has(child) || /\/layers\/[^/]+\/fs$|\/containers\/[^/]+\/(upper|work)$/.test(child))
        continue;
      await walk(child);
    }
  };
  await walk(dir);
  return found;
}

describe('file security', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  let registry: TestRegistry;
  let image: PushedImage;
  let daemon: TestDaemon;
  let pod: Pod;
  let ctr: string;

  before(async () => {
    registry = await startRegistry();
    image = await hostileImage(registry);
    daemon = await TestDaemon.create({ umask: 0o000 });
    await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
    // A pod with an infra (its bundle is berth's), run as a user of its own.
    pod = await runPod(
      daemon.cri,
      daemon.pod('files', {
        linux: {
          security_context: { ...SHARED_PID_LINUX.security_context, run_as_user: { value: '1000' } },
        },
      }),
    );
    ctr = await startContainer(
      daemon.cri,
      pod,
      containerConfig('root', image.reference, {
        envs: [{ key: 'DB_PASSWORD', value: Buffer.from(SECRET) }],
      }),
    );
  });

  after(async () => {
    await daemon?.destroy();
    await registry?.stop();
  });

  it('keeps the database, its WAL and shm 0600: no other user reads the secrets in them', async () => {
    const db = join(daemon.rootDir, 'berth.db');
    const files = [db, `${db}-wal`, `${db}-shm`];
    const bytes = Buffer.concat(await Promise.all(files.map((f) => readFile(f))));
    assert.ok(bytes.includes(SECRET), 'the database holds the container env');
    for (const file of files) {
      assert.equal((await stat(file)).mode & 0o777, 0o600, file);
      await assertUnreachable(file, ['cat', file]);
    }
  });

  it('keeps the OCI specs, runc state and logs, which hold the env, from other users', async () => {
    const sandboxDir = join(daemon.rootDir, 'sandboxes', pod.id);
    const secretFiles = [
      join(containerDir(ctr, daemon.rootDir), 'bundle', 'config.json'),
      join(sandboxDir, 'bundle', 'config.json'),
      join(daemon.runcRoot, ctr, 'state.json'),
      join(daemon.base, 'logs', 'files', 'root', '0.log'),
    ];
    for (const file of secretFiles) {
      assert.equal((await stat(file)).mode & 0o077, 0, `${file} is for root only`);
      await assertUnreachable(file, ['cat', file]);
    }
  });

  it("lets no other user reach the image's setuid files, file capabilities and device nodes", async () => {
    // Each as the image has it: the layer, and the container's rootfs, mounted without nosuid.
    const diffId = image.layers[0]?.diffId ?? '';
    await assertImageContentUnreachable(new LayerStore(daemon.rootDir).fsDir(diffId));
    await assertImageContentUnreachable(rootfsPath(ctr, daemon.rootDir));
    // One the container makes lands in its upper dir.
    await execText(daemon.cri, ctr, ['sh', '-c', 'cp /suid/id /tmp/made && chmod 4755 /tmp/made']);
    const made = join(containerDir(ctr, daemon.rootDir), 'upper', 'tmp', 'made');
    assert.equal((await stat(made)).mode & 0o4000, 0o4000);
    await assertUnreachable(made, [made]);
  });

  it("keeps the rootfs, volumes and the pod's files usable by a container's own non-root user", async () => {
    const volume = join(daemon.base, 'volume');
    await mkdir(volume);
    await chown(volume, 1000, 1000);
    const id = await startContainer(
      daemon.cri,
      pod,
      containerConfig('app', image.reference, {
        mounts: [{ container_path: '/vol', host_path: volume }],
        linux: { security_context: { run_as_user: { value: '1000' } } },
      }),
    );
    const script = [
      'echo home > /home/app/f && cat /home/app/f',
      'echo tmp > /tmp/f && cat /tmp/f',
      'echo vol > /vol/f && cat /vol/f',
      'echo shm > /dev/shm/f && cat /dev/shm/f',
      'cat /etc/hosts /etc/resolv.conf /etc/hostname > /dev/null && echo pod files',
    ].join(' && ');
    assert.equal(await execText(daemon.cri, id, ['sh', '-c', script]), 'home\ntmp\nvol\nshm\npod files\n');
    assert.equal(await readFile(join(volume, 'f'), 'utf8'), 'vol\n');
    assert.equal((await stat(join(volume, 'f'))).uid, 1000);
  });

  it('makes nothing group- or world-writable under umask 000, and gives containers umask 022', async () => {
    // An exec's dir in the state dir, made and removed again.
    assert.equal((await execSync(daemon.cri, ctr, ['true'])).exit_code, 0);
    const mounts = new Set((await mountPointsBelow(daemon.base)).filter((p) => p !== daemon.netnsDir));
    // The pod's log dir too: berthd made it, kubelet had not.
    const dirs = [daemon.rootDir, daemon.stateDir, daemon.netnsDir, join(daemon.base, 'logs')];
    const entries = (await Promise.all(dirs.map((dir) => berthMade(dir, mounts)))).flat();
    assert.ok(entries.length > 50, `walked ${entries.length} entries`);
    const writable = entries.filter((e) => (e.mode & 0o022) !== 0);
    assert.deepEqual(
      writable.map((e) => `${e.mode.toString(8)} ${e.path}`),
      [],
      'group- or world-writable files berthd made',
    );
    assert.equal((await execText(daemon.cri, ctr, ['sh', '-c', 'umask'])).trim(), '0022');
  });

  it("makes an older berth's root and database private when it starts", async () => {
    // As berth left them before: root and its dirs 0711, the database 0644. kill -9 keeps the WAL.
    await daemon.kill9();
    const db = join(daemon.rootDir, 'berth.db');
    for (const dir of ['', 'layers', 'containers', 'sandboxes', 'blobs'])
      await chmod(join(daemon.rootDir, dir), 0o711);
    for (const file of [db, `${db}-wal`, `${db}-shm`]) await chmod(file, 0o644);
    await daemon.start();
    assert.equal((await stat(daemon.rootDir)).mode & 0o777, 0o700);
    for (const file of [db, `${db}-wal`, `${db}-shm`]) {
      assert.equal((await stat(file)).mode & 0o777, 0o600, file);
      await assertUnreachable(file, ['cat', file]);
    }
    await assertImageContentUnreachable(rootfsPath(ctr, daemon.rootDir));
    // The container kept running across the restart, as any does.
    assert.equal(await execText(daemon.cri, ctr, ['echo', 'alive']), 'alive\n');
  });
});

describe('one berthd per dir', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  const image = useBusyboxImage('berth/one-berthd');
  let first: TestDaemon;
  let pod: Pod;

  before(async () => {
    first = await TestDaemon.create();
    await first.cri.callImage('PullImage', { image: { image: image() } });
    pod = await runPod(first.cri, first.pod('first'));
    // conmon outlives berthd: it must not hold berthd's locks.
    await startContainer(first.cri, pod, containerConfig('c', image()));
  });

  after(async () => {
    await first?.destroy();
  });

  /** Starts a second berthd with `args`; it must refuse. Returns why it did. */
  async function refusedStart(args: string[]): Promise<string> {
    let second: TestDaemon;
    try {
      second = await TestDaemon.create({ extraArgs: args });
    } catch (err) {
      return String(err);
    }
    await second.destroy();
    assert.fail(`a second berthd started with ${args.join(' ')}`);
  }

  for (const [flag, what, dir] of [
    ['--netns-dir', 'netns dir', (d: TestDaemon) => d.netnsDir],
    ['--root', 'root dir', (d: TestDaemon) => d.rootDir],
    ['--state', 'state dir', (d: TestDaemon) => d.stateDir],
  ] as const) {
    it(`refuses to start on another berthd's ${what}, and leaves its pods alone`, async () => {
      const pinsBefore = await first.netnsFiles();
      assert.equal(pinsBefore.length, 1);
      const why = await refusedStart([flag, dir(first)]);
      assert.ok(
        why.includes(`${what} ${dir(first)} is in use by another berthd (pid ${first.proc?.pid})`),
        why,
      );
      assert.deepEqual(await first.netnsFiles(), pinsBefore);
      const status = await first.cri.call<{ status: { state: string } }>('PodSandboxStatus', {
        pod_sandbox_id: pod.id,
      });
      assert.equal(status.status.state, 'SANDBOX_READY');
    });
  }

  it('starts again on its own dirs after a kill -9, its conmons still running', async () => {
    await first.kill9();
    assert.ok((await first.conmonPids()).length > 0);
    await first.start();
    assert.equal((await first.netnsFiles()).length, 1);
  });
});
