/**
 * Runtime handlers and UpdateRuntimeConfig, end to end: a berthd with a second handler that runs
 * the same runc with a root of its own, spoken to over its socket only. Needs root.
 */
import assert from 'node:assert/strict';
import { runcVersionInPath } from '../harness/cgroups.js';
import { weightConversionOf } from '../../src/runtime/weight-conversion.js';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import { probeCgroupHost } from '../../src/cgroups/probe.js';
import { findProgram, run } from '../../src/exec.js';
import type { HostFeatures } from '../../src/host/features.js';
import { Runc } from '../../src/runtime/runc.js';
import { runBusyboxContainer } from '../harness/bundles.js';
import { removeCgroupTree } from '../harness/cgroups.js';
import { podConfig, SHARED_PID_LINUX, TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { busyboxLayer, pushImage, type PushedImage } from '../harness/images.js';
import {
  containerConfig,
  execText,
  runPodSandbox,
  startContainer,
  waitContainerState,
  type Pod,
} from '../harness/pods.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { registrySkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 300_000;
const HANDLER = 'other';
const ORPHAN_CGROUP = 'berth-test-handler-orphan';

interface WireHandler {
  name: string;
  features: { recursive_read_only_mounts: boolean; user_namespaces: boolean } | null;
}

interface StatusResponse {
  runtime_handlers: WireHandler[];
  info: Record<string, string>;
}

async function runcList(root: string): Promise<string[]> {
  const { stdout } = await run('runc', ['--root', root, 'list', '-q'], { timeoutMs: 10_000 });
  return stdout.split('\n').filter(Boolean);
}

describe('runtime handlers', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  // Outside the daemon's dirs, as an operator would put it; removed after the suite.
  const otherRoot = `/run/berth-test-handler-${randomBytes(4).toString('hex')}`;
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let image: PushedImage;
  let pod: Pod;
  let containerId: string;

  before(async () => {
    registry = await startRegistry();
    image = await pushImage(registry, 'berth/handler', '1', {
      layers: [await busyboxLayer('gzip')],
      config: { Cmd: ['/bin/sleep', '1000'] },
    });
    const runc = await findProgram('runc');
    daemon = await TestDaemon.create({ extraArgs: ['--runtime-handler', `${HANDLER}=${runc}:${otherRoot}`] });
    await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
  });

  after(async () => {
    await daemon?.destroy();
    for (const id of await runcList(otherRoot).catch(() => [] as string[])) {
      await run('runc', ['--root', otherRoot, 'delete', '--force', id], { timeoutMs: 10_000 }).catch(
        () => {},
      );
    }
    await rm(otherRoot, { recursive: true, force: true });
    await removeCgroupTree(ORPHAN_CGROUP);
    await registry?.stop();
  });

  it('Status lists every handler with its features, and the default again as ""', async () => {
    const res = await daemon.cri.call<StatusResponse>('Status', {});
    assert.deepEqual(
      res.runtime_handlers.map((h) => h.name),
      ['', 'runc', HANDLER],
    );
    // Pods of their own user namespace wherever the host can idmap (its probe, in verbose Status)
    // and the handler's runc joined a pinned user namespace (this one's can).
    const verbose = await daemon.cri.call<StatusResponse>('Status', { verbose: true });
    const { overlayLower, tmpfs } = (
      JSON.parse(verbose.info.probedFeatures ?? '{}') as { host: HostFeatures }
    ).host.idmappedMounts;
    for (const handler of res.runtime_handlers) {
      // This kernel (>= 5.12) and Debian's runc both support rro.
      assert.deepEqual(handler.features, {
        recursive_read_only_mounts: true,
        user_namespaces: overlayLower && tmpfs,
      });
    }
  });

  it("verbose Status shows the host features berthd probed, logged once, and each handler's", async () => {
    const res = await daemon.cri.call<StatusResponse>('Status', { verbose: true });
    assert.ok(res.info.probedFeatures, 'verbose Status has no features');
    const shown = JSON.parse(res.info.probedFeatures) as {
      host: HostFeatures;
      runtimeHandlers: Record<
        string,
        {
          recursiveReadOnlyMounts: boolean;
          userNamespaces: boolean;
          joinsUserNamespace: boolean;
          checkpointRestore: boolean;
          off: Partial<Record<'recursiveReadOnlyMounts' | 'userNamespaces' | 'checkpointRestore', string>>;
          cpuWeight: { conversion: string; why: string };
        }
      >;
    };
    const cgroups = await probeCgroupHost();
    assert.equal(shown.host.cgroups.version, cgroups.version);
    assert.deepEqual(shown.host.cgroups.controllers, cgroups.controllers);
    assert.ok(shown.host.cgroups.controllers.includes('memory'));
    // Usable: the module on, securityfs mounted, apparmor_parser there (host/features.ts).
    const appArmor = await readFile('/sys/module/apparmor/parameters/enabled', 'utf8').catch(() => 'N');
    const parser = await findProgram('apparmor_parser').then(
      () => true,
      () => false,
    );
    assert.equal(
      shown.host.appArmor.enabled,
      appArmor.trim() === 'Y' && existsSync('/sys/kernel/security/apparmor') && parser,
    );
    assert.equal(shown.host.seccomp.enabled, true, 'runc applies seccomp filters here');
    assert.ok(shown.host.seccomp.actions.includes('errno'));
    for (const size of shown.host.hugetlb.pageSizes) assert.match(size, /^\d+[KMG]B$/);
    assert.equal(typeof shown.host.idmappedMounts.mountSetattr, 'boolean');
    // Where the host can idmap (this one's kernel can), each handler's runc tried, and could, run a
    // container in a pinned user namespace; kubelet is told so.
    const { overlayLower, tmpfs } = shown.host.idmappedMounts;
    assert.ok(shown.host.criu === null || shown.host.criu.version !== '');
    assert.deepEqual(Object.keys(shown.runtimeHandlers), ['runc', HANDLER]);
    for (const name of ['runc', HANDLER]) {
      const { off, cpuWeight, ...features } = shown.runtimeHandlers[name] ?? { off: {} };
      // Pod cgroups weigh by the formula of the runc version the handler's binary names.
      assert.deepEqual(cpuWeight, weightConversionOf(runcVersionInPath()));
      assert.deepEqual(features, {
        recursiveReadOnlyMounts: true,
        userNamespaces: overlayLower && tmpfs,
        joinsUserNamespace: overlayLower && tmpfs,
        // Both handlers' runc have the command: it comes down to whether criu works here.
        checkpointRestore: shown.host.criu?.usable === true,
      });
      // A reason for each feature off, and none for one on; each logged once.
      const offNames = ['recursiveReadOnlyMounts', 'userNamespaces', 'checkpointRestore'] as const;
      assert.deepEqual(Object.keys(off).sort(), offNames.filter((feature) => !features[feature]).sort());
      for (const reason of Object.values(off)) {
        const lines = daemon.output
          .split('\n')
          .filter((line) => line.includes(`"handler":"${name}"`) && line.includes(JSON.stringify(reason)));
        assert.equal(lines.length, 1, `logged once: ${reason}`);
      }
    }
    assert.equal(daemon.output.split('"msg":"host features"').length - 1, 1, 'logged once');
  });

  it('runs a pod and its container under the second handler, in its own root', async () => {
    // With an infra process, so that both the pod's and the container's runc state are checked.
    const config = podConfig('handler-pod', { linux: SHARED_PID_LINUX });
    pod = { id: await runPodSandbox(daemon.cri, config, HANDLER), config };
    containerId = await startContainer(
      daemon.cri,
      pod,
      containerConfig('sleeper', image.reference, { command: ['/bin/sleep', '1000'] }),
    );
    await waitContainerState(daemon.cri, containerId, 'CONTAINER_RUNNING');
    const inOther = await runcList(otherRoot);
    assert.ok(inOther.includes(pod.id), `infra not in ${otherRoot}: ${inOther.join(',')}`);
    assert.ok(inOther.includes(containerId), `container not in ${otherRoot}: ${inOther.join(',')}`);
    const inDefault = await daemon.runcContainers();
    assert.ok(!inDefault.includes(pod.id) && !inDefault.includes(containerId), 'found in the default root');
    // ExecSync goes through the handler's runc too.
    assert.equal((await execText(daemon.cri, containerId, ['echo', 'hi'])).trim(), 'hi');
    const { status: podStatus } = await daemon.cri.call<{ status: { runtime_handler: string } }>(
      'PodSandboxStatus',
      { pod_sandbox_id: pod.id },
    );
    assert.equal(podStatus.runtime_handler, HANDLER);
  });

  it('refuses an unknown handler, naming it', async () => {
    await rejectsWith(
      runPodSandbox(daemon.cri, podConfig('handler-unknown'), 'kata'),
      status.INVALID_ARGUMENT,
      /runtime_handler: "kata" is not configured/,
    );
  });

  it('finds the pod of the second handler after a restart, and removes it from that root', async () => {
    // A container in the handler's root that berth has no record of: start-up sweeps every root.
    const orphan = `berth-orphan-${randomBytes(4).toString('hex')}`;
    const runc = new Runc({ binary: 'runc', root: otherRoot, systemdCgroup: false, timeoutMs: 10_000 });
    await runBusyboxContainer(runc, orphan, join(daemon.base, 'orphan-bundle'), {
      applets: ['sleep'],
      args: ['sleep', '1000'],
      cgroupsPath: `/${ORPHAN_CGROUP}/${orphan}`,
    });
    assert.ok((await runcList(otherRoot)).includes(orphan));
    await daemon.restart();
    assert.ok(!(await runcList(otherRoot)).includes(orphan), 'the orphan in the handler root survived');
    const { status: st } = await daemon.cri.call<{ status: { state: string } }>('PodSandboxStatus', {
      pod_sandbox_id: pod.id,
    });
    assert.equal(st.state, 'SANDBOX_READY');
    await waitContainerState(daemon.cri, containerId, 'CONTAINER_RUNNING');
    assert.equal((await execText(daemon.cri, containerId, ['echo', 'again'])).trim(), 'again');
    await daemon.cri.call('StopContainer', { container_id: containerId, timeout: 0 });
    await waitContainerState(daemon.cri, containerId, 'CONTAINER_EXITED');
    await daemon.cri.call('StopPodSandbox', { pod_sandbox_id: pod.id });
    await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id });
    assert.deepEqual(await runcList(otherRoot), []);
  });
});

