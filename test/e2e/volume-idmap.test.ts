/**
 * Volumes kubelet sends with uidMappings and gidMappings, end to end: a real berthd over its CRI
 * socket binds each one idmapped in the container's dir before runc sees it (in a pod of the
 * host's user namespace, the mapping's namespace is one berth makes for the create). Checked from
 * inside the container and on disk; a mount the kernel cannot idmap fails the create with nothing
 * left, and so does a berthd killed after the binds. Needs root; traffic goes to loopback only.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chmod, chown, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { release } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import { status } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import { PAUSE_BEFORE_STEP_ENV, type TestDaemon, useDaemon } from '../harness/daemon.js';
import { exists, namesIn } from '../harness/files.js';
import { rejectsWith } from '../harness/grpc.js';
import { useBusyboxImage } from '../harness/images.js';
import { mountPointsBelow as mountsBelow } from '../harness/mounts.js';
import { startAndLog } from '../harness/log.js';
import {
  containerConfig,
  containerStatus,
  createContainer,
  execSync,
  execText,
  runPod,
  startContainer,
  type Pod,
} from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 600_000;
const T = 15_000;
const UID_BASE = 100000;
const GID_BASE = 200000;
/** As kubelet sends them for a pod of 65536 ids: the uids and gids mapped apart, to tell them apart. */
const MAPPED = {
  uidMappings: [{ container_id: 0, host_id: UID_BASE, length: 65536 }],
  gidMappings: [{ container_id: 0, host_id: GID_BASE, length: 65536 }],
};
const [major = 0, minor = 0] = release().split('.').map(Number);
const tmpfsSkip =
  major > 6 || (major === 6 && minor >= 3)
    ? false
    : `tmpfs is idmapped from Linux 6.3 on, this is ${release()}`;

let imageRef: () => string;

