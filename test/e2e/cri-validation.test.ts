/**
 * What the CRI validation suite (cri-tools' critest, pkg/validate) and kubelet's kuberuntime expect
 * of a runtime's container RPCs, replayed against a real berthd: the same configs, the same commands
 * and the same assertions, with a busybox image of our own from a registry on 127.0.0.1 instead of
 * critest's public images. Streaming (Exec, Attach, PortForward) has its own suite, streaming.test.ts.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import {
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  rename,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status, type ServiceError } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import { removeCgroupTree } from '../harness/cgroups.js';
import { TestDaemon } from '../harness/daemon.js';
import { rejectsGrpc } from '../harness/grpc.js';
import {
  buildLayer,
  busyboxEntries,
  pushImage,
  type LayerEntry,
  type PushedImage,
} from '../harness/images.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { mountPointsBelow, unmountAllBelow } from '../harness/mounts.js';
import {
  containerStatus,
  createContainer,
  execSync,
  runPodSandbox,
  waitContainerState,
  type Pod as RunningPod,
} from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';
import type { WireContainer, WireContainerStatus } from '../harness/wire.js';

const SUITE_TIMEOUT_MS = 300_000;

/** critest's framework.DefaultAttempt. */
const ATTEMPT = 2;
/** critest's defaultExecSyncTimeout, in seconds. */
const EXEC_TIMEOUT = 30;
/** critest's defaultLog. */
const DEFAULT_LOG = 'hello World';
/** critest's pauseCmd and framework.DefaultContainerCommand. */
const PAUSE = ['sh', '-c', 'top'];
const TOP = ['top'];

/** Applets critest's commands use that the harness's base image does not link. */
const EXTRA_APPLETS = ['top', 'brctl', 'chmod', 'chown', 'ping', 'netstat', 'unshare', 'dd', 'umount'];

/** A setuid-root program for the NoNewPrivs tests, like critest's nonewprivs image. */
const NNP_SOURCE = `#include <stdio.h>
#include <unistd.h>
int main(void) { printf("Effective uid: %d\\n", (int)geteuid()); return 0; }
`;

interface WireStats {
  attributes: { id: string; metadata: { name: string; attempt: number } } | null;
  cpu: { timestamp: string; usage_core_nano_seconds: { value: string } | null } | null;
  memory: { timestamp: string; working_set_bytes: { value: string } | null } | null;
  writable_layer: { timestamp: string; used_bytes: { value: string } | null } | null;
}

interface Exec {
  stdout: string;
  stderr: string;
  exitCode: number;
}

interface Pod extends RunningPod {
  /** The pod's log_directory, or '' when it has none. */
  logDir: string;
}

interface LogMessage {
  timestamp: string;
  stream: string;
  log: string;
}

/** RFC 3339 with optional fraction, as Go's time.RFC3339Nano parser accepts it. */
const RFC3339_NANO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

/** critest's parseCRILog: four space-separated fields, the tag skipped, "\n" appended. */
function parseCriLog(text: string): LogMessage[] {
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => {
      const parts = line.split(' ');
      assert.ok(parts.length >= 4, `not a CRI log line: ${line}`);
      const [timestamp = '', stream = '', , ...rest] = parts;
      assert.match(timestamp, RFC3339_NANO, `timestamp of ${line}`);
      return { timestamp, stream, log: `${rest.join(' ')}\n` };
    });
}

/** Lazily unmounts everything under `dir`, then removes it only if nothing is mounted there any more. */
async function unmountAndRemove(dir: string): Promise<void> {
  await unmountAllBelow(dir);
  if ((await mountPointsBelow(dir)).length > 0) return;
  await rm(dir, { recursive: true, force: true });
}

