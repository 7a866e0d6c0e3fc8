/**
 * A pod of its own user namespace (hostUsers: false) against an ordinary one, side by side on one
 * real berthd (bridge CNI, runc under conmon, busybox from Debian's docker-registry on loopback):
 * RunPodSandbox, CreateContainer and StartContainer of each, alternating so that both see the same
 * machine, and CreateContainer's steps (the idmapped layer binds are in `rootfs`). The idmapped
 * mounts should cost milliseconds, not a copy of the image. Prints numbers; never fails on time.
 * Usage: node dist/bench/userns.js   Env: BENCH_N (pods of each kind, 15).
 */
import { busyboxLayer, pushImage } from '../test/harness/images.js';
import { TestDaemon } from '../test/harness/daemon.js';
import { parseLog } from '../test/harness/log.js';
import { containerConfig, runPod, type Pod } from '../test/harness/pods.js';
import { startRegistry } from '../test/harness/registry.js';
import { envCount, runBench } from './run.js';
import { figures, figuresByKey, line, timed } from './stats.js';

/** As kubelet sends it: 65536 ids per pod, each pod its own range above the node's users. */
const IDS_PER_POD = 65536;
const FIRST_HOST_ID = 1 << 20;
const TERM_HANDLING = ['/bin/sh', '-c', 'trap "exit 0" TERM; sleep 1000 & wait'];

type Kind = 'ordinary' | 'userns';

function namespaces(kind: Kind, i: number): Record<string, unknown> {
  const base = { network: 'POD', pid: 'CONTAINER', ipc: 'POD' };
  if (kind === 'ordinary') return base;
  const mapping = [{ container_id: 0, host_id: FIRST_HOST_ID + i * IDS_PER_POD, length: IDS_PER_POD }];
  return { ...base, userns_options: { mode: 'POD', uids: mapping, gids: mapping } };
}

async function main(): Promise<void> {
  const n = envCount('BENCH_N', 15);
  const registry = await startRegistry();
  const daemon = await TestDaemon.create({ cni: 'bridge' });
  try {
    const image = await pushImage(registry, 'berth/bench-userns', '1', { layers: [await busyboxLayer()] });
    await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
    const samples: Record<Kind, { run: number[]; create: number[]; start: number[]; total: number[] }> = {
      ordinary: { run: [], create: [], start: [], total: [] },
      userns: { run: [], create: [], start: [], total: [] },
    };
    const pods: Pod[] = [];
    const one = async (kind: Kind, i: number): Promise<void> => {
      const ns = namespaces(kind, i);
      const config = daemon.pod(`${kind}-${i}`, { linux: { security_context: { namespace_options: ns } } });
      const [pod, runMs] = await timed(() => runPod(daemon.cri, config));
      pods.push(pod);
      const container = containerConfig(`app-${kind}`, image.reference, {
        command: TERM_HANDLING,
        linux: { security_context: { namespace_options: ns } },
      });
      const [created, createMs] = await timed(() =>
        daemon.cri.call<{ container_id: string }>('CreateContainer', {
          pod_sandbox_id: pod.id,
          config: container,
          sandbox_config: pod.config,
        }),
      );
      const [, startMs] = await timed(() =>
        daemon.cri.call('StartContainer', { container_id: created.container_id }),
      );
      const s = samples[kind];
      s.run.push(runMs);
      s.create.push(createMs);
      s.start.push(startMs);
      s.total.push(runMs + createMs + startMs);
    };
    // Warm-up of each kind, not counted: lazy start-up work and the page cache.
    await one('ordinary', n);
    await one('userns', n);
    for (const s of Object.values(samples)) for (const list of Object.values(s)) list.length = 0;
    for (let i = 0; i < n; i++) {
      await one('ordinary', i);
      await one('userns', i);
    }

    console.log(`berth user-namespaced pods vs ordinary ones, ${n} of each, alternating, bridge CNI, runc`);
    for (const kind of ['ordinary', 'userns'] as const) {
      const s = samples[kind];
      console.log(`-- ${kind}`);
      console.log(line('RunPodSandbox', figures(s.run)));
      console.log(line('CreateContainer', figures(s.create)));
      console.log(line('StartContainer', figures(s.start)));
      console.log(line('pod to running container', figures(s.total)));
    }
    // berthd logs CreateContainer's step times; the userns pods' are every other one after warm-up.
    const steps = parseLog(daemon.output)
      .filter((e) => e.msg === 'container created')
      .map((e) => ({ name: String(e.name), steps: e.stepsMs as Record<string, number> }));
    for (const kind of ['ordinary', 'userns'] as const) {
      const byStep = figuresByKey(steps.filter((s) => s.name === `app-${kind}`).map((s) => s.steps));
      const text = [...byStep].map(([step, f]) => `${step} ${f.median.toFixed(1)}`).join(', ');
      console.log(`${`create steps, ${kind}`.padEnd(26)} median ms: ${text}`);
    }
    for (const pod of pods) {
      await daemon.cri.call('StopPodSandbox', { pod_sandbox_id: pod.id });
      await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id });
    }
  } finally {
    await daemon.destroy();
    await registry.stop();
  }
}

runBench(main);
