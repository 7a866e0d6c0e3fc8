/**
 * Requests a busy kubelet or a hostile client sends, against a real berthd: huge fields, pod and
 * container operations racing each other. Needs root; traffic stays on loopback and the test
 * pods' own namespaces.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status, type ServiceError } from '@grpc/grpc-js';
import { ANSWER_BOUND_MS } from '../harness/bounds.js';
import { hierarchiesHolding, hostCgroups } from '../harness/cgroups.js';
import { podConfig, TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { busyboxLayer, pushImage, type PushedImage } from '../harness/images.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { createContainer, execSync, runPod, type Pod } from '../harness/pods.js';
import { registrySkip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 600_000;
const HUGE = 'x'.repeat(110_000);
/** Codes a racing call may end with; anything else (UNKNOWN, INTERNAL) is a bug. */
const RACE_CODES = new Set([status.OK, status.NOT_FOUND, status.FAILED_PRECONDITION]);

describe('hardening', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let image: PushedImage;

  before(async () => {
    registry = await startRegistry();
    image = await pushImage(registry, 'berth/hardening', '1', {
      layers: [await busyboxLayer()],
      config: { Cmd: ['/bin/sleep', '1000'], Env: ['PATH=/bin'] },
    });
    daemon = await TestDaemon.create({ cni: 'bridge' });
    await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
  });

  after(async () => {
    await daemon?.destroy();
    await registry?.stop();
  });

  function runNamedPod(name: string): Promise<Pod> {
    return runPod(daemon.cri, daemon.pod(name));
  }

  function createIn(podId: string, config: Record<string, unknown>, name: string): Promise<string> {
    const ctr = { metadata: { name }, image: { image: image.reference } };
    return createContainer(daemon.cri, { id: podId, config }, ctr);
  }

  /** The code a call ended with: OK or its gRPC status. */
  async function outcome(call: Promise<unknown>): Promise<status> {
    try {
      await call;
      return status.OK;
    } catch (err) {
      return (err as ServiceError).code;
    }
  }

  /** Rows, netns pins, IP leases, runc containers, conmons and dirs all agree with the API. */
  async function assertNothingLeaked(): Promise<void> {
    const pods = await daemon.cri.call<{ items: unknown[] }>('ListPodSandbox', {});
    const ctrs = await daemon.cri.call<{ containers: unknown[] }>('ListContainers', {});
    assert.deepEqual(pods.items, []);
    assert.deepEqual(ctrs.containers, []);
    assert.deepEqual(await daemon.netnsFiles(), []);
    assert.deepEqual(await daemon.leasedIps(), []);
    assert.deepEqual(await daemon.runcContainers(), []);
    assert.deepEqual(await daemon.sandboxDirs(), []);
    assert.equal((await daemon.conmonPids()).length, 0);
  }

  describe('huge fields', () => {
    // A status quoting the whole id once stalled the connection: its calls never answered. Each
    // call here has the hang bound as its deadline, so a stall fails as DEADLINE_EXCEEDED.
    it('a 110,000-character id is refused without a stall, and the connection keeps working', async () => {
      const bounded = { deadlineMs: ANSWER_BOUND_MS };
      for (const rpc of ['ContainerStatus', 'StartContainer', 'StopContainer', 'ContainerStats']) {
        const err = await rejectsWith(
          daemon.cri.call(rpc, { container_id: HUGE }, bounded),
          status.INVALID_ARGUMENT,
          'container_id',
        );
        assert.ok(err.details.length < 1000, `${rpc}: a message of ${err.details.length} characters`);
      }
      await rejectsWith(
        daemon.cri.call('PodSandboxStatus', { pod_sandbox_id: HUGE }, bounded),
        status.INVALID_ARGUMENT,
        'pod_sandbox_id',
      );
      await daemon.cri.call('Version', {}, bounded);
    });

    it('huge label selectors and exec commands are INVALID_ARGUMENT naming the field', async () => {
      const selector = (n: number): Record<string, string> =>
        Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']));
      // Far past what berth decodes (the probe sent 500,000), refused before decoding; 65 by the
      // filter's bound.
      const huge = selector(200_000);
      for (const label_selector of [huge, selector(65)]) {
        for (const rpc of ['ListPodSandbox', 'ListContainers', 'ListContainerStats', 'ListPodSandboxStats']) {
          await rejectsWith(
            daemon.cri.call(rpc, { filter: { label_selector } }, { deadlineMs: 60_000 }),
            status.INVALID_ARGUMENT,
            /^filter\.label_selector: /,
          );
        }
      }
      // Refused before the container is looked up, as the probe's 10 MB command was not.
      const cmd = ['sh', 'x'.repeat(10 * 1024 * 1024)];
      await rejectsWith(
        daemon.cri.call('Exec', { container_id: 'c0ffee', cmd, stdout: true }),
        status.INVALID_ARGUMENT,
        /^cmd\[1\]: /,
      );
      await rejectsWith(
        daemon.cri.call('ExecSync', { container_id: 'c0ffee', cmd, timeout: 1 }),
        status.INVALID_ARGUMENT,
        /^cmd\[1\]: /,
      );
      await daemon.cri.call('Version', {});
    });

    it('errors quoting a huge hostname or image reference stay small and arrive', async () => {
      const config = { ...daemon.pod('huge-hostname'), hostname: HUGE };
      const err = await rejectsWith(
        daemon.cri.call('RunPodSandbox', { config }),
        status.INVALID_ARGUMENT,
        'hostname',
      );
      assert.ok(err.details.length < 1000);
      const pull = await daemon.cri.callImage('PullImage', { image: { image: `127.0.0.1:1/${HUGE}` } }).then(
        () => null,
        (e: ServiceError) => e,
      );
      assert.ok(pull, 'a pull of a 110 KB reference failed');
      assert.ok(pull.details.length <= 4200, `a message of ${pull.details.length} characters`);
    });
  });

  describe('pod and container operations at the same moment', () => {
    it('RemovePodSandbox racing CreateContainer and StartContainer: Remove wins cleanly, every time', async () => {
      for (let round = 0; round < 12; round++) {
        const { id, config } = await runNamedPod(`race-${round}`);
        const created = createIn(id, config, 'c').then(async (cid) => {
          await daemon.cri.call('StartContainer', { container_id: cid });
          return cid;
        });
        const [createCode, removeCode] = await Promise.all([
          outcome(created),
          outcome(daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id })),
        ]);
        assert.equal(removeCode, status.OK, `round ${round}: RemovePodSandbox`);
        assert.ok(
          RACE_CODES.has(createCode),
          `round ${round}: CreateContainer+Start ended ${status[createCode]}`,
        );
        // Whatever the create did, the remove that answered OK took it along.
        await assertNothingLeaked();
      }
    });

    it('Start, Stop, ExecSync and a second Remove mixed in: typed answers, nothing left', async () => {
      for (let round = 0; round < 6; round++) {
        const { id, config } = await runNamedPod(`mixed-${round}`);
        const cid = await createIn(id, config, 'c');
        const calls = [
          daemon.cri.call('StartContainer', { container_id: cid }),
          daemon.cri.call('ExecSync', { container_id: cid, cmd: ['true'], timeout: 5 }),
          daemon.cri.call('StopContainer', { container_id: cid, timeout: 0 }),
          daemon.cri.call('StopPodSandbox', { pod_sandbox_id: id }),
          daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id }),
          createIn(id, config, 'late'),
          daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id }),
        ];
        const codes = await Promise.all(calls.map(outcome));
        for (const [i, code] of codes.entries()) {
          assert.ok(RACE_CODES.has(code), `round ${round}, call ${i}: ${status[code]}`);
        }
        assert.equal(codes[4], status.OK);
        assert.equal(codes[6], status.OK);
        await assertNothingLeaked();
      }
    });

    it("StartContainer, RemovePodSandbox and RemoveContainer of the pod's container at once: both removes succeed", async () => {
      for (let round = 0; round < 8; round++) {
        const { id, config } = await runNamedPod(`start-remove-${round}`);
        const cid = await createIn(id, config, 'c');
        const [startCode, removePodCode, removeCode] = await Promise.all([
          outcome(daemon.cri.call('StartContainer', { container_id: cid })),
          outcome(daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id })),
          outcome(daemon.cri.call('RemoveContainer', { container_id: cid })),
        ]);
        // Both removals are idempotent: whichever gets to the container second finds it gone.
        assert.equal(
          removePodCode,
          status.OK,
          `round ${round}: RemovePodSandbox ended ${status[removePodCode]}`,
        );
        assert.equal(removeCode, status.OK, `round ${round}: RemoveContainer ended ${status[removeCode]}`);
        assert.ok(RACE_CODES.has(startCode), `round ${round}: StartContainer ended ${status[startCode]}`);
        await assertNothingLeaked();
        assert.deepEqual(await daemon.podMounts(), [], `round ${round}: mounts left`);
        const cgroups = await hostCgroups();
        const cgroup = cgroups.relativePath(cgroups.cgroupsPath(cgroups.podCgroupFor(id), cid));
        assert.deepEqual(await hierarchiesHolding(cgroup), [], `round ${round}: cgroup ${cgroup} left`);
      }
    });
  });

  describe('ExecSync whose caller goes away', () => {
    let podId: string;
    let cid: string;

    before(async () => {
      const { id, config } = await runNamedPod('exec-cancel');
      podId = id;
      cid = await createIn(id, config, 'c');
      await daemon.cri.call('StartContainer', { container_id: cid });
    });

    after(async () => {
      await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: podId }).catch(() => undefined);
    });

    async function running(marker: string): Promise<boolean> {
      const ps = await execSync(daemon.cri, cid, ['ps', '-o', 'args']);
      return ps.stdout.toString().includes(marker);
    }

    it('a cancelled call (client deadline, no timeout of its own) ends its command', async () => {
      await rejectsWith(
        daemon.cri.call(
          'ExecSync',
          { container_id: cid, cmd: ['sleep', '4324'], timeout: 0 },
          { deadlineMs: 1_000 },
        ),
        status.DEADLINE_EXCEEDED,
      );
      await waitFor(async () => !(await running('sleep 4324')), 10_000);
      await waitFor(async () => (await readdir(join(daemon.stateDir, 'exec'))).length === 0, 10_000);
    });

    it('after a kill -9 of berthd mid-exec, start-up ends the orphaned exec and sweeps its files', async () => {
      const call = daemon.cri.call('ExecSync', { container_id: cid, cmd: ['sleep', '4325'], timeout: 0 });
      call.catch(() => undefined);
      await waitFor(() => running('sleep 4325'), 10_000);
      await daemon.kill9();
      await daemon.start();
      assert.equal(await running('sleep 4325'), false);
      assert.deepEqual(await readdir(join(daemon.stateDir, 'exec')), []);
    });
  });

  describe('RunPodSandbox again for a pod that exists', () => {
    it('a READY pod is returned (kubelet retry); a stopped one is ALREADY_EXISTS until removed', async () => {
      const { id, config } = await runNamedPod('again');
      const again = await daemon.cri.call<{ pod_sandbox_id: string }>('RunPodSandbox', { config });
      assert.equal(again.pod_sandbox_id, id);
      await daemon.cri.call('StopPodSandbox', { pod_sandbox_id: id });
      await rejectsWith(daemon.cri.call('RunPodSandbox', { config }), status.ALREADY_EXISTS, id);
      await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id });
      const fresh = await daemon.cri.call<{ pod_sandbox_id: string }>('RunPodSandbox', { config });
      assert.notEqual(fresh.pod_sandbox_id, id);
      await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: fresh.pod_sandbox_id });
    });
  });

  describe('typed answers where a code fits', () => {
    it('a pull from a registry that refuses connections is UNAVAILABLE', async () => {
      await rejectsWith(
        daemon.cri.callImage('PullImage', { image: { image: '127.0.0.1:1/berth/none:1' } }),
        status.UNAVAILABLE,
      );
    });

    it('UpdateContainerResources: memory 1 and, on cgroup v1, unified are INVALID_ARGUMENT', async () => {
      const { id, config } = await runNamedPod('typed');
      const cid = await createIn(id, config, 'c');
      await daemon.cri.call('StartContainer', { container_id: cid });
      const linux = (over: Record<string, unknown>): Record<string, unknown> => ({
        container_id: cid,
        linux: { ...over },
      });
      await rejectsWith(
        daemon.cri.call('UpdateContainerResources', linux({ memory_limit_in_bytes: '1' })),
        status.INVALID_ARGUMENT,
        'memory_limit_in_bytes',
      );
      const v2 = await readFile('/sys/fs/cgroup/cgroup.controllers', 'utf8').then(
        () => true,
        () => false,
      );
      if (!v2) {
        await rejectsWith(
          daemon.cri.call('UpdateContainerResources', linux({ unified: { 'memory.high': '100000000' } })),
          status.INVALID_ARGUMENT,
          'unified',
        );
      }
      await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id });
    });

    it('a sysctl that is not namespaced is INVALID_ARGUMENT naming it', async () => {
      const config = { ...daemon.pod('sysrq'), linux: { sysctls: { 'kernel.sysrq': '1' } } };
      await rejectsWith(
        daemon.cri.call('RunPodSandbox', { config }),
        status.INVALID_ARGUMENT,
        'kernel.sysrq',
      );
    });
  });

  describe("hostPath mounts and berth's own files", () => {
    it('its database and socket are never mounted; no source is created in its dirs', async () => {
      const { id, config } = await runNamedPod('hostpath');
      const withMount = (hostPath: string): Promise<unknown> =>
        daemon.cri.call('CreateContainer', {
          pod_sandbox_id: id,
          config: {
            metadata: { name: `m-${hostPath.length}` },
            image: { image: image.reference },
            mounts: [{ container_path: '/x', host_path: hostPath }],
          },
          sandbox_config: config,
        });
      await rejectsWith(withMount(join(daemon.rootDir, 'berth.db')), status.FAILED_PRECONDITION, 'berth.db');
      await rejectsWith(withMount(daemon.socket), status.FAILED_PRECONDITION, 'berth.sock');
      const inside = join(daemon.stateDir, 'made-by-a-pod');
      await rejectsWith(withMount(inside), status.FAILED_PRECONDITION, 'would be created');
      await assert.rejects(readdir(inside), { code: 'ENOENT' });
      assert.deepEqual(
        (await daemon.cri.call<{ containers: unknown[] }>('ListContainers', {})).containers,
        [],
      );
      await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id });
    });
  });

  describe('PullImage whose callers go away', () => {
    /** A registry on loopback that answers /v2/ and then never answers a manifest request. */
    async function stalledRegistry(): Promise<{
      port: number;
      open: Set<IncomingMessage>;
      close: () => void;
      answerAll404: () => void;
    }> {
      const open = new Set<IncomingMessage>();
      const waiting: ServerResponse[] = [];
      const server = createHttpServer((req, res) => {
        if (req.url === '/v2/' || req.url === '/v2') {
          res.writeHead(200).end('{}');
          return;
        }
        open.add(req);
        req.socket.once('close', () => open.delete(req));
        waiting.push(res);
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
      return {
        port: (server.address() as AddressInfo).port,
        open,
        close: () => {
          server.closeAllConnections();
          server.close();
        },
        answerAll404: () => {
          for (const res of waiting.splice(0))
            res
              .writeHead(404, { 'Content-Type': 'application/json' })
              .end('{"errors":[{"code":"MANIFEST_UNKNOWN"}]}');
        },
      };
    }

    it('the download stops when its only caller cancels; it goes on while another still waits', async () => {
      const registry = await stalledRegistry();
      try {
        const reference = `127.0.0.1:${registry.port}/berth/stalled:1`;
        await rejectsWith(
          daemon.cri.callImage('PullImage', { image: { image: reference } }, { deadlineMs: 500 }),
          status.DEADLINE_EXCEEDED,
        );
        await waitFor(async () => registry.open.size === 0, 30_000);

        const patient = daemon.cri.callImage('PullImage', { image: { image: reference } }).then(
          () => null,
          (e: ServiceError) => e,
        );
        await waitFor(async () => registry.open.size === 1, 30_000);
        await rejectsWith(
          daemon.cri.callImage('PullImage', { image: { image: reference } }, { deadlineMs: 500 }),
          status.DEADLINE_EXCEEDED,
        );
        await new Promise((r) => setTimeout(r, 500));
        assert.equal(registry.open.size, 1, 'the shared download was stopped for the caller still waiting');
        registry.answerAll404();
        const err = await patient;
        assert.equal(err?.code, status.NOT_FOUND, String(err));
      } finally {
        registry.close();
      }
    });
  });
});