async function buildNnpBinary(): Promise<Buffer | null> {
  if (!existsSync('/usr/bin/gcc')) return null;
  const dir = await mkdtemp(join(tmpdir(), 'berth-critest-nnp-'));
  try {
    await writeFile(join(dir, 'nnp.c'), NNP_SOURCE);
    await run('gcc', ['-static', '-O2', '-o', join(dir, 'nnp'), join(dir, 'nnp.c')], { timeoutMs: 60_000 });
    return await readFile(join(dir, 'nnp'));
  } catch {
    return null;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe(
  'CRI validation: what critest and kubelet expect of containers',
  { skip, timeout: SUITE_TIMEOUT_MS },
  () => {
    let registry: TestRegistry;
    let daemon: TestDaemon;
    let image: PushedImage;
    /** PullImageResponse.image_ref of `image`. */
    let imageId: string;
    let nnp: Buffer | null = null;
    /** Like framework.CreatePodSandboxForContainer: no hostname, no log directory, no DNS config. */
    let bare: Pod;
    /** Hostname, log directory, DNS config and sysctls. */
    let main: Pod;
    /** Like createPrivilegedPodSandbox(rc, true), with a hostname so its UTS namespace is its own. */
    let priv: Pod;
    /** Host network, pid and ipc. */
    let hostns: Pod;
    let seq = 0;
    const uniq = (prefix: string): string => `${prefix}${++seq}`;
    /** Host paths the tests made; removed in after() whatever happened. */
    const scratch: string[] = [];
    const ipcSegments: string[] = [];

    before(async () => {
      nnp = await buildNnpBinary();
      registry = await startRegistry();
      const busybox = await readFile('/bin/busybox');
      const entries: LayerEntry[] = [
        // A masked /bin/ls must be a file of its own: masking a symlink masks busybox itself.
        ...busyboxEntries(EXTRA_APPLETS).filter((e) => e.path !== 'bin/ls'),
        { type: 'file', path: 'bin/ls', content: busybox, mode: 0o755 },
        { type: 'dir', path: 'data' },
        { type: 'file', path: 'data/secret', content: 'top-secret\n' },
        { type: 'dir', path: 'mnt' },
        ...(nnp
          ? [{ type: 'file', path: 'bin/nnp', content: nnp, mode: 0o4755, uid: 0, gid: 0 } as LayerEntry]
          : []),
      ];
      const layer = await buildLayer(entries, 'gzip');
      image = await pushImage(registry, 'berth/critest', '1', {
        layers: [layer],
        config: { Cmd: ['/bin/sleep', '1000'], WorkingDir: '/' },
      });
      daemon = await TestDaemon.create({ cni: 'bridge' });
      imageId = (
        await daemon.cri.callImage<{ image_ref: string }>('PullImage', { image: { image: image.reference } })
      ).image_ref;
      bare = await runPod(uniq('create-PodSandbox-for-container-'), {}, false);
      main = await runPod(
        'crit-main',
        {
          hostname: 'crit-main',
          dns_config: { servers: ['10.10.10.10'], searches: ['google.com'], options: ['ndots:8'] },
          linux: {
            sysctls: {
              'kernel.shm_rmid_forced': '1',
              'fs.mqueue.msg_max': '100',
              'net.ipv4.ip_unprivileged_port_start': '42',
            },
          },
        },
        true,
      );
      priv = await runPod(
        uniq('create-Privileged-PodSandbox-for-container-'),
        { hostname: 'crit-priv', linux: { security_context: { privileged: true } } },
        false,
      );
      hostns = await runPod(
        uniq('NamespaceOption-PodSandbox-'),
        { linux: { security_context: { namespace_options: { network: 'NODE', pid: 'NODE', ipc: 'NODE' } } } },
        true,
      );
    });

    after(async () => {
      try {
        await daemon?.destroy();
      } finally {
        if (daemon) await removeCgroupTree(`berth-critest-${daemon.tag}`);
        await registry?.stop();
        // After the daemon: no container holds these mounts any more.
        for (const dir of scratch) await unmountAndRemove(dir);
        for (const id of ipcSegments) {
          await run('ipcrm', ['-m', id], { timeoutMs: 10_000 }).catch(() => undefined);
        }
      }
    });

    async function runPod(name: string, extra: Record<string, unknown>, withLogs: boolean): Promise<Pod> {
      const logDir = withLogs ? join(daemon.base, 'pod-logs', name) : '';
      // critest creates the pod's log directory itself, as kubelet does.
      if (logDir) await mkdir(logDir, { recursive: true });
      const config: Record<string, unknown> = {
        metadata: { name, uid: `cri-test-uid-${name}`, namespace: 'cri-test-namespace', attempt: ATTEMPT },
        linux: {},
        labels: {},
        ...(logDir ? { log_directory: logDir } : {}),
        ...extra,
      };
      return { id: await runPodSandbox(daemon.cri, config), config, logDir };
    }

    function ctrConfig(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
      return { metadata: { name, attempt: ATTEMPT }, image: { image: image.reference }, linux: {}, ...extra };
    }

    function create(pod: Pod, name: string, extra: Record<string, unknown> = {}): Promise<string> {
      return createContainer(daemon.cri, pod, ctrConfig(name, extra));
    }

    async function start(id: string): Promise<void> {
      await daemon.cri.call('StartContainer', { container_id: id });
    }

    /** critest's testStartContainer: start, then RUNNING. */
    async function runNew(pod: Pod, name: string, extra: Record<string, unknown> = {}): Promise<string> {
      const id = await create(pod, name, extra);
      await start(id);
      await waitState(id, 'CONTAINER_RUNNING');
      return id;
    }

    function statusOf(id: string, verbose = false): Promise<WireContainerStatus> {
      return containerStatus(daemon.cri, id, verbose);
    }

    function waitState(id: string, state: string, timeoutMs = 20_000): Promise<WireContainerStatus> {
      return waitContainerState(daemon.cri, id, state, timeoutMs);
    }

    async function exec(id: string, cmd: string[], timeout = EXEC_TIMEOUT): Promise<Exec> {
      const res = await execSync(daemon.cri, id, cmd, timeout);
      return { stdout: res.stdout.toString(), stderr: res.stderr.toString(), exitCode: res.exit_code };
    }

    /** critest's execSyncContainer: success and an empty stderr, or the test fails. */
    async function execOk(id: string, cmd: string[]): Promise<string> {
      const res = await exec(id, cmd);
      assert.equal(res.exitCode, 0, `${cmd.join(' ')}: ${res.stderr}`);
      assert.equal(res.stderr, '', `${cmd.join(' ')} wrote to stderr`);
      return res.stdout;
    }

    async function list(filter: Record<string, unknown> | null): Promise<WireContainer[]> {
      const req = filter ? { filter } : {};
      return (await daemon.cri.call<{ containers: WireContainer[] }>('ListContainers', req)).containers;
    }

    async function listStats(filter: Record<string, unknown> | null): Promise<WireStats[]> {
      const req = filter ? { filter } : {};
      return (await daemon.cri.call<{ stats: WireStats[] }>('ListContainerStats', req)).stats;
    }

    async function logOf(pod: Pod, logPath: string): Promise<LogMessage[]> {
      return parseCriLog(await readFile(join(pod.logDir, logPath), 'utf8').catch(() => ''));
    }

    async function hasLog(pod: Pod, logPath: string, text: string, stream = 'stdout'): Promise<boolean> {
      return (await logOf(pod, logPath)).some((m) => m.log === text && m.stream === stream);
    }

    /** Runs a container to completion in `pod` (which has logs) and returns its log messages. */
    async function runToExit(pod: Pod, name: string, extra: Record<string, unknown>): Promise<LogMessage[]> {
      const id = await create(pod, name, { log_path: `${name}.log`, ...extra });
      await start(id);
      await waitState(id, 'CONTAINER_EXITED');
      return logOf(pod, `${name}.log`);
    }

    async function scratchDir(prefix: string): Promise<string> {
      const dir = await mkdtemp(join(tmpdir(), prefix));
      scratch.push(dir);
      return dir;
    }

    // ---------------------------------------------------------------------------------------------

    describe('runtime info (runtime_info.go)', () => {
      it('answers Version and Status with a ready runtime and network', async () => {
        const version = await daemon.cri.call<{
          version: string;
          runtime_name: string;
          runtime_version: string;
          runtime_api_version: string;
        }>('Version', { version: 'v1' });
        assert.ok(version.version);
        assert.ok(version.runtime_name);
        assert.ok(version.runtime_version);
        assert.ok(version.runtime_api_version);
        const st = await daemon.cri.call<{
          status: { conditions: { type: string; status: boolean }[] };
        }>('Status', {});
        for (const type of ['RuntimeReady', 'NetworkReady']) {
          assert.equal(st.status.conditions.find((c) => c.type === type)?.status, true, type);
        }
      });
    });

    describe('basic operations (container.go)', () => {
      it('creates a container that ListContainers finds by id, in CREATED with only created_at set', async () => {
        const before = BigInt(Date.now()) * 1_000_000n;
        const id = await create(bare, uniq('container-for-create-'), { command: TOP });
        const found = await list({ id });
        assert.deepEqual(
          found.map((c) => c.id),
          [id],
        );
        assert.equal(found[0]?.state, 'CONTAINER_CREATED');
        assert.equal(found[0]?.pod_sandbox_id, bare.id);
        const st = await statusOf(id);
        assert.equal(st.state, 'CONTAINER_CREATED');
        assert.ok(
          BigInt(st.created_at) >= before - 1_000_000_000n,
          `created_at ${st.created_at} is nanoseconds`,
        );
        assert.equal(st.started_at, '0');
        assert.equal(st.finished_at, '0');
      });

      it('starts, stops within the timeout and removes containers, with ordered timestamps', async () => {
        const id = await create(bare, uniq('container-for-stop-test-'), { command: TOP });
        await start(id);
        const running = await waitState(id, 'CONTAINER_RUNNING');
        assert.ok(BigInt(running.started_at) >= BigInt(running.created_at));
        assert.equal(running.finished_at, '0');
        const t0 = Date.now();
        await daemon.cri.call('StopContainer', { container_id: id, timeout: 60 });
        assert.ok(Date.now() - t0 < 60_000);
        const exited = await waitState(id, 'CONTAINER_EXITED');
        assert.ok(BigInt(exited.finished_at) >= BigInt(exited.started_at));
        assert.equal(exited.started_at, running.started_at);
        // kubelet reads reason and exit code of every exited container.
        assert.notEqual(exited.reason, '');
        await daemon.cri.call('RemoveContainer', { container_id: id });
        assert.deepEqual(await list({ id }), []);
      });

      it('removes created, running and stopped containers', async () => {
        const created = await create(bare, uniq('container-for-remove-created-test-'), { command: PAUSE });
        const running = await runNew(bare, uniq('container-for-remove-running-test-'), { command: PAUSE });
        const stopped = await runNew(bare, uniq('container-for-remove-stopped-test-'), { command: PAUSE });
        await daemon.cri.call('StopContainer', { container_id: stopped, timeout: 60 });
        await waitState(stopped, 'CONTAINER_EXITED');
        for (const id of [created, running, stopped]) {
          await daemon.cri.call('RemoveContainer', { container_id: id });
          assert.deepEqual(await list({ id }), [], `${id} still listed`);
        }
      });

      it('runs execSync with exact stdout and an empty stderr', async () => {
        const id = await runNew(bare, uniq('container-for-execSync-test-'), { command: TOP });
        assert.equal(await execOk(id, ['echo', '-n', 'hello']), 'hello');
        // kubelet's remote client turns a non-zero exit into an error of its own: the RPC succeeds.
        assert.equal((await exec(id, ['sh', '-c', 'exit 7'])).exitCode, 7);
      });

      it('fails execSync past its timeout and leaves no process of it behind', async () => {
        const id = await runNew(bare, uniq('container-for-execSync-timeout-test-'), { command: TOP });
        const t0 = Date.now();
        const err = await rejectsGrpc(exec(id, ['sleep', '4321'], 1));
        assert.equal(err.code, status.DEADLINE_EXCEEDED);
        assert.ok(Date.now() - t0 < 10_000);
        // critest's checkSleepCmd is `pgrep sleep || true`; this busybox has no pgrep.
        const out = await execOk(id, ['sh', '-c', 'ps -o args | grep "^sleep 4321" || true']);
        assert.equal(out.trim(), '');
      });

      it('waits for execSync without a deadline when the timeout is 0', async () => {
        const id = await runNew(bare, uniq('container-for-execSync-no-timeout-'), { command: TOP });
        const res = await exec(id, ['sh', '-c', 'sleep 1; echo done'], 0);
        assert.equal(res.stdout, 'done\n');
      });

      it('stops a container that was created but never started', async () => {
        const id = await create(bare, uniq('container-stop-created-'), { command: TOP });
        await daemon.cri.call('StopContainer', { container_id: id, timeout: 10 });
        const st = await statusOf(id);
        assert.equal(st.state, 'CONTAINER_EXITED');
        // kubelet takes started_at only from containers that left CREATED; 0 is what it expects here.
        assert.equal(st.started_at, '0');
        await daemon.cri.call('RemoveContainer', { container_id: id });
      });

      it('fails to run a command the image does not have, naming it, and leaves no container behind', async () => {
        const name = uniq('container-no-such-command-');
        let id = '';
        try {
          id = await create(bare, name, { command: ['/nonexistent'] });
          await start(id);
          assert.fail('a missing executable started');
        } catch (err) {
          assert.match((err as ServiceError).details ?? String(err), /\/nonexistent/);
        }
        if (id) {
          // Failed at start: kubelet reports the status' reason (StartError) and exit code.
          const st = await statusOf(id);
          assert.equal(st.state, 'CONTAINER_EXITED');
          assert.notEqual(st.reason, '');
        } else {
          const left = (await list(null)).filter((c) => c.pod_sandbox_id === bare.id);
          assert.ok(
            !(await Promise.all(left.map((c) => statusOf(c.id)))).some((s) => s.metadata.name === name),
          );
        }
      });

      it('answers NOT_FOUND for the status of an unknown container, as kubelet checks', async () => {
        const err = await rejectsGrpc(statusOf('0'.repeat(64)));
        assert.equal(err.code, status.NOT_FOUND);
      });

      it('creates the next attempt of a container while the exited one remains', async () => {
        const name = uniq('restarted-');
        const attempt = async (n: number, command: string[]): Promise<string> =>
          (
            await daemon.cri.call<{ container_id: string }>('CreateContainer', {
              pod_sandbox_id: bare.id,
              config: { ...ctrConfig(name, { command }), metadata: { name, attempt: n } },
              sandbox_config: bare.config,
            })
          ).container_id;
        const first = await attempt(0, ['sh', '-c', 'exit 1']);
        await start(first);
        await waitState(first, 'CONTAINER_EXITED');
        const second = await attempt(1, TOP);
        await start(second);
        await waitState(second, 'CONTAINER_RUNNING');
        assert.equal((await statusOf(first)).state, 'CONTAINER_EXITED');
        assert.equal((await statusOf(second)).metadata.attempt, 1);
      });

      it('fails execSync in a container that is not running', async () => {
        const id = await create(bare, uniq('container-for-execSync-created-'), { command: TOP });
        await rejectsGrpc(exec(id, ['true']));
      });
    });

    describe('ListContainers and ContainerStatus as critest and kubelet read them', () => {
      it('filters by id, pod sandbox id, state and labels, and ANDs them', async () => {
        const podLabels = { 'io.kubernetes.pod.uid': 'uid-list', group: 'list' };
        const a = await runNew(bare, uniq('list-a-'), { command: TOP, labels: { ...podLabels, name: 'a' } });
        const b = await create(bare, uniq('list-b-'), { command: TOP, labels: { ...podLabels, name: 'b' } });
        const c = await runNew(main, uniq('list-c-'), {
          command: ['sleep', '1000'],
          labels: { ...podLabels, name: 'c' },
        });
        const ids = async (filter: Record<string, unknown> | null): Promise<string[]> =>
          (await list(filter)).map((x) => x.id).sort();
        const sorted = (...xs: string[]): string[] => [...xs].sort();
        const all = await ids(null);
        for (const x of [a, b, c]) assert.ok(all.includes(x));
        assert.deepEqual(await ids({ label_selector: podLabels }), sorted(a, b, c));
        assert.deepEqual(await ids({ label_selector: { ...podLabels, name: 'a' } }), [a]);
        assert.deepEqual(await ids({ label_selector: { group: 'list', absent: 'x' } }), []);
        assert.deepEqual(await ids({ pod_sandbox_id: bare.id, label_selector: podLabels }), sorted(a, b));
        assert.deepEqual(await ids({ pod_sandbox_id: main.id, label_selector: podLabels }), [c]);
        // kubelet's getKubeletContainers(allContainers=false): running ones only.
        assert.deepEqual(
          await ids({ state: { state: 'CONTAINER_RUNNING' }, label_selector: podLabels }),
          sorted(a, c),
        );
        assert.deepEqual(
          await ids({
            pod_sandbox_id: bare.id,
            state: { state: 'CONTAINER_RUNNING' },
            label_selector: podLabels,
          }),
          [a],
        );
        assert.deepEqual(await ids({ state: { state: 'CONTAINER_CREATED' }, label_selector: podLabels }), [
          b,
        ]);
        assert.deepEqual(await ids({ id: a, pod_sandbox_id: main.id }), []);
        assert.deepEqual(await ids({ id: a, state: { state: 'CONTAINER_EXITED' } }), []);
        await daemon.cri.call('StopContainer', { container_id: a, timeout: 0 });
        assert.deepEqual(await ids({ state: { state: 'CONTAINER_EXITED' }, label_selector: podLabels }), [a]);
      });

      it('reports image, image_ref, metadata, labels and annotations exactly as created', async () => {
        const labels = {
          'io.kubernetes.container.name': 'app',
          'io.kubernetes.pod.name': 'p',
          'io.kubernetes.pod.namespace': 'ns',
          'io.kubernetes.pod.uid': 'uid-1',
        };
        const annotations = {
          'io.kubernetes.container.hash': 'abc123',
          'io.kubernetes.container.restartCount': '0',
          'io.kubernetes.container.terminationMessagePath': '/dev/termination-log',
        };
        const name = uniq('status-fields-');
        const id = await create(main, name, {
          command: ['sleep', '1000'],
          labels,
          annotations,
          log_path: 'app/0.log',
        });
        const st = await statusOf(id);
        assert.deepEqual(st.metadata, { name, attempt: ATTEMPT });
        assert.deepEqual(st.labels, labels);
        assert.deepEqual(st.annotations, annotations);
        assert.equal(st.image?.image, image.reference);
        assert.equal(st.image_ref, `${registry.host}/berth/critest@${image.manifestDigest}`);
        // kubelet reads log_path (absolute) for `kubectl logs` and for termination messages.
        assert.equal(st.log_path, join(main.logDir, 'app/0.log'));
        const listed = (await list({ id }))[0];
        assert.deepEqual(listed?.labels, labels);
      });

      it('keeps one image identifier across PullImage, ImageStatus, ContainerStatus and ListContainers', async () => {
        // image_id_consistency.go: kubelet creates with the pulled image_ref and the user's name.
        const id = await create(bare, uniq('id-consistency-'), {
          image: { image: imageId, user_specified_image: image.reference },
        });
        await start(id);
        const img = await daemon.cri.callImage<{ image: { id: string } | null }>('ImageStatus', {
          image: { image: image.reference },
        });
        assert.equal(img.image?.id, imageId);
        const st = await statusOf(id);
        assert.equal(st.image_id, imageId);
        assert.equal((await list({ id }))[0]?.image_id, imageId);
        assert.equal(st.image?.user_specified_image, image.reference);
      });

      it('lists image_ref as the image id, which kubelets before 1.30 match against ListImages for image GC', async () => {
        const id = await create(bare, uniq('image-ref-'), { command: TOP });
        assert.equal((await list({ id }))[0]?.image_ref, imageId);
      });
    });

    describe('volumes (container.go, container_linux.go)', () => {
      it('starts a container with a hostPath volume, also when the host path is a symlink', async () => {
        const hostPath = await scratchDir(`test${bare.id.slice(0, 12)}`);
        await writeFile(join(hostPath, 'testVolume.file'), '');
        const link = `${hostPath}-symlink`;
        await symlink(hostPath, link);
        scratch.push(link);
        for (const path of [hostPath, link]) {
          const id = await runNew(bare, uniq('container-with-volume-test-'), {
            command: PAUSE,
            mounts: [{ host_path: path, container_path: path, selinux_relabel: true }],
          });
          assert.notEqual(await execOk(id, ['ls', '-A', path]), '', path);
          const st = await statusOf(id);
          assert.equal(st.mounts[0]?.host_path, path);
          assert.equal(st.mounts[0]?.container_path, path);
          await daemon.cri.call('RemoveContainer', { container_id: id });
        }
      });

      for (const propagation of [
        'PROPAGATION_PRIVATE',
        'PROPAGATION_BIDIRECTIONAL',
        'PROPAGATION_HOST_TO_CONTAINER',
      ] as const) {
        it(`mount propagation ${propagation} as critest tests it`, async () => {
          // createHostPathForMountPropagation
          const hostPath = await scratchDir('berth-critest-prop-');
          const mntSource = join(hostPath, 'mnt');
          const propagationMntPoint = join(mntSource, 'propagationMnt');
          const propagationSrcDir = join(hostPath, 'propagationSrcDir');
          await mkdir(propagationMntPoint, { recursive: true, mode: 0o700 });
          await mkdir(propagationSrcDir, { recursive: true, mode: 0o700 });
          await writeFile(join(propagationSrcDir, 'flagFile'), '');
          await run('mount', ['--rbind', mntSource, mntSource], { timeoutMs: 10_000 });
          const make = propagation === 'PROPAGATION_PRIVATE' ? '--make-rprivate' : '--make-rshared';
          await run('mount', [make, mntSource], { timeoutMs: 10_000 });

          const id = await create(priv, uniq('mount-propagation-test-'), {
            command: PAUSE,
            linux: { security_context: { privileged: true } },
            mounts: [{ host_path: mntSource, container_path: mntSource, propagation }],
          });
          try {
            const st = await statusOf(id, true);
            assert.equal(st.mounts.length, 1);
            assert.equal(st.mounts[0]?.container_path, mntSource);
            assert.equal(st.mounts[0]?.host_path, mntSource);
            assert.equal(st.mounts[0]?.readonly, false);
            assert.equal(st.mounts[0]?.selinux_relabel, false);
            assert.equal(st.mounts[0]?.propagation, propagation);
            await start(id);
            await waitState(id, 'CONTAINER_RUNNING');

            await run('mount', ['--rbind', propagationSrcDir, propagationMntPoint], { timeoutMs: 10_000 });
            const seen = await execOk(id, ['ls', '-A', propagationMntPoint]);
            if (propagation === 'PROPAGATION_PRIVATE')
              assert.equal(seen, '', 'host mount leaked into the container');
            else assert.notEqual(seen, '', 'host mount did not reach the container');

            const containerMntPoint = join(mntSource, 'containerMntPoint');
            await execOk(id, ['sh', '-c', `mkdir -p ${containerMntPoint}`]);
            // critest binds the container's /etc; its /data is as good and holds a file too.
            await execOk(id, ['sh', '-c', `mount --bind /data ${containerMntPoint}`]);
            const onHost = await readdir(containerMntPoint);
            if (propagation === 'PROPAGATION_BIDIRECTIONAL') {
              assert.notEqual(onHost.length, 0, 'container mount did not reach the host');
            } else {
              assert.deepEqual(onHost, [], 'container mount leaked to the host');
            }
          } finally {
            await daemon.cri.call('RemoveContainer', { container_id: id }).catch(() => undefined);
            await unmountAndRemove(hostPath);
          }
        });
      }

      /** createHostPathForRROMount: a host dir with a tmpfs mounted on its "tmpfs" subdirectory. */
      async function hostPathWithTmpfs(): Promise<string> {
        const hostPath = await scratchDir(`test${bare.id.slice(0, 12)}`);
        await mkdir(join(hostPath, 'tmpfs'), { mode: 0o700 });
        await run('mount', ['-t', 'tmpfs', 'none', join(hostPath, 'tmpfs')], { timeoutMs: 10_000 });
        return hostPath;
      }

      it('should support non-recursive readonly mounts', async () => {
        const hostPath = await hostPathWithTmpfs();
        const id = await runNew(bare, uniq('test-mount-'), {
          command: PAUSE,
          mounts: [{ host_path: hostPath, container_path: '/mnt', readonly: true, selinux_relabel: true }],
        });
        assert.equal((await statusOf(id, true)).mounts.length, 1);
        // Non-recursive: the submount stays writable, the mount itself does not.
        await execOk(id, ['touch', '/mnt/tmpfs/file']);
        assert.match((await exec(id, ['touch', '/mnt/file'])).stderr, /Read-only file system/);
        await daemon.cri.call('RemoveContainer', { container_id: id });
        await unmountAndRemove(hostPath);
      });

      it('refuses recursive readonly mounts without readonly or with propagation, and honours valid ones', async () => {
        const hostPath = await hostPathWithTmpfs();
        const mount = { host_path: hostPath, container_path: '/mnt', selinux_relabel: true };
        for (const bad of [
          {
            ...mount,
            readonly: true,
            recursive_read_only: true,
            propagation: 'PROPAGATION_HOST_TO_CONTAINER',
          },
          { ...mount, readonly: true, recursive_read_only: true, propagation: 'PROPAGATION_BIDIRECTIONAL' },
          { ...mount, readonly: false, recursive_read_only: true },
        ]) {
          await rejectsGrpc(create(bare, uniq('test-mount-'), { command: PAUSE, mounts: [bad] }));
        }
        // Status advertises recursive_read_only_mounts (runc's "rro"): the submounts must really be
        // read-only.
        const id = await create(bare, uniq('test-mount-'), {
          command: PAUSE,
          mounts: [{ ...mount, readonly: true, recursive_read_only: true }],
        });
        await start(id);
        await waitState(id, 'CONTAINER_RUNNING');
        assert.match((await exec(id, ['touch', '/mnt/tmpfs/foo'])).stderr, /Read-only file system/);
        await daemon.cri.call('RemoveContainer', { container_id: id });
        await unmountAndRemove(hostPath);
      });

      it('maps the devices kubelet passes for device plugins, with their cgroup permissions', async () => {
        const id = await runNew(bare, uniq('container-with-device-'), {
          command: PAUSE,
          devices: [
            { container_path: '/dev/mynull', host_path: '/dev/null', permissions: 'rwm' },
            { container_path: '/dev/xfuse', host_path: '/dev/fuse', permissions: 'r' },
          ],
        });
        await execOk(id, ['sh', '-c', 'echo x > /dev/mynull']);
        await execOk(id, ['sh', '-c', 'exec 3</dev/xfuse']);
        const res = await exec(id, ['sh', '-c', 'exec 3>/dev/xfuse']);
        assert.notEqual(res.exitCode, 0);
        assert.match(res.stderr, /Operation not permitted/);
      });

      it('writes a termination message to a mounted file kubelet can find through status mounts', async () => {
        const dir = await scratchDir('berth-critest-term-');
        const file = join(dir, 'termination-log');
        await writeFile(file, '');
        const id = await create(bare, uniq('termination-'), {
          command: ['sh', '-c', 'echo -n bye > /dev/termination-log; exit 3'],
          mounts: [{ host_path: file, container_path: '/dev/termination-log' }],
        });
        await start(id);
        const st = await waitState(id, 'CONTAINER_EXITED');
        assert.equal(st.exit_code, 3);
        assert.equal(st.reason, 'Error');
        // getTerminationMessage: the mount whose container_path is the message path, read on the host.
        const mount = st.mounts.find((m) => m.container_path === '/dev/termination-log');
        assert.ok(mount);
        assert.equal(await readFile(mount.host_path, 'utf8'), 'bye');
      });
    });

    describe('logs (container.go, multi_container_linux.go)', () => {
      it('runtime should support starting container with log', async () => {
        const name = uniq('container-with-log-test-');
        const messages = await runToExit(main, name, { command: ['echo', DEFAULT_LOG] });
        assert.ok(
          messages.some((m) => m.log === `${DEFAULT_LOG}\n` && m.stream === 'stdout'),
          JSON.stringify(messages),
        );
        const stderr = await runToExit(main, uniq('container-with-stderr-'), {
          command: ['sh', '-c', `echo ${DEFAULT_LOG} >&2`],
        });
        assert.ok(stderr.some((m) => m.log === `${DEFAULT_LOG}\n` && m.stream === 'stderr'));
      });

      it('keeps the log at ContainerStatus.log_path while the container runs', async () => {
        const name = uniq('busybox-');
        const id = await runNew(main, name, {
          command: ['sh', '-c', `echo ${DEFAULT_LOG}; sleep 1000`],
          log_path: `${name}.log`,
        });
        const st = await statusOf(id);
        await waitFor(
          async () => (await readFile(st.log_path, 'utf8').catch(() => '')).includes(DEFAULT_LOG),
          10_000,
        );
      });

      it('runtime should support reopening container log', async () => {
        const name = uniq('container-reopen-log-test-');
        const logPath = `${name}.log`;
        const id = await runNew(main, name, {
          command: ['sh', '-c', `while true; do echo ${DEFAULT_LOG}; sleep 0.3; done`],
          log_path: logPath,
        });
        await waitFor(async () => (await logOf(main, logPath)).length > 0, 10_000);
        const newLogPath = `${logPath}.new`;
        await rename(join(main.logDir, logPath), join(main.logDir, newLogPath));
        await daemon.cri.call('ReopenContainerLog', { container_id: id });
        // critest checks the new file right after the call returns.
        assert.ok(existsSync(join(main.logDir, logPath)), 'new container log file should be created');
        await waitFor(async () => (await logOf(main, logPath)).length > 0, 10_000);
        const oldLength = (await logOf(main, newLogPath)).length;
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        assert.equal(
          (await logOf(main, newLogPath)).length,
          oldLength,
          'old container log should not change',
        );
      });
    });

    describe('stdin and tty (kubectl run -i / -t)', () => {
      it('keeps a container with stdin open running instead of feeding it EOF', async () => {
        const id = await create(bare, uniq('container-with-stdin-'), {
          command: ['/bin/sh'],
          stdin: true,
          stdin_once: true,
        });
        await start(id);
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        assert.equal((await statusOf(id)).state, 'CONTAINER_RUNNING');
      });

      it('runs a tty container and logs its output as stdout', async () => {
        const messages = await runToExit(main, uniq('container-with-tty-'), {
          command: ['echo', 'hi-tty'],
          tty: true,
          stdin: true,
        });
        assert.ok(
          messages.some((m) => m.stream === 'stdout' && m.log.startsWith('hi-tty')),
          JSON.stringify(messages),
        );
      });
    });

    describe('stats (container.go)', () => {
      it('ContainerStats and ListContainerStats by id, nil filter and labels', async () => {
        const id = await runNew(bare, uniq('container-for-stats-'), { command: TOP, labels: { foo: 'bar' } });
        const { stats } = await daemon.cri.call<{ stats: WireStats }>('ContainerStats', { container_id: id });
        assert.equal(stats.attributes?.id, id);
        assert.match(stats.attributes?.metadata.name ?? '', /^container-for-stats-/);
        assert.notEqual(stats.cpu?.timestamp ?? '0', '0');
        assert.notEqual(stats.memory?.timestamp ?? '0', '0');
        assert.ok(stats.writable_layer, 'kubelet reads the writable layer for ephemeral-storage');
        assert.ok(stats.memory?.working_set_bytes, 'kubelet evicts on working set');
        const ids = (xs: WireStats[]): string[] => xs.map((s) => s.attributes?.id ?? '');
        assert.deepEqual(ids(await listStats({ id })), [id]);
        const three = [
          await runNew(bare, uniq('container-for-stats-with-nil-filter-'), { command: TOP }),
          await runNew(bare, uniq('container-for-stats-with-nil-filter-'), { command: TOP }),
          await runNew(bare, uniq('container-for-stats-with-nil-filter-'), { command: TOP }),
        ];
        const all = ids(await listStats(null));
        for (const x of [id, ...three]) assert.ok(all.includes(x), `${x} missing with a nil filter`);
        assert.ok(ids(await listStats({ label_selector: { foo: 'bar' } })).includes(id));
        assert.ok(!ids(await listStats({ label_selector: { foo: 'baz' } })).includes(id));
        assert.deepEqual(
          ids(await listStats({ pod_sandbox_id: main.id, label_selector: { foo: 'bar' } })),
          [],
        );
      });
    });

    describe('security context (security_context_linux.go)', () => {
      it('runtime should support RunAsUser, RunAsUserName and SupplementalGroups', async () => {
        const uid = await runNew(bare, uniq('container-with-RunAsUser-test-'), {
          command: PAUSE,
          linux: { security_context: { run_as_user: { value: '1001' } } },
        });
        assert.equal(await execOk(uid, ['id', '-u']), '1001\n');
        const named = await runNew(bare, uniq('container-with-RunAsUserName-test-'), {
          command: PAUSE,
          linux: { security_context: { run_as_username: 'nobody' } },
        });
        assert.equal(await execOk(named, ['id', '-nu']), 'nobody\n');
        const groups = await runNew(bare, uniq('container-with-SupplementalGroups-test-'), {
          command: PAUSE,
          linux: { security_context: { supplemental_groups: ['1234', '5678'] } },
        });
        const got = (await execOk(groups, ['id', '-G'])).trim().split(' ');
        assert.ok(got.includes('1234') && got.includes('5678'), got.join(' '));
        const st = await statusOf(groups);
        const sup = st.user?.linux?.supplemental_groups ?? [];
        assert.ok(sup.includes('1234') && sup.includes('5678'), `status.user: ${JSON.stringify(st.user)}`);
      });

      it('runtime should support RunAsGroup, and refuse it without RunAsUser', async () => {
        const name = uniq('container-with-RunAsGroup-test-');
        const messages = await runToExit(main, name, {
          command: ['sh', '-c', 'echo $(id -u):$(id -g)'],
          linux: { security_context: { run_as_user: { value: '1001' }, run_as_group: { value: '1002' } } },
        });
        assert.ok(
          messages.some((m) => m.log === '1001:1002\n' && m.stream === 'stdout'),
          JSON.stringify(messages),
        );
        await rejectsGrpc(
          create(bare, uniq('container-with-RunAsGroup-without-RunAsUser-test-'), {
            command: ['sh', '-c', 'echo $(id -u):$(id -g)'],
            linux: { security_context: { run_as_group: { value: '1002' } } },
          }),
        );
      });

      it('runtime should support that ReadOnlyRootfs is false and true', async () => {
        const cmd = ['sh', '-c', "touch test.go && [ -f test.go ] && echo 'Found'"];
        const rw = await runToExit(main, uniq('container-with-ReadOnlyRootfs-false-test-'), {
          command: cmd,
          linux: { security_context: { readonly_rootfs: false } },
        });
        assert.ok(
          rw.some((m) => m.log === 'Found\n' && m.stream === 'stdout'),
          JSON.stringify(rw),
        );
        const ro = await runToExit(main, uniq('container-with-ReadOnlyRootfs-true-test-'), {
          command: cmd,
          linux: { security_context: { readonly_rootfs: true } },
        });
        assert.ok(
          ro.some((m) => m.log === 'touch: test.go: Read-only file system\n' && m.stream === 'stderr'),
          JSON.stringify(ro),
        );
      });

      it('runtime should support Privileged is true and false (brctl addbr, ip link add, mount)', async () => {
        const p = await runNew(priv, uniq('container-with-isPrivileged-test-'), {
          command: PAUSE,
          linux: { security_context: { privileged: true } },
        });
        assert.equal((await exec(p, ['brctl', 'addbr', 'foobar'])).exitCode, 0);
        // Privileged sees the host's devices; unprivileged only the standard ones.
        assert.equal((await exec(p, ['test', '-c', '/dev/fuse'])).exitCode, 0);
        assert.equal((await exec(p, ['ip', 'link', 'add', 'vp1', 'type', 'veth'])).exitCode, 0);
        assert.equal((await exec(p, ['sh', '-c', 'mount -t tmpfs none /mnt && umount /mnt'])).exitCode, 0);
        const u = await runNew(bare, uniq('container-with-notPrivileged-test-'), {
          command: PAUSE,
          linux: { security_context: { privileged: false } },
        });
        assert.notEqual((await exec(u, ['brctl', 'addbr', 'foobar'])).exitCode, 0);
        assert.notEqual((await exec(u, ['test', '-e', '/dev/fuse'])).exitCode, 0);
        assert.notEqual((await exec(u, ['ip', 'link', 'add', 'vu1', 'type', 'veth'])).exitCode, 0);
        assert.notEqual((await exec(u, ['mount', '-t', 'tmpfs', 'none', '/mnt'])).exitCode, 0);
      });

      it('runtime should support adding capability (NET_ADMIN) and not grant it by default', async () => {
        const withCap = await runNew(bare, uniq('container-with-added-capability-test-'), {
          command: PAUSE,
          linux: { security_context: { capabilities: { add_capabilities: ['NET_ADMIN'] } } },
        });
        assert.equal((await exec(withCap, ['brctl', 'addbr', 'foobar1'])).exitCode, 0);
        const without = await runNew(bare, uniq('container-with-notCapability-test-'), { command: TOP });
        assert.notEqual((await exec(without, ['brctl', 'addbr', 'foobar2'])).exitCode, 0);
      });

      it('runtime should support dropping capability (NET_RAW: ping is denied)', async () => {
        const withRaw = await runNew(bare, uniq('container-with-raw-'), { command: PAUSE });
        assert.equal((await exec(withRaw, ['ping', '-c', '1', '-W', '2', '127.0.0.1'])).exitCode, 0);
        const id = await runNew(bare, uniq('container-with-dropped-capability-test-'), {
          command: PAUSE,
          linux: { security_context: { capabilities: { drop_capabilities: ['NET_RAW'] } } },
        });
        const res = await exec(id, ['ping', '-c', '1', '-W', '2', '127.0.0.1']);
        assert.notEqual(res.exitCode, 0);
        assert.match(res.stderr, /permission denied/);
      });

      it('runtime should support adding and dropping ALL capabilities', async () => {
        const all = await runNew(bare, uniq('container-with-added-all-capability-test-'), {
          command: PAUSE,
          linux: { security_context: { capabilities: { add_capabilities: ['ALL'] } } },
        });
        const allStatus = await execOk(all, ['cat', '/proc/self/status']);
        assert.doesNotMatch(allStatus, /CapBnd:\s0000000000000000/);
        const none = await runNew(bare, uniq('container-with-dropped-all-capability-test-'), {
          command: PAUSE,
          linux: { security_context: { capabilities: { drop_capabilities: ['ALL'] } } },
        });
        assert.match(await execOk(none, ['cat', '/proc/self/status']), /CapBnd:\s0000000000000000/);
        // Root without capabilities: no chown, no raw sockets, but ordinary work goes on.
        assert.notEqual((await exec(none, ['chown', '1000', '/tmp'])).exitCode, 0);
        assert.equal(await execOk(none, ['id', '-u']), '0\n');
        // The restricted Pod Security profile: drop ALL, add NET_BIND_SERVICE.
        const restricted = await runNew(bare, uniq('container-restricted-'), {
          command: PAUSE,
          linux: {
            security_context: {
              capabilities: { drop_capabilities: ['ALL'], add_capabilities: ['NET_BIND_SERVICE'] },
            },
          },
        });
        assert.match(await execOk(restricted, ['cat', '/proc/self/status']), /CapBnd:\s0000000000000400/);
      });

      it('lets CAP_SYS_ADMIN mount under RuntimeDefault seccomp, and refuses it without', async () => {
        const admin = await runNew(bare, uniq('container-sys-admin-'), {
          command: PAUSE,
          linux: {
            security_context: {
              capabilities: { add_capabilities: ['SYS_ADMIN'] },
              seccomp: { profile_type: 'RuntimeDefault' },
            },
          },
        });
        assert.equal(
          (await exec(admin, ['sh', '-c', 'mount -t tmpfs none /mnt && umount /mnt'])).exitCode,
          0,
        );
        const plain = await runNew(bare, uniq('container-no-sys-admin-'), {
          command: PAUSE,
          linux: { security_context: { seccomp: { profile_type: 'RuntimeDefault' } } },
        });
        assert.notEqual((await exec(plain, ['mount', '-t', 'tmpfs', 'none', '/mnt'])).exitCode, 0);
      });

      it('runtime should support MaskedPaths', async () => {
        const id = await runNew(bare, uniq('container-with-maskedpaths'), {
          command: PAUSE,
          linux: { security_context: { masked_paths: ['/bin/ls', '/data/secret'] } },
        });
        // critest runs `sh -c ls`; this busybox runs applets in-process unless given a path.
        const res = await exec(id, ['/bin/sh', '-c', '/bin/ls']);
        assert.notEqual(res.exitCode, 0);
        assert.equal(res.stderr, '/bin/sh: /bin/ls: Permission denied\n');
        assert.equal(await execOk(id, ['cat', '/data/secret']), '');
      });

      it('masks and write-protects the default paths when kubelet sends none', async () => {
        const id = await runNew(bare, uniq('container-default-masked-'), { command: PAUSE });
        assert.equal(await execOk(id, ['cat', '/proc/timer_list']), '');
        const res = await exec(id, ['sh', '-c', 'echo 1 > /proc/sys/kernel/domainname']);
        assert.notEqual(res.exitCode, 0);
        assert.match(res.stderr, /Read-only file system/);
      });

      it('runtime should support ReadonlyPaths', async () => {
        const id = await runNew(bare, uniq('container-with-readonlypaths'), {
          command: PAUSE,
          linux: { security_context: { readonly_paths: ['/tmp'] } },
        });
        const res = await exec(id, ['touch', '/tmp/test']);
        assert.notEqual(res.exitCode, 0);
        assert.equal(res.stderr, 'touch: /tmp/test: Read-only file system\n');
      });

      it('NoNewPrivs: a setuid binary gains nothing when true, root when false', async (t) => {
        if (!nnp) {
          t.skip('no gcc to build the setuid test program');
          return;
        }
        const yes = await runToExit(main, uniq('alpine-nnp-true-'), {
          command: ['/bin/nnp'],
          linux: { security_context: { no_new_privs: true, run_as_user: { value: '1000' } } },
        });
        assert.ok(
          yes.some((m) => m.log === 'Effective uid: 1000\n'),
          JSON.stringify(yes),
        );
        const no = await runToExit(main, uniq('alpine-nnp-false-'), {
          command: ['/bin/nnp'],
          linux: { security_context: { no_new_privs: false, run_as_user: { value: '1000' } } },
        });
        assert.ok(
          no.some((m) => m.log === 'Effective uid: 0\n'),
          JSON.stringify(no),
        );
      });
    });

    describe('seccomp (security_context_linux.go SeccompProfilePath)', () => {
      let profileDir: string;
      let blockHostname: string;
      let blockChmod: string;

      before(async () => {
        profileDir = await scratchDir('seccomp-tests');
        blockHostname = join(profileDir, 'block-host-name.json');
        blockChmod = join(profileDir, 'block-chmod.json');
        const profile = (names: string[]): string =>
          JSON.stringify({
            defaultAction: 'SCMP_ACT_ALLOW',
            syscalls: [{ names, action: 'SCMP_ACT_ERRNO' }],
          });
        await writeFile(blockHostname, profile(['sethostname']));
        await writeFile(blockChmod, profile(['chmod', 'fchmodat']));
      });

      const seccompField = ['grep', 'Seccomp:', '/proc/self/status'];

      it('Unconfined and a nil profile run without a filter; the default profile (RuntimeDefault) with one', async () => {
        const unconfined = await runNew(bare, uniq('seccomp-container-'), {
          command: PAUSE,
          linux: { security_context: { seccomp: { profile_type: 'Unconfined' } } },
        });
        assert.match(await execOk(unconfined, seccompField), /Seccomp:\s+0/);
        const nil = await runNew(bare, uniq('seccomp-container-'), { command: PAUSE });
        assert.match(await execOk(nil, seccompField), /Seccomp:\s+0/);
        // critest sends an empty SecurityProfile: profile_type 0 is RuntimeDefault.
        const dflt = await runNew(bare, uniq('seccomp-container-'), {
          command: PAUSE,
          linux: { security_context: { seccomp: {} } },
        });
        assert.match(await execOk(dflt, seccompField), /Seccomp:\s+2/);
        // What the default profile is for: no new user namespaces; unconfined, the kernel allows one.
        const denied = await exec(dflt, ['unshare', '-U', 'true']);
        assert.notEqual(denied.exitCode, 0);
        assert.match(denied.stderr, /Operation not permitted/);
        assert.equal((await exec(unconfined, ['unshare', '-U', 'true'])).exitCode, 0);
      });

      it('should support seccomp localhost profile on the container', async () => {
        const id = await runNew(bare, uniq('seccomp-container-'), {
          command: PAUSE,
          linux: { security_context: { seccomp: { profile_type: 'Localhost', localhost_ref: blockChmod } } },
        });
        const res = await exec(id, ['chmod', '400', '/']);
        assert.notEqual(res.exitCode, 0);
        assert.match(res.stderr, /Operation not permitted/);
      });

      /** sethostname changes the pod's UTS namespace: refuse to run where that is the host's. */
      async function assertOwnUts(id: string): Promise<void> {
        const inside = (await execOk(id, ['readlink', '/proc/self/ns/uts'])).trim();
        assert.notEqual(
          inside,
          await readlink('/proc/self/ns/uts'),
          'container shares the host UTS namespace',
        );
      }

      it('sethostname: allowed with Unconfined + SYS_ADMIN, blocked by a Localhost profile, allowed when privileged', async () => {
        const seccompContainer = async (
          profile: Record<string, unknown>,
          caps: string[],
          privileged: boolean,
        ): Promise<string> =>
          runNew(priv, uniq('container-with-block-hostname-seccomp-profile-test-'), {
            image: { image: image.reference, user_specified_image: image.reference },
            command: ['sleep', '60'],
            linux: {
              security_context: { privileged, capabilities: { add_capabilities: caps }, seccomp: profile },
            },
          });
        const open = await seccompContainer({ profile_type: 'Unconfined' }, ['SYS_ADMIN'], false);
        await assertOwnUts(open);
        assert.equal((await exec(open, ['hostname', 'ANewHostName'])).exitCode, 0);
        const blocked = await seccompContainer(
          { profile_type: 'Localhost', localhost_ref: blockHostname },
          ['SYS_ADMIN'],
          false,
        );
        assert.notEqual((await exec(blocked, ['hostname', 'ANewHostName'])).exitCode, 0);
        const privileged = await seccompContainer(
          { profile_type: 'Localhost', localhost_ref: blockHostname },
          [],
          true,
        );
        await assertOwnUts(privileged);
        assert.equal((await exec(privileged, ['hostname', 'ANewHostName'])).exitCode, 0);
        assert.equal((await exec(privileged, ['hostname', 'crit-priv'])).exitCode, 0);
      });
    });

    describe('pod-level settings containers see (networking.go, pod_linux.go)', () => {
      it('runtime should support set hostname', async () => {
        const id = await runNew(main, uniq('container-for-hostname-test-'), { command: ['sleep', '1000'] });
        assert.equal((await execOk(id, ['hostname'])).trim().toLowerCase(), 'crit-main');
      });

      it('runtime should support DNS config', async () => {
        const id = await runNew(main, uniq('container-for-DNS-config-test-'), { command: ['sleep', '1000'] });
        const resolv = await execOk(id, ['cat', '/etc/resolv.conf']);
        for (const line of ['nameserver 10.10.10.10', 'search google.com', 'options ndots:8']) {
          assert.ok(resolv.includes(line), `resolv.conf lacks "${line}":\n${resolv}`);
        }
      });

      it('gives containers an /etc/hosts with localhost', async () => {
        const id = await runNew(main, uniq('container-hosts-'), { command: ['sleep', '1000'] });
        assert.match(await execOk(id, ['cat', '/etc/hosts']), /127\.0\.0\.1\s+localhost/);
      });

      it('should support safe and unsafe sysctls, and namespaced net.* ones', async () => {
        const id = await runNew(main, uniq('container-shm-rmid-forced'), { command: ['sleep', '1000'] });
        const read = async (path: string): Promise<string> => (await execOk(id, ['cat', path])).trim();
        assert.equal(await read('/proc/sys/kernel/shm_rmid_forced'), '1');
        assert.equal(await read('/proc/sys/fs/mqueue/msg_max'), '100');
        assert.equal(await read('/proc/sys/net/ipv4/ip_unprivileged_port_start'), '42');
      });

      it("gives a pod without a hostname (critest's default pod) a UTS namespace of its own", async () => {
        const id = await runNew(bare, uniq('container-uts-'), { command: TOP });
        const inside = (await execOk(id, ['readlink', '/proc/self/ns/uts'])).trim();
        assert.notEqual(inside, await readlink('/proc/self/ns/uts'));
      });
    });

    describe('namespace options (security_context_linux.go NamespaceOption)', () => {
      let server: Server;
      let port = 0;

      before(async () => {
        server = createServer((sock) => sock.end('hello'));
        await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
        const addr = server.address();
        port = typeof addr === 'object' && addr ? addr.port : 0;
      });

      after(async () => {
        await new Promise<void>((resolve) => server.close(() => resolve()));
      });

      it('runtime should support HostPID, HostIpc and HostNetwork', async () => {
        const { stdout } = await run('ipcmk', ['-M', '1048576'], { timeoutMs: 10_000 });
        const segment = stdout.trim().replace(/^Shared memory id: /, '');
        ipcSegments.push(segment);
        const host = await runNew(hostns, uniq('container-with-HostPID-test-'), {
          command: ['sh', '-c', 'sleep 1000'],
          linux: { security_context: { namespace_options: { network: 'NODE', pid: 'NODE', ipc: 'NODE' } } },
        });
        // HostPID: this very test process is visible by its host pid.
        assert.match(await execOk(host, ['cat', `/proc/${process.pid}/cmdline`]), /node/);
        // HostIpc: critest runs `ipcs -m`, which this busybox lacks; the kernel's table is the same.
        const shm = await execOk(host, ['cat', '/proc/sysvipc/shm']);
        assert.ok(
          shm.split('\n').some((l) => l.trim().split(/\s+/)[1] === segment),
          shm,
        );
        // HostNetwork: the host's listening port is in the container's netstat.
        assert.match(await execOk(host, ['netstat', '-ln']), new RegExp(`:${port}\\b`));

        const pod = await runNew(main, uniq('namespace-container-'), { command: ['sleep', '1000'] });
        const podShm = await execOk(pod, ['cat', '/proc/sysvipc/shm']);
        assert.ok(!podShm.split('\n').some((l) => l.trim().split(/\s+/)[1] === segment));
        assert.doesNotMatch(await execOk(pod, ['netstat', '-ln']), new RegExp(`:${port}\\b`));
        const hidden = await execOk(pod, [
          'sh',
          '-c',
          `cat /proc/${process.pid}/cmdline 2>/dev/null || true`,
        ]);
        assert.doesNotMatch(hidden, /node/);
      });

      it('runtime should support PodPID and ContainerPID', async () => {
        const podPid = await runNew(main, uniq('container-process-namespace-'), {
          command: ['sleep', '1000'],
        });
        assert.doesNotMatch(await execOk(podPid, ['cat', '/proc/1/cmdline']), /sleep/);
        const own = await runNew(main, uniq('container-pid-'), {
          command: ['sleep', '1000'],
          linux: { security_context: { namespace_options: { pid: 'CONTAINER' } } },
        });
        assert.match(await execOk(own, ['cat', '/proc/1/cmdline']), /sleep/);
      });
    });

    describe('resources (container_linux.go OOM, kubelet UpdateContainerResources)', () => {
      it('should terminate with exitCode 137 and reason OOMKilled', async () => {
        const id = await create(priv, uniq('OOM-test-'), {
          command: ['sh', '-c', 'dd if=/dev/zero of=/dev/null bs=20M'],
          linux: {
            resources: {
              memory_limit_in_bytes: String(15 * 1024 * 1024),
              memory_swap_limit_in_bytes: String(15 * 1024 * 1024),
            },
          },
        });
        await statusOf(id, true);
        await start(id);
        const st = await waitState(id, 'CONTAINER_EXITED', 30_000);
        assert.equal(st.reason, 'OOMKilled');
        assert.equal(st.exit_code, 137);
      });

      it('applies UpdateContainerResources to the cgroup and reports them in ContainerStatus', async () => {
        const id = await runNew(bare, uniq('container-update-'), {
          command: PAUSE,
          linux: {
            resources: {
              cpu_period: '100000',
              cpu_quota: '50000',
              cpu_shares: '512',
              memory_limit_in_bytes: String(64 * 1024 * 1024),
            },
          },
        });
        await daemon.cri.call('UpdateContainerResources', {
          container_id: id,
          linux: {
            cpu_period: '100000',
            cpu_quota: '20000',
            cpu_shares: '256',
            memory_limit_in_bytes: String(96 * 1024 * 1024),
          },
        });
        const cg = async (file: string): Promise<string> =>
          (await execOk(id, ['cat', `/sys/fs/cgroup/${file}`])).trim();
        assert.equal(await cg('memory/memory.limit_in_bytes'), String(96 * 1024 * 1024));
        assert.equal(await cg('cpu/cpu.cfs_quota_us'), '20000');
        assert.equal(await cg('cpu/cpu.shares'), '256');
        // In-place resize: kubelet compares the status' resources with what it asked for.
        const res = (await statusOf(id)).resources?.linux;
        assert.equal(res?.cpu_quota, '20000');
        assert.equal(res?.cpu_shares, '256');
        assert.equal(res?.memory_limit_in_bytes, String(96 * 1024 * 1024));
      });
    });

    describe('what kubelet sends', () => {
      /**
       * generateLinuxContainerResources for a BestEffort container; with `hugepages`, also the zero
       * limit kubelet adds for every page size in /sys/kernel/mm/hugepages.
       */
      function kubeletResources(hugepages: boolean): Record<string, unknown> {
        const sizes = hugepages
          ? readdirSyncSafe('/sys/kernel/mm/hugepages').map((d) => hugepageName(d.replace(/^hugepages-/, '')))
          : [];
        return {
          cpu_period: '100000',
          cpu_quota: '0',
          cpu_shares: '2',
          memory_limit_in_bytes: '0',
          oom_score_adj: '1000',
          hugepage_limits: sizes.map((page_size) => ({ page_size, limit: '0' })),
        };
      }

      /** A CreateContainer config shaped like kubelet's generateContainerConfig. */
      function kubeletConfig(name: string, hugepages: boolean): Record<string, unknown> {
        return {
          command: ['sh', '-c', 'echo started; sleep 1000'],
          log_path: `${name}/0.log`,
          labels: {
            'io.kubernetes.container.name': name,
            'io.kubernetes.pod.name': 'crit-main',
            'io.kubernetes.pod.namespace': 'cri-test-namespace',
            'io.kubernetes.pod.uid': 'cri-test-uid-crit-main',
          },
          annotations: { 'io.kubernetes.container.hash': '1', 'io.kubernetes.container.restartCount': '0' },
          // Declared `bytes` in berth's proto (wire-equal to upstream's string).
          envs: [{ key: 'KUBERNETES_SERVICE_HOST', value: Buffer.from('10.96.0.1') }],
          linux: {
            resources: kubeletResources(hugepages),
            security_context: {
              namespace_options: { network: 'POD', pid: 'CONTAINER', ipc: 'POD' },
              seccomp: { profile_type: 'RuntimeDefault' },
              masked_paths: [
                '/proc/asound',
                '/proc/acpi',
                '/proc/kcore',
                '/proc/keys',
                '/proc/latency_stats',
                '/proc/timer_list',
                '/proc/timer_stats',
                '/proc/sched_debug',
                '/proc/scsi',
                '/sys/firmware',
                '/sys/devices/virtual/powercap',
              ],
              readonly_paths: ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
            },
          },
        };
      }

      it('runs a Guaranteed container as kubelet configures it (quota, memory limit, oom_score_adj -997)', async () => {
        const name = uniq('kubelet-guaranteed-');
        await mkdir(join(main.logDir, name), { recursive: true });
        const config = kubeletConfig(name, false);
        const linux = config.linux as Record<string, unknown>;
        linux.resources = {
          ...(linux.resources as Record<string, unknown>),
          cpu_quota: '50000',
          cpu_shares: '512',
          memory_limit_in_bytes: String(64 * 1024 * 1024),
          oom_score_adj: '-997',
        };
        const id = await runNew(main, name, config);
        assert.equal(
          (await execOk(id, ['cat', '/sys/fs/cgroup/memory/memory.limit_in_bytes'])).trim(),
          String(64 * 1024 * 1024),
        );
      });

      it('nests containers under the pod cgroup_parent kubelet sets, and reads stats from there', async () => {
        const parent = `/berth-critest-${daemon.tag}/besteffort/podcg`;
        const pod = await runPod(
          uniq('cgroup-parent-'),
          { hostname: 'crit-cg', linux: { cgroup_parent: parent } },
          false,
        );
        const id = await runNew(pod, uniq('container-in-parent-'), { command: PAUSE });
        const cgroups = await execOk(id, ['cat', '/proc/self/cgroup']);
        assert.match(cgroups, new RegExp(`:memory:${parent}/${id}$`, 'm'));
        const { stats } = await daemon.cri.call<{ stats: WireStats }>('ContainerStats', { container_id: id });
        assert.ok(stats.cpu && stats.memory, 'no cgroup stats under the pod parent');
        await daemon.cri.call('UpdateContainerResources', {
          container_id: id,
          linux: { memory_limit_in_bytes: String(80 * 1024 * 1024) },
        });
        const limit = await readFile(
          join('/sys/fs/cgroup/memory', parent, id, 'memory.limit_in_bytes'),
          'utf8',
        );
        assert.equal(limit.trim(), String(80 * 1024 * 1024));
        await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id });
      });

      it('resizes a container with the resources kubelet sends, zero hugepage limits included', async () => {
        const name = uniq('kubelet-resize-');
        await mkdir(join(main.logDir, name), { recursive: true });
        const id = await runNew(main, name, kubeletConfig(name, false));
        const resources = { ...kubeletResources(true), cpu_quota: '20000', cpu_shares: '204' };
        await daemon.cri.call('UpdateContainerResources', { container_id: id, linux: resources });
        assert.equal((await execOk(id, ['cat', '/sys/fs/cgroup/cpu/cpu.cfs_quota_us'])).trim(), '20000');
      });

      it('runs a BestEffort container as kubelet configures it', async () => {
        const name = uniq('kubelet-');
        await mkdir(join(main.logDir, name), { recursive: true });
        const id = await runNew(main, name, kubeletConfig(name, false));
        assert.equal((await execOk(id, ['sh', '-c', 'echo $KUBERNETES_SERVICE_HOST'])).trim(), '10.96.0.1');
        // pid CONTAINER, kubelet's default: the container's own process is pid 1, not the pod's.
        assert.doesNotMatch(await execOk(id, ['cat', '/proc/1/cmdline']), /catatonit/);
        await waitFor(async () => hasLog(main, `${name}/0.log`, 'started\n'), 10_000);
      });

      it('runs a container with the zero hugepage limits kubelet sends for every page size the node has', async () => {
        const name = uniq('kubelet-hugepages-');
        await mkdir(join(main.logDir, name), { recursive: true });
        await runNew(main, name, kubeletConfig(name, true));
      });
    });
  },
);

function readdirSyncSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** "2048kB" to libcontainer's "2MB", as kubelet names page sizes. */
function hugepageName(kb: string): string {
  let n = Number.parseInt(kb, 10);
  const units = ['KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && n % 1024 === 0 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n}${units[i]}`;
}
