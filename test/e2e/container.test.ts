/**
 * Containers in pods, end to end: a real berthd spoken to over its gRPC socket only, images pulled
 * from a real docker-registry on 127.0.0.1, pods on a real CNI bridge, containers run by runc under
 * conmon. Needs root. Traffic goes to loopback and to the test pods' own addresses only.
 */
import assert from 'node:assert/strict';
import { mkdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import { readMountInfo } from '../../src/mounts/mountinfo.js';
import { EXEC_SYNC_OUTPUT_CAP } from '../../src/runtime/exec-sync.js';
import { SHARED_PID_LINUX, TestDaemon } from '../harness/daemon.js';
import { namesIn } from '../harness/files.js';
import { ANSWER_BOUND_MS } from '../harness/bounds.js';
import { expectedCpu, liveLimits } from '../harness/cgroups.js';
import { rejectsWith } from '../harness/grpc.js';
import { busyboxLayer, pushImage, type PushedImage } from '../harness/images.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import {
  containerConfig,
  containerStatus,
  createContainer,
  execSync,
  execText,
  runPod,
  waitContainerState,
  type Pod,
} from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';
import type { WireContainer } from '../harness/wire.js';

const SUITE_TIMEOUT_MS = 600_000;
/** A grace longer than any hang bound here: a stop that waits it out is a stop that hangs. */
const LONG_GRACE_S = 3600;

/** Applets beyond the harness's base image that these tests need. */
const EXTRA_APPLETS = ['tail', 'tr', 'dd', 'seq', 'umount', 'sed', 'cut', 'yes', 'du'];