describe('a CNI plugin that never answers', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  let daemon: TestDaemon;
  let dir = '';

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-hang-'));
    const config = join(dir, 'berth.toml');
    await writeFile(config, '[cni]\ntimeout = "1s"\n');
    daemon = await TestDaemon.create({ cni: 'bridge', extraArgs: ['--config', config] });
    const conf = {
      cniVersion: '1.0.0',
      name: `berth-test-hang-${daemon.tag}`,
      plugins: [{ type: 'berth-test-hang' }],
    };
    await writeFile(join(daemon.cniConfDir, '10-test.conflist'), JSON.stringify(conf));
  });

  after(async () => {
    await daemon?.destroy();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('RunPodSandbox is DEADLINE_EXCEEDED, and the half-made pod is undone', async () => {
    const config = podConfig('hang', { log_directory: join(daemon.base, 'logs', 'hang') });
    await rejectsWith(daemon.cri.call('RunPodSandbox', { config }), status.DEADLINE_EXCEEDED, 'cni-add');
    assert.deepEqual((await daemon.cri.call<{ items: unknown[] }>('ListPodSandbox', {})).items, []);
    assert.deepEqual(await daemon.netnsFiles(), []);
    assert.deepEqual(await daemon.runcContainers(), []);
    assert.deepEqual(await daemon.sandboxDirs(), []);
  });
});