describe('UpdateRuntimeConfig', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let daemon: TestDaemon;

  before(async () => {
    daemon = await TestDaemon.create();
  });

  after(async () => {
    await daemon?.destroy();
  });

  async function podCidrs(): Promise<unknown> {
    const res = await daemon.cri.call<StatusResponse>('Status', { verbose: true });
    const shown = res.info.podCidrs;
    assert.ok(shown, 'verbose Status has no podCidrs');
    return JSON.parse(shown);
  }

  function update(podCidr: string): Promise<unknown> {
    return daemon.cri.call('UpdateRuntimeConfig', {
      runtime_config: { network_config: { pod_cidr: podCidr } },
    });
  }

  it('stores a dual-stack pod CIDR, shows it in Status and logs it', async () => {
    assert.deepEqual(await podCidrs(), []);
    await update('10.244.1.0/24, fd00:10:244:1::/64');
    assert.deepEqual(await podCidrs(), ['10.244.1.0/24', 'fd00:10:244:1::/64']);
    await daemon.waitForOutput('pod CIDR updated');
  });

  it('keeps the last value when kubelet sends an empty one', async () => {
    await update('');
    assert.deepEqual(await podCidrs(), ['10.244.1.0/24', 'fd00:10:244:1::/64']);
  });

  it('refuses a bad CIDR, naming the field, and keeps the last value', async () => {
    for (const bad of ['10.244.1.0', '10.244.1.0/33', 'nonsense/8', '10.0.0.0/8,', 'fd00::/129']) {
      await rejectsWith(update(bad), status.INVALID_ARGUMENT, 'runtime_config.network_config.pod_cidr');
    }
    assert.deepEqual(await podCidrs(), ['10.244.1.0/24', 'fd00:10:244:1::/64']);
  });
});