describe('containers in pods', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let image: PushedImage;
  let stopSignalImage: PushedImage;
  /** No Entrypoint, no Cmd. */
  let bare: PushedImage;
  let main: Pod;

  before(async () => {
    registry = await startRegistry();
    const layer = await busyboxLayer('gzip', {
      applets: EXTRA_APPLETS,
      entries: [{ type: 'dir', path: 'data' }],
    });
    image = await pushImage(registry, 'berth/ctr', '1', {
      layers: [layer],
      config: { Cmd: ['/bin/sleep', '1000'], WorkingDir: '/' },
    });
    stopSignalImage = await pushImage(registry, 'berth/ctr-usr1', '1', {
      layers: [layer],
      config: { Entrypoint: ['/bin/sh', '-c'], Cmd: ['sleep 1000'], StopSignal: 'SIGUSR1' },
    });
    bare = await pushImage(registry, 'berth/bare', '1', { layers: [layer] });
    daemon = await TestDaemon.create({ cni: 'bridge' });
    await daemon.cri.callImage('PullImage', { image: { image: bare.reference } });
    await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
    await daemon.cri.callImage('PullImage', { image: { image: stopSignalImage.reference } });
    // Its containers share the pod's pid namespace under the infra's init, so signals reach them
    // as in a shareProcessNamespace pod; kubelet's usual pod (pid CONTAINER) is sandbox-namespaces'.
    main = await runPod(daemon.cri, daemon.pod('main', { linux: SHARED_PID_LINUX }));
  });

  after(async () => {
    await daemon?.destroy();
    await registry?.stop();
  });

  /** A container of the test image, labelled with its name. */
  function config(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
    const labels = { labels: { name, suite: 'berth' }, annotations: { 'berth.test/container': name } };
    return containerConfig(name, image.reference, { ...labels, ...extra });
  }

  function create(name: string, extra: Record<string, unknown> = {}, pod = main): Promise<string> {
    return createContainer(daemon.cri, pod, config(name, extra));
  }

  async function startNew(name: string, extra: Record<string, unknown> = {}): Promise<string> {
    const id = await create(name, extra);
    await daemon.cri.call('StartContainer', { container_id: id });
    return id;
  }

  async function remove(id: string): Promise<void> {
    await daemon.cri.call('RemoveContainer', { container_id: id });
  }

  it('runs a container in the pod netns: eth0 has the pod IP, same netns inode as the SandboxKey', async () => {
    const id = await startNew('net');
    const sandbox = await daemon.cri.call<{ status: { network: { ip: string } }; info: { info: string } }>(
      'PodSandboxStatus',
      { pod_sandbox_id: main.id, verbose: true },
    );
    const info = JSON.parse(sandbox.info.info) as { sandboxKey: string };
    const addr = await execText(daemon.cri, id, ['ip', '-4', 'addr', 'show', 'eth0']);
    assert.match(addr, new RegExp(`inet ${sandbox.status.network.ip.replace(/\./g, '\\.')}/24`));
    const link = await execText(daemon.cri, id, ['readlink', '/proc/self/ns/net']);
    const inode = (await stat(info.sandboxKey)).ino;
    assert.equal(link.trim(), `net:[${inode}]`);
    const st = await containerStatus(daemon.cri, id);
    assert.equal(st.state, 'CONTAINER_RUNNING');
    assert.notEqual(st.started_at, '0');
    assert.equal(st.image?.image, image.reference);
    assert.equal(st.image_ref, `${registry.host}/berth/ctr@${image.manifestDigest}`);
    assert.equal(st.labels.name, 'net');
    await remove(id);
  });

  it('lets two containers of one pod talk over localhost and share ipc and uts', async () => {
    const server = await startNew('server', {
      command: ['/bin/sh', '-c', 'while true; do echo hello-from-server | nc -l -p 8080; done'],
    });
    const client = await startNew('client');
    let reply = '';
    await waitFor(async () => {
      const res = await execSync(daemon.cri, client, ['nc', '127.0.0.1', '8080'], 5);
      reply = res.stdout.toString();
      return reply.includes('hello-from-server');
    }, 10_000);
    for (const ns of ['ipc', 'uts', 'net']) {
      const a = await execText(daemon.cri, server, ['readlink', `/proc/self/ns/${ns}`]);
      const b = await execText(daemon.cri, client, ['readlink', `/proc/self/ns/${ns}`]);
      assert.equal(a, b, `${ns} namespace differs`);
    }
    assert.equal((await execText(daemon.cri, client, ['hostname'])).trim(), 'main');
    await remove(server);
    await remove(client);
  });

  it('shares the pod pid namespace (catatonit is pid 1) unless the container asks for its own', async () => {
    const shared = await startNew('pid-pod');
    assert.match(await execText(daemon.cri, shared, ['cat', '/proc/1/cmdline']), /catatonit/);
    const own = await startNew('pid-own', {
      linux: { security_context: { namespace_options: { pid: 'CONTAINER' } } },
    });
    assert.match(await execText(daemon.cri, own, ['cat', '/proc/1/cmdline']), /sleep/);
    await remove(shared);
    await remove(own);
  });

  it('runs a container of a host-network pod in the host netns', async () => {
    const hostNetwork = { linux: { security_context: { namespace_options: { network: 'NODE' } } } };
    const hostPod = await runPod(daemon.cri, daemon.pod('hostnet', hostNetwork));
    const id = await create('h', hostNetwork, hostPod);
    await daemon.cri.call('StartContainer', { container_id: id });
    const { readlink } = await import('node:fs/promises');
    assert.equal(
      (await execText(daemon.cri, id, ['readlink', '/proc/self/ns/net'])).trim(),
      await readlink('/proc/self/ns/net'),
    );
    await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: hostPod.id });
    await rejectsWith(containerStatus(daemon.cri, id), status.NOT_FOUND);
  });

  it('writes CRI logs with stdout and stderr, splitting long lines into P chunks and a final F', async () => {
    const id = await startNew('logs', {
      command: [
        '/bin/sh',
        '-c',
        'echo out-line; echo err-line >&2; head -c 40000 /dev/zero | tr "\\0" x; echo; echo done',
      ],
    });
    const st = await waitContainerState(daemon.cri, id, 'CONTAINER_EXITED');
    assert.equal(st.exit_code, 0);
    assert.equal(st.reason, 'Completed');
    const logPath = join(daemon.base, 'logs', 'main', 'logs', '0.log');
    // Absolute: kubelet reads the file at this path for `kubectl logs`.
    assert.equal(st.log_path, logPath);
    const lines = (await readFile(logPath, 'utf8')).split('\n').filter(Boolean);
    const parsed = lines.map((line) => {
      const m = /^(\S+) (stdout|stderr) ([PF]) (.*)$/.exec(line);
      assert.ok(m, `not a CRI log line: ${line.slice(0, 80)}`);
      assert.ok(!Number.isNaN(Date.parse(m[1] ?? '')), `bad timestamp ${m[1]}`);
      return { stream: m[2], tag: m[3], msg: m[4] ?? '' };
    });
    assert.deepEqual(parsed[0], { stream: 'stdout', tag: 'F', msg: 'out-line' });
    assert.ok(parsed.some((p) => p.stream === 'stderr' && p.tag === 'F' && p.msg === 'err-line'));
    // The long line: P records up to the first F (whose text may be empty if the newline came
    // in a read of its own), together exactly the line.
    const stdout = parsed.filter((p) => p.stream === 'stdout');
    const first = stdout.findIndex((p) => p.msg.startsWith('x'));
    const end = stdout.findIndex((p, i) => i >= first && p.tag === 'F');
    const long = stdout.slice(first, end + 1);
    assert.ok(long.length >= 2, 'a 40000-byte line is split');
    assert.ok(long.slice(0, -1).every((p) => p.tag === 'P'));
    assert.equal(long.map((p) => p.msg).join(''), 'x'.repeat(40000));
    assert.deepEqual(parsed.at(-1), { stream: 'stdout', tag: 'F', msg: 'done' });
    await remove(id);
  });

  it('reports exit code and reason, and OOMKilled for a container over its memory limit', async () => {
    const failing = await startNew('exit3', { command: ['/bin/sh', '-c', 'exit 3'] });
    const st = await waitContainerState(daemon.cri, failing, 'CONTAINER_EXITED');
    assert.equal(st.exit_code, 3);
    assert.equal(st.reason, 'Error');
    assert.ok(BigInt(st.finished_at) >= BigInt(st.started_at));

    const hog = await startNew('oom', {
      command: ['/bin/sh', '-c', 'tail /dev/zero'],
      linux: { resources: { memory_limit_in_bytes: String(16 * 1024 * 1024) } },
    });
    const oom = await waitContainerState(daemon.cri, hog, 'CONTAINER_EXITED', 30_000);
    assert.equal(oom.reason, 'OOMKilled');
    assert.equal(oom.exit_code, 137);
    await remove(failing);
    await remove(hog);
  });

  it('runs ExecSync with separate stdout/stderr and exit code, and times out with DEADLINE_EXCEEDED', async () => {
    const id = await startNew('exec');
    const res = await execSync(daemon.cri, id, ['/bin/sh', '-c', 'echo to-out; echo to-err >&2; exit 5']);
    assert.equal(res.stdout.toString(), 'to-out\n');
    assert.equal(res.stderr.toString(), 'to-err\n');
    assert.equal(res.exit_code, 5);
    const started = Date.now();
    await rejectsWith(execSync(daemon.cri, id, ['sleep', '30'], 1), status.DEADLINE_EXCEEDED, /timed out/);
    // Well short of the 30 s the command would sleep.
    assert.ok(Date.now() - started < 20_000);
    // The timed-out command is gone from the container.
    await waitFor(async () => !(await execText(daemon.cri, id, ['ps'])).includes('sleep 30'), 20_000);
    await rejectsWith(execSync(daemon.cri, id, []), status.INVALID_ARGUMENT, /cmd/);
    // The cap the daemon applies, not a copy of it: more output is read and dropped.
    const big = await execSync(daemon.cri, id, [
      '/bin/sh',
      '-c',
      `yes 0123456789abcdef | head -c ${EXEC_SYNC_OUTPUT_CAP + 4096}`,
    ]);
    assert.equal(big.stdout.length, EXEC_SYNC_OUTPUT_CAP);
    assert.equal(big.exit_code, 0);
    await remove(id);
    await rejectsWith(execSync(daemon.cri, id, ['true']), status.NOT_FOUND);
  });

  it('stops with the image StopSignal, escalates to SIGKILL after the timeout, and is idempotent', async () => {
    const stubborn = await startNew('stubborn', {
      command: ['/bin/sh', '-c', 'trap "" TERM; while true; do sleep 1; done'],
    });
    const started = Date.now();
    await daemon.cri.call('StopContainer', { container_id: stubborn, timeout: 2 });
    const elapsed = Date.now() - started;
    assert.ok(elapsed >= 1900, `stopped after ${elapsed} ms, before the timeout`);
    const st = await containerStatus(daemon.cri, stubborn);
    assert.equal(st.state, 'CONTAINER_EXITED');
    assert.equal(st.exit_code, 137);
    await daemon.cri.call('StopContainer', { container_id: stubborn, timeout: 2 });

    // The image says SIGUSR1: sh -c dies of it (exit 128+10) well before the timeout.
    const usr1 = await create('usr1', { image: { image: stopSignalImage.reference } });
    await daemon.cri.call('StartContainer', { container_id: usr1 });
    const t0 = Date.now();
    await daemon.cri.call('StopContainer', { container_id: usr1, timeout: 30 });
    // Well short of the 30 s timeout.
    assert.ok(Date.now() - t0 < 20_000);
    assert.equal((await containerStatus(daemon.cri, usr1)).exit_code, 128 + 10);
    await remove(stubborn);
    await remove(usr1);
    await remove(stubborn);
  });

  it('a stop with no grace is not held behind a stop with a long one: both return once the exit is recorded', async () => {
    const stubborn = await startNew('stubborn-twice', {
      command: ['/bin/sh', '-c', 'trap "touch /signalled" TERM; while true; do sleep 1; done'],
    });
    // kubelet shortens a grace by stopping again. The first stop's grace outlasts the hang bound:
    // only a stop that waits for the exit's record, not one that holds the container, returns in it.
    // Bounded too, so that a stop that waits out its grace fails this test instead of hanging it.
    const graceful = daemon.cri.call(
      'StopContainer',
      { container_id: stubborn, timeout: LONG_GRACE_S },
      { deadlineMs: 2 * ANSWER_BOUND_MS },
    );
    const settled = graceful.then(
      () => null,
      (err: unknown) => err,
    );
    await waitFor(
      async () => (await execSync(daemon.cri, stubborn, ['test', '-e', '/signalled'])).exit_code === 0,
      10_000,
      { what: 'the first stop signal' },
    );
    await daemon.cri.call(
      'StopContainer',
      { container_id: stubborn, timeout: 0 },
      { deadlineMs: ANSWER_BOUND_MS },
    );
    const st = await containerStatus(daemon.cri, stubborn);
    assert.equal(st.state, 'CONTAINER_EXITED');
    assert.equal(st.exit_code, 137);
    assert.equal(await settled, null, 'the stop with the long grace failed');
    await remove(stubborn);
  });

  it('releases an exited container at its exit: runc record and rootfs mount, leaving its files to Remove', async () => {
    const rootfsOf = (id: string): string => join(daemon.rootDir, 'containers', id, 'rootfs');
    const mounted = async (id: string): Promise<boolean> =>
      (await readMountInfo()).some((m) => m.mountPoint === rootfsOf(id));
    const released = async (id: string): Promise<boolean> =>
      !(await daemon.runcContainers()).includes(id) && !(await mounted(id));

    // Stopped: released by the time StopContainer returns.
    const stopped = await startNew('release-stop');
    assert.ok(await mounted(stopped), 'a running container has its rootfs mounted');
    await daemon.cri.call('StopContainer', { container_id: stopped, timeout: 0 });
    assert.ok(await released(stopped), 'StopContainer left the runc record or the rootfs mount');
    // Exited on its own: released once berthd has seen the exit.
    const ended = await startNew('release-exit', { command: ['/bin/sh', '-c', 'echo bye; exit 0'] });
    await waitContainerState(daemon.cri, ended, 'CONTAINER_EXITED');
    await waitFor(() => released(ended), 10_000);

    for (const id of [stopped, ended]) {
      // What stays is what Status and the logs read; Remove takes it.
      const st = await containerStatus(daemon.cri, id);
      assert.equal(st.state, 'CONTAINER_EXITED');
      assert.ok((await namesIn(join(daemon.rootDir, 'containers'))).includes(id));
      await remove(id);
      await rejectsWith(containerStatus(daemon.cri, id), status.NOT_FOUND);
      // The record goes first; the files follow in the background.
      await waitFor(async () => !(await namesIn(join(daemon.rootDir, 'containers'))).includes(id), 10_000, {
        what: `container dir of ${id} removed`,
      });
    }
  });

  it('resolves users and groups against the image, and honours a read-only rootfs', async () => {
    const named = await startNew('user', {
      linux: { security_context: { run_as_username: 'app', supplemental_groups: ['3000'] } },
    });
    assert.equal((await execText(daemon.cri, named, ['id', '-u'])).trim(), '1000');
    assert.equal((await execText(daemon.cri, named, ['id', '-g'])).trim(), '1000');
    const groups = (await execText(daemon.cri, named, ['id', '-G'])).trim().split(' ');
    assert.deepEqual(new Set(groups), new Set(['1000', '2000', '3000']));

    const numeric = await startNew('uid', {
      linux: { security_context: { run_as_user: { value: '1234' }, run_as_group: { value: '4321' } } },
    });
    assert.equal((await execText(daemon.cri, numeric, ['id', '-u'])).trim(), '1234');
    assert.equal((await execText(daemon.cri, numeric, ['id', '-g'])).trim(), '4321');
    // The kernel's own list (getgroups), where `id -G` would add the primary group itself: it
    // holds the primary gid, as under containerd.
    const kernelGroups = (await execText(daemon.cri, named, ['grep', '^Groups:', '/proc/self/status'])).split(
      /\s+/,
    );
    assert.ok(kernelGroups.includes('1000') && kernelGroups.includes('3000'), kernelGroups.join(' '));

    const ro = await startNew('ro', { linux: { security_context: { readonly_rootfs: true } } });
    const touch = await execSync(daemon.cri, ro, ['touch', '/data/x']);
    assert.notEqual(touch.exit_code, 0);
    assert.match(touch.stderr.toString(), /Read-only file system/);
    for (const id of [named, numeric, ro]) await remove(id);
  });

  it('bind-mounts a hostPath (symlink resolved) and propagates mounts both ways with BIDIRECTIONAL', async () => {
    const hostBase = join(daemon.base, 'host-mounts');
    await mkdir(hostBase, { recursive: true });
    await run('mount', ['-t', 'tmpfs', 'tmpfs', hostBase], { timeoutMs: 10_000 });
    await run('mount', ['--make-private', hostBase], { timeoutMs: 10_000 });
    try {
      const real = join(hostBase, 'real');
      await mkdir(real);
      await writeFile(join(real, 'from-host'), 'hi\n');
      const { symlink } = await import('node:fs/promises');
      await symlink(real, join(hostBase, 'link'));
      const config = {
        mounts: [
          {
            container_path: '/shared',
            host_path: join(hostBase, 'link'),
            propagation: 'PROPAGATION_BIDIRECTIONAL',
          },
        ],
        linux: { security_context: { privileged: true } },
      };
      // On a private host mount it is refused, and the host mount is left private.
      await rejectsWith(
        create('mounts-private', config),
        status.FAILED_PRECONDITION,
        /needs a shared host mount/,
      );
      const table = await readFile('/proc/self/mountinfo', 'utf8');
      const line =
        table
          .split('\n')
          .filter((l) => l.split(' ')[4] === hostBase)
          .at(-1) ?? '';
      assert.doesNotMatch(line, / shared:/, 'still private');
      await run('mount', ['--make-shared', hostBase], { timeoutMs: 10_000 });
      const id = await startNew('mounts', config);
      assert.equal(await execText(daemon.cri, id, ['cat', '/shared/from-host']), 'hi\n');
      await execText(daemon.cri, id, [
        'sh',
        '-c',
        'mkdir -p /shared/sub && mount -t tmpfs none /shared/sub && echo inner > /shared/sub/f',
      ]);
      assert.equal(await readFile(join(real, 'sub', 'f'), 'utf8'), 'inner\n');
      const st = await containerStatus(daemon.cri, id);
      assert.equal(st.mounts[0]?.propagation, 'PROPAGATION_BIDIRECTIONAL');
      await execText(daemon.cri, id, ['umount', '/shared/sub']);
      await remove(id);
    } finally {
      await run('umount', ['-R', '-l', hostBase], { timeoutMs: 10_000 }).catch(() => undefined);
    }
  });

  it('reopens the log file after kubelet renames it', async () => {
    const id = await startNew('rotate', {
      command: ['/bin/sh', '-c', 'i=0; while true; do echo line-$i; i=$((i+1)); sleep 0.1; done'],
    });
    const logPath = join(daemon.base, 'logs', 'main', 'rotate', '0.log');
    await waitFor(async () => (await readFile(logPath, 'utf8').catch(() => '')).includes('line-2'), 10_000);
    await rename(logPath, `${logPath}.1`);
    await daemon.cri.call('ReopenContainerLog', { container_id: id });
    await waitFor(
      async () => (await readFile(logPath, 'utf8').catch(() => '')).includes('stdout F line-'),
      10_000,
    );
    const rotated = await readFile(`${logPath}.1`, 'utf8');
    assert.match(rotated, /stdout F line-0/);
    await daemon.cri.call('StopContainer', { container_id: id, timeout: 0 });
    await rejectsWith(
      daemon.cri.call('ReopenContainerLog', { container_id: id }),
      status.FAILED_PRECONDITION,
    );
    await remove(id);
  });

  it('lists containers by id prefix, state, sandbox and labels', async () => {
    const a = await startNew('list-a', { labels: { group: 'one', name: 'list-a' } });
    const b = await create('list-b', { labels: { group: 'one', name: 'list-b' } });
    const list = async (filter: Record<string, unknown>): Promise<string[]> =>
      (await daemon.cri.call<{ containers: WireContainer[] }>('ListContainers', { filter })).containers
        .map((c) => c.id)
        .sort();
    assert.deepEqual(await list({ label_selector: { group: 'one' } }), [a, b].sort());
    assert.deepEqual(await list({ id: a.slice(0, 12) }), [a]);
    assert.deepEqual(
      await list({ state: { state: 'CONTAINER_CREATED' }, label_selector: { group: 'one' } }),
      [b],
    );
    assert.deepEqual(
      await list({ state: { state: 'CONTAINER_RUNNING' }, label_selector: { group: 'one' } }),
      [a],
    );
    assert.deepEqual(
      await list({ pod_sandbox_id: main.id.slice(0, 10), label_selector: { name: 'list-b' } }),
      [b],
    );
    assert.deepEqual(await list({ pod_sandbox_id: 'f'.repeat(64) }), []);
    const stats = await daemon.cri.call<{
      stats: { attributes: { id: string }; cpu: unknown; memory: unknown }[];
    }>('ListContainerStats', { filter: { label_selector: { group: 'one' } } });
    assert.deepEqual(stats.stats.map((s) => s.attributes.id).sort(), [a, b].sort());
    await remove(a);
    await remove(b);
  });

  it('reports stats from the container cgroup and its writable layer', async () => {
    const id = await startNew('stats', {
      command: [
        '/bin/sh',
        '-c',
        'dd if=/dev/zero of=/data/blob bs=1024 count=512; while true; do sleep 1; done',
      ],
    });
    await waitFor(async () => (await execText(daemon.cri, id, ['ls', '/data'])).includes('blob'), 10_000);
    const res = await daemon.cri.call<{
      stats: {
        cpu: { usage_core_nano_seconds: { value: string } };
        memory: { working_set_bytes: { value: string } };
        writable_layer: { used_bytes: { value: string }; inodes_used: { value: string } };
      };
    }>('ContainerStats', { container_id: id });
    assert.ok(BigInt(res.stats.cpu.usage_core_nano_seconds.value) > 0n);
    assert.ok(BigInt(res.stats.memory.working_set_bytes.value) > 0n);
    assert.ok(BigInt(res.stats.writable_layer.used_bytes.value) >= 512n * 1024n);
    assert.ok(BigInt(res.stats.writable_layer.inodes_used.value) >= 1n);
    await remove(id);
  });

  it('updates resources of a running container', async () => {
    const id = await startNew('update', {
      linux: { resources: { memory_limit_in_bytes: String(64 * 1024 * 1024) } },
    });
    await daemon.cri.call('UpdateContainerResources', {
      container_id: id,
      linux: { memory_limit_in_bytes: String(96 * 1024 * 1024), cpu_shares: '512' },
    });
    // In the cgroup berth made for the pod, which kubelet gave no cgroup_parent.
    assert.deepEqual(await liveLimits(`berth/pod_${main.id}/${id}`), {
      memoryLimitBytes: 96 * 1024 * 1024,
      cpu: expectedCpu(512),
    });
    await remove(id);
  });

  it('rejects bad configs with clear errors and leaves nothing behind', async () => {
    const before = await hostState();
    await rejectsWith(
      create('noimage', { image: { image: `${registry.host}/berth/absent:1` } }),
      status.NOT_FOUND,
      /absent/,
    );
    await rejectsWith(create('nosandbox', {}, { ...main, id: 'f'.repeat(64) }), status.NOT_FOUND, /sandbox/);
    await rejectsWith(
      create('group', { linux: { security_context: { run_as_group: { value: '10' } } } }),
      status.INVALID_ARGUMENT,
      /run_as_group/,
    );
    await rejectsWith(
      create('nouser', { linux: { security_context: { run_as_username: 'ghost' } } }),
      status.INVALID_ARGUMENT,
      /ghost/,
    );
    await rejectsWith(
      create('nocmd', { image: { image: bare.reference } }),
      status.INVALID_ARGUMENT,
      /command/,
    );
    const dup = await create('dup');
    await rejectsWith(create('dup'), status.ALREADY_EXISTS, /dup/);
    await remove(dup);
    await rejectsWith(daemon.cri.call('StartContainer', { container_id: 'f'.repeat(64) }), status.NOT_FOUND);
    await daemon.cri.call('RemoveContainer', { container_id: 'f'.repeat(64) });
    assert.deepEqual(await hostState(), before);
  });

  it('refuses to remove an image a container uses', async () => {
    const id = await create('pin');
    await rejectsWith(
      daemon.cri.callImage('RemoveImage', { image: { image: image.reference } }),
      status.FAILED_PRECONDITION,
      /in use/,
    );
    await remove(id);
  });

  it('keeps running containers across a restart and learns exits that happened while it was down', async () => {
    const keeps = await startNew('keeps');
    const exits = await startNew('exits-later', { command: ['/bin/sh', '-c', 'sleep 2; exit 7'] });
    await daemon.kill9();
    await daemon.waitForExitFile(exits);
    await daemon.start();
    const st = await containerStatus(daemon.cri, exits);
    assert.equal(st.state, 'CONTAINER_EXITED');
    assert.equal(st.exit_code, 7);
    assert.equal((await containerStatus(daemon.cri, keeps)).state, 'CONTAINER_RUNNING');
    assert.equal((await execSync(daemon.cri, keeps, ['true'])).exit_code, 0);
    // The watcher works after the restart too.
    await daemon.cri.call('StopContainer', { container_id: keeps, timeout: 0 });
    assert.equal((await containerStatus(daemon.cri, keeps)).exit_code, 137);
    await remove(keeps);
    await remove(exits);
  });

  it('stops and removes the containers of a pod with StopPodSandbox and RemovePodSandbox', async () => {
    const second = await runPod(daemon.cri, daemon.pod('second'));
    const id = await create('c', {}, second);
    await daemon.cri.call('StartContainer', { container_id: id });
    await daemon.cri.call('StopPodSandbox', { pod_sandbox_id: second.id });
    assert.equal((await containerStatus(daemon.cri, id)).state, 'CONTAINER_EXITED');
    await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: second.id });
    await rejectsWith(containerStatus(daemon.cri, id), status.NOT_FOUND);
    assert.ok(!(await daemon.runcContainers()).includes(id));
    assert.ok(!(await namesIn(join(daemon.rootDir, 'containers'))).includes(id));
  });

  /** What a failed create must not leave: container dirs, runc containers, exit files. */
  /**
   * Once the files of removed containers are gone (RemoveContainer deletes them in the background):
   * every container dir and exit file then belongs to a container or pod the API lists.
   */
  async function hostState(): Promise<{ dirs: string[]; runc: string[]; exits: string[] }> {
    const read = async () => ({
      dirs: (await namesIn(join(daemon.rootDir, 'containers'))).sort(),
      runc: (await daemon.runcContainers()).sort(),
      exits: (await namesIn(join(daemon.stateDir, 'exits'))).sort(),
    });
    const listed = async (): Promise<Set<string>> => {
      const containers = await daemon.cri.call<{ containers: { id: string }[] }>('ListContainers', {});
      const pods = await daemon.cri.call<{ items: { id: string }[] }>('ListPodSandbox', {});
      return new Set([...containers.containers, ...pods.items].map((record) => record.id));
    };
    await waitFor(
      async () => {
        const [state, known] = [await read(), await listed()];
        return [...state.dirs, ...state.exits].every((name) => known.has(name));
      },
      10_000,
      { what: 'the files of removed containers deleted' },
    );
    return read();
  }
});
