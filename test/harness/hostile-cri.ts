/**
 * The berthd a hostile CRI suite (test/e2e/hostile-cri-*.test.ts) fuzzes, with what its requests
 * need: a loopback registry with a busybox image, a ready target pod with a running container,
 * victims for the rpcs that stop or remove, valid base requests, and the checks that nothing a
 * hostile request created stays behind. berthd runs with name lookups blocked (dns-guard.ts).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before } from 'node:test';
import { status } from '@grpc/grpc-js';
import { ANSWER_BOUND_MS } from './bounds.js';
import { cgroupNames, removeCgroupTree } from './cgroups.js';
import { TestDaemon } from './daemon.js';
import { DNS_BLOCKED_MARKER, DNS_GUARD_ACTIVE, DNS_GUARD_ENV } from './dns-guard.js';
import {
  DeadlineClient,
  Rng,
  hostileSeed,
  hostileStrings,
  summarize,
  type CallOutcome,
  type StringSets,
} from './hostile.js';
import { busyboxLayer, pushImage, type PushedImage } from './images.js';
import { freePort, startRegistry, type TestRegistry } from './registry.js';

/** An error message echoing a whole hostile field is a failure. */
export const MAX_DETAILS_CHARS = 16 * 1024;
const DNS_GUARD = fileURLToPath(new URL('./dns-guard.js', import.meta.url));
/** A canary the 'shell' hostile string would create if anything ran it through a host shell. */
const PWNED = '/tmp/berth-hostile-pwned';
/** Exits at once on SIGTERM, so a stop with any timeout is quick. */
const TERM_EXITS = ['/bin/sh', '-c', 'trap "exit 0" TERM; sleep 1000 & wait'];

export interface WirePod {
  id: string;
  state: string;
  metadata: { name: string; uid: string; namespace: string; attempt: number };
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

export interface WireCtr {
  id: string;
  pod_sandbox_id: string;
  state: string;
  metadata: { name: string; attempt: number };
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

/** A call's answer: in time, with one of `codes`, a bounded message, naming what it should. */
export function assertAnswer(
  rpc: string,
  out: CallOutcome,
  codes: readonly status[],
  opts: { naming?: string } = {},
): void {
  const got = `${status[out.code]}: ${out.details.slice(0, 300)}`;
  assert.ok(!out.noAnswer, `${rpc}: no answer within ${ANSWER_BOUND_MS} ms (${got})`);
  assert.ok(
    codes.includes(out.code),
    `${rpc}: expected ${codes.map((c) => status[c]).join(' or ')}, got ${got}`,
  );
  if (opts.naming) assert.ok(out.details.includes(opts.naming), `${rpc}: ${got} should name ${opts.naming}`);
  assert.ok(out.details.length <= MAX_DETAILS_CHARS, `${rpc}: a message of ${out.details.length} characters`);
}

export const resources = (): Record<string, unknown> => ({
  cpu_period: '100000',
  cpu_quota: '50000',
  cpu_shares: '512',
  memory_limit_in_bytes: '268435456',
  oom_score_adj: '0',
  cpuset_cpus: '',
  cpuset_mems: '',
  memory_swap_limit_in_bytes: '0',
});

export class HostileCri {
  readonly seed = hostileSeed();
  /** Built once from the seed, so every field sees the same random strings. */
  readonly strings: StringSets = hostileStrings(new Rng(this.seed));
  registry!: TestRegistry;
  daemon!: TestDaemon;
  image!: PushedImage;
  /** Setup, checks and cleanup: its own connection, with deadlines, so a stall never hangs the suite. */
  admin!: DeadlineClient;
  /** The fuzz's connection; replaced after a call that got no answer. */
  client!: DeadlineClient;
  /** A loopback port nothing listens on: the registry of hostile image references. */
  closedPort = 0;
  hostDir = '';
  /** The image, a ready pod and a running container: rebuilt when a case took them away. */
  readonly targets = { podId: '', podConfig: {} as Record<string, unknown>, ctrId: '', imageId: '' };
  /** What the stopping and removing rpcs get to stop and remove. */
  readonly victims = { podId: '', ctrId: '' };
  private seq = 0;

  /** For the enclosing describe block: berthd and its registry start before it and go after it. */
  static forSuite(): HostileCri {
    const cri = new HostileCri();
    before(() => cri.start());
    after(() => cri.stop());
    return cri;
  }

