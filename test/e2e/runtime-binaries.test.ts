/**
 * Every OCI runtime binary the node has, each a runtime handler of one berthd: the runc first in
 * PATH as the default, another runc installed beside it (the VM image has forky's runc 1.3 in
 * /opt/runc-1.3 and trixie's 1.1 in /usr/sbin, the default) and crun. Each handler's features in Status are
 * what its own binary answers, and a pod and its container run with that binary, in its root.
 * Handlers whose binary the node lacks are left out, saying so. Needs root.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { realpath, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { probeCgroupHost } from '../../src/cgroups/probe.js';
import { findProgram, run } from '../../src/exec.js';
import type { HostFeatures } from '../../src/host/features.js';
import { Runc } from '../../src/runtime/runc.js';
import type { HandlerFeatures } from '../../src/runtime/runtime.js';
import { BOUND_SCALE } from '../harness/bounds.js';
import { podConfig, SHARED_PID_LINUX, TestDaemon } from '../harness/daemon.js';
import { pushBusyboxSleeper } from '../harness/images.js';
import {
  containerConfig,
  execText,
  runPodSandbox,
  startContainer,
  stopAndRemovePod,
  waitContainerState,
} from '../harness/pods.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { registrySkip } from '../harness/skip.js';

interface Runtime {
  name: string;
  binary: string;
  version: string;
  root: string;
}

/** Where a distribution puts its own runc, besides one installed by hand earlier in PATH. */
const OTHER_RUNC_PATHS = [
  '/opt/runc-1.3/runc',
  '/usr/sbin/runc',
  '/usr/bin/runc',
  '/usr/local/sbin/runc',
  '/usr/local/bin/runc',
];

const base = `/run/berth-test-runtimes-${randomBytes(4).toString('hex')}`;

async function versionOf(binary: string): Promise<string> {
  const { stdout } = await run(binary, ['--version'], { timeoutMs: 10_000 });
  return stdout.split('\n')[0]?.trim() ?? '';
}

/** The default runc, then another runc and crun where the node has them. */
async function nodeRuntimes(): Promise<{ runtimes: Runtime[]; missing: string[] }> {
  const missing: string[] = [];
  const runc = await realpath(await findProgram('runc'));
  const runtimes: Runtime[] = [
    { name: 'runc', binary: runc, version: await versionOf(runc), root: join(base, 'runc') },
  ];
  const others = await Promise.all(OTHER_RUNC_PATHS.map((path) => realpath(path).catch(() => null)));
  const other = others.find((path): path is string => path !== null && path !== runc);
  if (other === undefined) {
    missing.push(`no runc besides ${runc} (looked in ${OTHER_RUNC_PATHS.join(', ')})`);
  } else {
    const version = await versionOf(other);
    // Named by its version, as a DNS label (a handler name is one): "runc version 1.1.15" is
    // handler runc-1-1.
    const minor = /(\d+)\.(\d+)\./.exec(version)?.slice(1, 3).join('-') ?? 'other';
    runtimes.push({ name: `runc-${minor}`, binary: other, version, root: join(base, 'runc-other') });
  }
  const crun = await findProgram('crun').catch(() => null);
  if (crun === null) missing.push('no crun in PATH');
  // crun refuses a hybrid hierarchy ("cgroups in hybrid mode not supported"), as on Debian 12.
  else if ((await probeCgroupHost()).version === 'hybrid') missing.push(`${crun}: cgroups are hybrid here`);
  else
    runtimes.push({ name: 'crun', binary: crun, version: await versionOf(crun), root: join(base, 'crun') });
  return { runtimes, missing };
}

describe(
  'each runtime binary of the node as a handler',
  { skip: registrySkip, timeout: 300_000 * BOUND_SCALE },
  () => {
    let registry: TestRegistry;
    let daemon: TestDaemon;
    let image: string;
    let runtimes: Runtime[] = [];

    before(async () => {
      const found = await nodeRuntimes();
      runtimes = found.runtimes;
      for (const reason of found.missing) console.log(`# runtime left out: ${reason}`);
      for (const { name, binary, version } of runtimes)
        console.log(`# handler ${name}: ${binary} (${version})`);
      registry = await startRegistry();
      image = await pushBusyboxSleeper(registry, 'berth/runtimes');
      const handlers = runtimes
        .slice(1)
        .flatMap(({ name, binary, root }) => ['--runtime-handler', `${name}=${binary}:${root}`]);
      daemon = await TestDaemon.create({
        extraArgs: ['--runtime', runtimes[0]?.binary ?? 'runc', ...handlers],
      });
      await daemon.cri.callImage('PullImage', { image: { image } });
    });

    after(async () => {
      await daemon?.destroy();
      // Whatever a failed test left in a handler's root, deleted by that handler's own binary.
      for (const { binary, root } of runtimes.slice(1)) {
        const runtime = new Runc({ binary, root, systemdCgroup: false, timeoutMs: 10_000 });
        for (const { id } of await runtime.list().catch(() => [])) {
          await runtime.delete(id, { force: true }).catch(() => undefined);
        }
      }
      await rm(base, { recursive: true, force: true });
      await registry?.stop();
    });

    it("reports each handler's features as its own binary answers them", async () => {
      const res = await daemon.cri.call<{ info: Record<string, string> }>('Status', { verbose: true });
      assert.ok(res.info.probedFeatures, 'verbose Status has no features');
      const probed = JSON.parse(res.info.probedFeatures) as {
        host: HostFeatures;
        runtimeHandlers: Record<string, HandlerFeatures>;
      };
      assert.deepEqual(
        Object.keys(probed.runtimeHandlers),
        runtimes.map(({ name }) => name),
      );
      for (const { name, binary } of runtimes) {
        const own = new Runc({ binary, root: join(base, 'asked'), systemdCgroup: false, timeoutMs: 10_000 });
        const rro =
          probed.host.idmappedMounts.mountSetattr && (await own.features()).mountOptions.includes('rro');
        const features = probed.runtimeHandlers[name];
        assert.equal(features?.recursiveReadOnlyMounts, rro, `${name} (${binary}): rro`);
        if (!rro && probed.host.idmappedMounts.mountSetattr) {
          assert.match(features?.off.recursiveReadOnlyMounts ?? '', new RegExp(`^${binary} `));
        }
      }
    });

    it("runs a pod and its container with each handler's binary, in that handler's root", async () => {
      for (const { name, binary, root } of runtimes) {
        const config = podConfig(`runtime-${name}`, { linux: SHARED_PID_LINUX });
        const pod = { id: await runPodSandbox(daemon.cri, config, name), config };
        const id = await startContainer(
          daemon.cri,
          pod,
          containerConfig('sleeper', image, { command: ['/bin/sleep', '1000'] }),
        );
        await waitContainerState(daemon.cri, id, 'CONTAINER_RUNNING');
        const runtime = new Runc({
          binary,
          root: name === 'runc' ? daemon.runcRoot : root,
          systemdCgroup: false,
          timeoutMs: 10_000,
        });
        const listed = (await runtime.list()).map((state) => state.id);
        assert.ok(
          listed.includes(pod.id) && listed.includes(id),
          `${name}: ${binary} lists ${listed.join(',')}`,
        );
        assert.equal((await execText(daemon.cri, id, ['echo', name])).trim(), name);
        await stopAndRemovePod(daemon.cri, pod.id);
        assert.deepEqual(await runtime.list(), [], `${name}: nothing left in ${runtime.opts.root}`);
      }
    });
  },
);