describe('idmapped volumes', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  imageRef = useBusyboxImage('berth/volume-idmap');
  const daemon = useDaemon({}, (d) => d.cri.callImage('PullImage', { image: { image: imageRef() } }));
  /** On the root filesystem, not a tmpfs: what a hostPath usually is. */
  let data = '';
  let single = '';
  /** A tmpfs as kubelet's emptyDir (medium Memory), secret and projected volumes are, and one below it. */
  let memory = '';
  let base = '';

  before(async () => {
    base = await mkdtemp(join('/var/tmp', `berth-test-volume-idmap-${randomBytes(2).toString('hex')}-`));
    await chmod(base, 0o755);
    data = join(base, 'data');
    await mkdir(data);
    // Anyone may create in it: what decides is the id the kernel stores.
    await chmod(data, 0o777);
    await ownedFile(join(data, 'root-file'), 0, 0);
    await ownedFile(join(data, 'user-file'), 1234, 1234);
    single = join(base, 'single');
    await ownedFile(single, 1234, 1234);
    memory = join(base, 'memory');
    await mkdir(memory);
    await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', memory], { timeoutMs: T });
    await ownedFile(join(memory, 'file'), 1234, 1234);
    await mkdir(join(memory, 'sub'));
    await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', join(memory, 'sub')], { timeoutMs: T });
    await ownedFile(join(memory, 'sub', 'file'), 42, 42);
  });

  after(async () => {
    if (!base) return;
    await run('umount', ['--recursive', '--lazy', memory], { timeoutMs: T }).catch(() => undefined);
    await rm(base, { recursive: true, force: true });
  });

  test('files show as the host ids their on-disk ids map to; a plain mount beside shows them as they are', async (t) => {
    const d = daemon();
    const pod = await runPodFor(t, d, 'shown');
    const id = await startIn(d, pod, 'shown', [
      { container_path: '/mapped', host_path: data, ...MAPPED },
      { container_path: '/plain', host_path: data },
    ]);
    const owners = await stats(d, id, [
      '/mapped/root-file',
      '/mapped/user-file',
      '/plain/root-file',
      '/plain/user-file',
    ]);
    assert.deepEqual(owners, [
      `${UID_BASE} ${GID_BASE}`,
      `${UID_BASE + 1234} ${GID_BASE + 1234}`,
      '0 0',
      '1234 1234',
    ]);

    // Staged in the container's dir, the transient user namespace gone once the bind was made.
    const staged = join(d.rootDir, 'containers', id, 'v');
    assert.deepEqual(await mountsBelow(staged), [join(staged, '0')]);
    assert.deepEqual(await namesIn(staged), ['0']);
    assert.equal((await stat(staged)).mode & 0o777, 0o711);
    // Reported back as asked.
    const st = await containerStatus(d.cri, id);
    assert.deepEqual(
      st.mounts.map((m) => [m.container_path, m.uidMappings, m.gidMappings]),
      [
        ['/mapped', MAPPED.uidMappings, MAPPED.gidMappings],
        ['/plain', [], []],
      ],
    );

    // An exited container lets its staged volumes go; RemoveContainer takes the rest.
    await d.cri.call('StopContainer', { container_id: id, timeout: 0 });
    await waitFor(async () => (await mountsBelow(staged)).length === 0, T, {
      what: 'staged volumes unmounted at exit',
    });
    await d.cri.call('RemoveContainer', { container_id: id });
    await waitFor(async () => !(await exists(join(d.rootDir, 'containers', id))), T, {
      what: 'the container dir removed',
    });
    assert.equal(await readFile(join(data, 'user-file'), 'utf8'), 'user-file\n', 'the volume lost its files');
  });

  test('writes: a mapped id is stored as its on-disk id, and an id the mapping lacks creates nothing', async (t) => {
    const d = daemon();
    const pod = await runPodFor(t, d, 'writes');
    const mounts = [{ container_path: '/mapped', host_path: data, ...MAPPED }];
    const asRoot = await startIn(d, pod, 'root', mounts);
    // Host root is outside the mapping: the kernel cannot store its id, so it may not create.
    const created = await execSync(d.cri, asRoot, ['/bin/busybox', 'touch', '/mapped/by-root']);
    assert.notEqual(created.exit_code, 0, 'host root created a file through the idmapped mount');
    assert.match(created.stderr.toString(), /Value too large/);
    assert.equal(await exists(join(data, 'by-root')), false);
    // It may still write a file that exists, whose owner stays.
    await execText(d.cri, asRoot, ['/bin/sh', '-c', 'echo changed > /mapped/root-file']);
    assert.equal(await readFile(join(data, 'root-file'), 'utf8'), 'changed\n');
    assert.deepEqual(await owner(join(data, 'root-file')), [0, 0]);

    const asMapped = await startIn(d, pod, 'mapped', mounts, {
      linux: {
        security_context: {
          run_as_user: { value: String(UID_BASE + 1234) },
          run_as_group: { value: String(GID_BASE + 1234) },
        },
      },
    });
    await execText(d.cri, asMapped, ['/bin/busybox', 'touch', '/mapped/by-mapped']);
    assert.deepEqual(await owner(join(data, 'by-mapped')), [1234, 1234]);
    await execText(d.cri, asMapped, ['/bin/sh', '-c', 'echo mine > /mapped/user-file']);
    assert.equal(await readFile(join(data, 'user-file'), 'utf8'), 'mine\n');
    await writeFile(join(data, 'user-file'), 'user-file\n');
    await writeFile(join(data, 'root-file'), 'root-file\n');
    await rm(join(data, 'by-mapped'));
  });

  test('a tmpfs volume and the tmpfs mounted below it are idmapped both', { skip: tmpfsSkip }, async (t) => {
    const d = daemon();
    const pod = await runPodFor(t, d, 'tmpfs');
    const id = await startIn(d, pod, 'tmpfs', [{ container_path: '/memory', host_path: memory, ...MAPPED }]);
    assert.deepEqual(await stats(d, id, ['/memory/file', '/memory/sub/file']), [
      `${UID_BASE + 1234} ${GID_BASE + 1234}`,
      `${UID_BASE + 42} ${GID_BASE + 42}`,
    ]);
  });

  test('a file, and a read-only volume', async (t) => {
    const d = daemon();
    const pod = await runPodFor(t, d, 'file-ro');
    const id = await startIn(d, pod, 'file-ro', [
      { container_path: '/etc/single', host_path: single, ...MAPPED },
      { container_path: '/ro', host_path: data, readonly: true, ...MAPPED },
    ]);
    assert.deepEqual(await stats(d, id, ['/etc/single', '/ro/user-file']), [
      `${UID_BASE + 1234} ${GID_BASE + 1234}`,
      `${UID_BASE + 1234} ${GID_BASE + 1234}`,
    ]);
    assert.equal(await execText(d.cri, id, ['/bin/busybox', 'cat', '/etc/single']), 'single\n');
    const written = await execSync(d.cri, id, ['/bin/sh', '-c', 'echo x > /ro/user-file']);
    assert.notEqual(written.exit_code, 0);
    assert.match(written.stderr.toString(), /Read-only file system/);
  });

  test('mappings with a propagation other than private are refused', async (t) => {
    const d = daemon();
    const pod = await runPodFor(t, d, 'propagation');
    const mount = {
      container_path: '/mapped',
      host_path: data,
      propagation: 'PROPAGATION_HOST_TO_CONTAINER',
      ...MAPPED,
    };
    await rejectsWith(
      createContainer(d.cri, pod, containerConfig('propagation', imageRef(), { mounts: [mount] })),
      status.INVALID_ARGUMENT,
      'config.mounts[0].propagation: an idmapped mount requires PROPAGATION_PRIVATE',
    );
  });

  for (const [hostPath, fsType] of [
    ['/sys/kernel', 'sysfs'],
    ['/proc/sys', 'proc'],
  ] as const) {
    test(`a ${fsType} volume cannot be idmapped: refused naming it, nothing left`, async (t) => {
      const d = daemon();
      const pod = await runPodFor(t, d, `refused-${fsType}`);
      // One that can be comes first: what it staged must go too.
      const mounts = [
        { container_path: '/mapped', host_path: data, ...MAPPED },
        { container_path: '/host', host_path: hostPath, ...MAPPED },
      ];
      const err = await rejectsWith(
        createContainer(d.cri, pod, containerConfig('refused', imageRef(), { mounts })),
        status.FAILED_PRECONDITION,
        `config.mounts[1] (${hostPath} at /host) cannot be mounted idmapped: its filesystem (${fsType}), or one mounted below it, does not support idmapped mounts`,
      );
      assert.match(err.details, /\(mount_setattr\): EINVAL \(invalid argument\)$/);
      const listed = await d.cri.call<{ containers: unknown[] }>('ListContainers', { filter: {} });
      assert.deepEqual(listed.containers, []);
      assert.deepEqual(await namesIn(join(d.rootDir, 'containers')), []);
      assert.deepEqual(await mountsBelow(join(d.rootDir, 'containers')), []);
    });
  }

  test('kill -9 after the volumes were staged, before runc: start-up leaves nothing', async (t) => {
    const d = daemon();
    const pod = await runPodFor(t, d, 'killed');
    await d.stop();
    await startAndLog(d, { [PAUSE_BEFORE_STEP_ENV]: 'monitor' });
    const mounts = [
      { container_path: '/mapped', host_path: data, ...MAPPED },
      { container_path: '/etc/single', host_path: single, ...MAPPED },
    ];
    const pending = createContainer(d.cri, pod, containerConfig('killed', imageRef(), { mounts })).catch(
      (err: unknown) => err,
    );
    const pauseFile = await d.pausedBefore('monitor');
    const containers = join(d.rootDir, 'containers');
    const [id] = await namesIn(containers);
    assert.ok(id, 'no container dir');
    const staged = join(containers, id, 'v');
    assert.deepEqual(await mountsBelow(staged), [join(staged, '0'), join(staged, '1')]);

    await d.kill9();
    assert.ok((await pending) instanceof Error, 'the paused CreateContainer succeeded');
    await rm(pauseFile);
    await startAndLog(d);
    assert.deepEqual(await namesIn(containers), []);
    assert.deepEqual(await mountsBelow(containers), []);
    assert.equal(await readFile(single, 'utf8'), 'single\n', 'the volume lost its file');
    assert.equal(await readFile(join(data, 'user-file'), 'utf8'), 'user-file\n', 'the volume lost its files');
  });
});