  /** A number for unique names. */
  next(): number {
    return ++this.seq;
  }

  private async start(): Promise<void> {
    this.registry = await startRegistry();
    this.image = await pushImage(this.registry, 'berth/hostile', '1', {
      layers: [await busyboxLayer()],
      config: { Cmd: ['/bin/sleep', '1000'], Env: ['PATH=/bin'] },
    });
    this.closedPort = await freePort();
    this.daemon = await TestDaemon.create({
      cni: 'bridge',
      env: { NODE_OPTIONS: `--import=${DNS_GUARD}`, [DNS_GUARD_ENV]: '1' },
    });
    assert.ok(this.daemon.output.includes(DNS_GUARD_ACTIVE), 'berthd runs without the name lookup guard');
    this.hostDir = join(this.daemon.base, 'hostile-mount');
    await mkdir(this.hostDir, { recursive: true });
    this.admin = new DeadlineClient(this.daemon.socket);
    this.client = new DeadlineClient(this.daemon.socket);
    await this.ensureTargets();
  }

  private async stop(): Promise<void> {
    this.client?.close();
    this.admin?.close();
    await this.daemon?.destroy();
    await this.registry?.stop();
    // runc makes a pod's cgroup parent and, as on any node, leaves it to whoever chose the name
    // (kubelet, for a real pod); here the fuzz did. rmdir takes only cgroups no process is in.
    const names = this.strings.full.map(({ value }) => posix.normalize(`/${value}`).split('/')[1]);
    // Invalid UTF-8 sent on the wire arrives as U+FFFD, a character no cgroup of the host's has.
    const mangled = (await cgroupNames()).filter((name) => name.includes('\ufffd'));
    for (const name of [...names, ...mangled]) if (name) await removeCgroupTree(name);
  }

  /** berthd after a crash or a stall: killed, started again, and reached on fresh connections. */
  async restart(): Promise<void> {
    await this.daemon.kill9();
    await this.daemon.start();
    this.admin.reconnect();
    this.client.reconnect();
  }

  // --- Admin calls ---------------------------------------------------------------------------

  /** An admin call that must succeed. */
  async must<T>(rpc: string, req: object, deadlineMs = ANSWER_BOUND_MS): Promise<T> {
    const out = await this.admin.call(rpc, req, deadlineMs);
    if (out.code !== status.OK) {
      throw new Error(`${rpc} failed: ${status[out.code]}: ${out.details.slice(0, 500)}`);
    }
    return out.response as T;
  }

  /** An admin call whose NOT_FOUND means "gone". */
  async maybe<T>(rpc: string, req: object): Promise<T | null> {
    const out = await this.admin.call(rpc, req, ANSWER_BOUND_MS);
    if (out.code === status.NOT_FOUND) return null;
    if (out.code !== status.OK)
      throw new Error(`${rpc} failed: ${status[out.code]}: ${out.details.slice(0, 500)}`);
    return out.response as T;
  }

  async runPod(name: string): Promise<{ id: string; config: Record<string, unknown> }> {
    const config = this.daemon.pod(name);
    const res = await this.must<{ pod_sandbox_id: string }>('RunPodSandbox', { config });
    return { id: res.pod_sandbox_id, config };
  }

  async removePod(id: string): Promise<void> {
    if (id) await this.admin.call('RemovePodSandbox', { pod_sandbox_id: id }, ANSWER_BOUND_MS);
  }

  async newContainer(name: string, start: boolean, command?: string[]): Promise<string> {
    const res = await this.must<{ container_id: string }>('CreateContainer', {
      pod_sandbox_id: this.targets.podId,
      config: {
        metadata: { name, attempt: 0 },
        image: { image: this.image.reference },
        ...(command ? { command } : {}),
        log_path: `${name}.log`,
        labels: { suite: 'hostile' },
      },
      sandbox_config: this.targets.podConfig,
    });
    if (start) await this.must('StartContainer', { container_id: res.container_id });
    return res.container_id;
  }

  async removeContainer(id: string): Promise<void> {
    if (id) await this.admin.call('RemoveContainer', { container_id: id }, ANSWER_BOUND_MS);
  }

  async ensureTargets(): Promise<void> {
    const { targets, image } = this;
    const img = await this.must<{ image: { id: string } | null }>('ImageStatus', {
      image: { image: image.reference },
    });
    if (!img.image) await this.must('PullImage', { image: { image: image.reference } }, 2 * ANSWER_BOUND_MS);
    targets.imageId = (
      await this.must<{ image: { id: string } }>('ImageStatus', { image: { image: image.reference } })
    ).image.id;
    const podStatus = targets.podId
      ? await this.maybe<{ status: { state: string } }>('PodSandboxStatus', { pod_sandbox_id: targets.podId })
      : null;
    if (podStatus?.status.state !== 'SANDBOX_READY') {
      if (podStatus) await this.must('RemovePodSandbox', { pod_sandbox_id: targets.podId });
      const created = await this.runPod(`target-${this.next()}`);
      targets.podId = created.id;
      targets.podConfig = created.config;
      targets.ctrId = '';
    }
    const ctrStatus = targets.ctrId
      ? await this.maybe<{ status: { state: string } }>('ContainerStatus', { container_id: targets.ctrId })
      : null;
    if (ctrStatus?.status.state !== 'CONTAINER_RUNNING') {
      await this.removeContainer(targets.ctrId);
      targets.ctrId = await this.newContainer(`target-${this.next()}`, true);
    }
  }

  async ensureRunningVictim(): Promise<void> {
    const { victims } = this;
    const st = victims.ctrId
      ? await this.maybe<{ status: { state: string } }>('ContainerStatus', { container_id: victims.ctrId })
      : null;
    if (st?.status.state === 'CONTAINER_RUNNING') return;
    await this.removeContainer(victims.ctrId);
    victims.ctrId = await this.newContainer(`victim-${this.next()}`, true, TERM_EXITS);
  }

  /** The victim container goes, whatever state it is in. */
  async dropVictimContainer(): Promise<void> {
    await this.removeContainer(this.victims.ctrId);
    this.victims.ctrId = '';
  }

  // --- Valid requests ------------------------------------------------------------------------

  podBase(): Record<string, unknown> {
    return {
      config: this.daemon.pod(`h${this.next()}`, {
        dns_config: { servers: ['127.0.0.1'], searches: ['berth.test'], options: ['ndots:2'] },
        port_mappings: [{ protocol: 'TCP', container_port: 80, host_port: 0, host_ip: '' }],
        linux: {
          cgroup_parent: '',
          sysctls: { 'kernel.shm_rmid_forced': '1' },
          security_context: { namespace_options: { network: 'POD', pid: 'POD', ipc: 'POD', target_id: '' } },
        },
      }),
      runtime_handler: '',
    };
  }

  containerBase(): Record<string, unknown> {
    const name = `c${this.next()}`;
    return {
      pod_sandbox_id: this.targets.podId,
      config: {
        metadata: { name, attempt: 0 },
        image: { image: this.image.reference },
        command: ['/bin/sleep'],
        args: ['1000'],
        working_dir: '/',
        envs: [{ key: 'HOSTILE', value: Buffer.from('1') }],
        mounts: [
          {
            container_path: '/mnt/hostile',
            host_path: this.hostDir,
            readonly: true,
            propagation: 'PROPAGATION_PRIVATE',
          },
        ],
        devices: [{ container_path: '/dev/hostile-null', host_path: '/dev/null', permissions: 'rwm' }],
        labels: { suite: 'hostile' },
        annotations: { 'berth.test/container': name },
        log_path: `${name}.log`,
        linux: {
          resources: { cpu_shares: '2', memory_limit_in_bytes: '0', oom_score_adj: '0' },
          security_context: {
            capabilities: { add_capabilities: ['NET_ADMIN'], drop_capabilities: ['NET_RAW'] },
            namespace_options: { network: 'POD', pid: 'CONTAINER', ipc: 'POD' },
            seccomp: { profile_type: 'RuntimeDefault' },
          },
        },
      },
      sandbox_config: this.targets.podConfig,
    };
  }

  // --- Specific cases ------------------------------------------------------------------------

  async expectCode(
    rpc: string,
    req: object,
    codes: readonly status[],
    opts: { naming?: string; on?: DeadlineClient } = {},
  ): Promise<CallOutcome> {
    const out = await (opts.on ?? this.client).call(rpc, req, ANSWER_BOUND_MS);
    assertAnswer(rpc, out, codes, opts);
    return out;
  }