async function ownedFile(path: string, uid: number, gid: number): Promise<void> {
  await writeFile(path, `${path.split('/').pop() ?? ''}\n`, { mode: 0o644 });
  await chown(path, uid, gid);
}

async function owner(path: string): Promise<[number, number]> {
  const st = await stat(path);
  return [st.uid, st.gid];
}

/** `uid gid` of each path, as the container sees them. */
async function stats(d: TestDaemon, id: string, paths: string[]): Promise<string[]> {
  const out = await execText(d.cri, id, ['/bin/busybox', 'stat', '-c', '%u %g', ...paths]);
  return out.trimEnd().split('\n');
}

/** A pod for one test, removed after it whatever happened. */
async function runPodFor(t: TestContext, d: TestDaemon, name: string): Promise<Pod> {
  const pod = await runPod(d.cri, d.pod(name));
  t.after(async () => {
    await d.cri.call('StopPodSandbox', { pod_sandbox_id: pod.id }).catch(() => undefined);
    await d.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id }).catch(() => undefined);
  });
  return pod;
}

function startIn(
  d: TestDaemon,
  pod: Pod,
  name: string,
  mounts: Record<string, unknown>[],
  extra: Record<string, unknown> = {},
): Promise<string> {
  return startContainer(d.cri, pod, containerConfig(name, imageRef(), { mounts, ...extra }));
}