  /** A pod the case expects refused; one accepted anyway is removed before the assertion fails. */
  async runPodExpecting(
    config: Record<string, unknown>,
    codes: readonly status[],
    naming: string,
  ): Promise<void> {
    const out = await this.client.call('RunPodSandbox', { config }, ANSWER_BOUND_MS);
    if (out.code === status.OK) {
      await this.must('RemovePodSandbox', {
        pod_sandbox_id: (out.response as { pod_sandbox_id: string }).pod_sandbox_id,
      });
    }
    assertAnswer('RunPodSandbox', out, codes, { naming });
  }

  async createExpecting(
    extra: Record<string, unknown>,
    codes: readonly status[],
    naming: string,
  ): Promise<void> {
    const base = this.containerBase();
    const req = { ...base, config: { ...(base.config as Record<string, unknown>), ...extra } };
    const out = await this.client.call('CreateContainer', req, ANSWER_BOUND_MS);
    if (out.code === status.OK)
      await this.removeContainer((out.response as { container_id: string }).container_id);
    assertAnswer('CreateContainer', out, codes, { naming });
  }

  // --- Nothing left behind -------------------------------------------------------------------

  /**
   * Removes through the API what hostile requests created, checks that the host holds exactly the
   * targets' pod, container, netns, lease, mounts and processes, then nothing once they go too.
   */
  async assertNothingLeft(): Promise<void> {
    const { targets, daemon } = this;
    const leftovers: string[] = [];
    const ctrs = await this.must<{ containers: WireCtr[] }>('ListContainers', {});
    for (const c of ctrs.containers.filter((c) => c.id !== targets.ctrId)) {
      leftovers.push(`container ${summarize(c.metadata.name)} ${c.state}`);
      await this.must('RemoveContainer', { container_id: c.id });
    }
    const pods = await this.must<{ items: WirePod[] }>('ListPodSandbox', {});
    for (const p of pods.items.filter((p) => p.id !== targets.podId)) {
      leftovers.push(`pod ${summarize(p.metadata.name)} ${p.state}`);
      await this.must('RemovePodSandbox', { pod_sandbox_id: p.id });
    }

    // With only the targets left, the host must hold exactly theirs.
    assert.deepEqual(
      (await this.must<{ items: WirePod[] }>('ListPodSandbox', {})).items.map((p) => p.id),
      [targets.podId],
    );
    assert.deepEqual(
      (await this.must<{ containers: WireCtr[] }>('ListContainers', {})).containers.map((c) => c.id),
      [targets.ctrId],
    );
    assert.equal((await daemon.netnsFiles()).length, 1, 'netns files');
    assert.equal((await daemon.leasedIps()).length, 1, 'IP leases');
    // The target pod is as kubelet sends one (no shared pid namespace): it runs no infra.
    assert.deepEqual(await daemon.runcContainers(), [targets.ctrId], 'runc containers');
    assert.deepEqual(await daemon.sandboxDirs(), [targets.podId], 'sandbox dirs');
    assert.equal((await daemon.conmonPids()).length, 1, 'conmon processes');
    const strayMounts = (await daemon.podMounts()).filter(
      (m) => !m.includes(targets.podId) && !m.includes(targets.ctrId),
    );
    assert.deepEqual(strayMounts, [], 'mounts of neither target');

    await this.must('RemovePodSandbox', { pod_sandbox_id: targets.podId });
    targets.podId = '';
    targets.ctrId = '';
    assert.deepEqual((await this.must<{ items: unknown[] }>('ListPodSandbox', {})).items, []);
    assert.deepEqual((await this.must<{ containers: unknown[] }>('ListContainers', {})).containers, []);
    assert.deepEqual(await daemon.netnsFiles(), [], 'netns files');
    assert.deepEqual(await daemon.leasedIps(), [], 'IP leases');
    assert.deepEqual(await daemon.runcContainers(), [], 'runc containers');
    assert.deepEqual(await daemon.sandboxDirs(), [], 'sandbox dirs');
    assert.equal((await daemon.conmonPids()).length, 0, 'conmon processes');
    assert.deepEqual(await daemon.podMounts(), [], 'mounts under the test dir');
    assert.ok(!existsSync(PWNED), `${PWNED} exists: a hostile string ran through a host shell`);
    assert.equal(
      daemon.output.split(DNS_BLOCKED_MARKER).length - 1,
      0,
      'berthd tried to look up a non-loopback host',
    );
    assert.deepEqual(
      leftovers,
      [],
      'left behind by hostile requests, though the API never handed out their ids',
    );
  }
}
