/**
 * Pod sandbox figures against a real berthd, bridge CNI and runc. Prints numbers; never fails on
 * time. Usage: node dist/bench/sandbox.js [N]   (default 20 pods)
 */
import { TestDaemon, podConfig } from '../test/harness/daemon.js';
import { rssKiB } from '../test/harness/memory.js';
import { runBench } from './run.js';
import { figures, line, timed } from './stats.js';

async function main(): Promise<void> {
  const n = Number(process.argv[2] ?? 20);
  const daemon = await TestDaemon.create({ cni: 'bridge+portmap' });
  try {
    const cri = () => daemon.cri;
    const run: number[] = [];
    const stop: number[] = [];
    const remove: number[] = [];
    // One warm-up pod so the first sample does not pay for lazy start-up work.
    const [warm] = await timed(() =>
      cri().call<{ pod_sandbox_id: string }>('RunPodSandbox', { config: podConfig('warm') }),
    );
    await cri().call('RemovePodSandbox', { pod_sandbox_id: warm.pod_sandbox_id });

    for (let i = 0; i < n; i++) {
      const [res, runMs] = await timed(() =>
        cri().call<{ pod_sandbox_id: string }>('RunPodSandbox', { config: podConfig(`seq-${i}`) }),
      );
      const id = res.pod_sandbox_id;
      const [, stopMs] = await timed(() => cri().call('StopPodSandbox', { pod_sandbox_id: id }));
      const [, removeMs] = await timed(() => cri().call('RemovePodSandbox', { pod_sandbox_id: id }));
      run.push(runMs);
      stop.push(stopMs);
      remove.push(removeMs);
    }

    const [ids, concurrentMs] = await timed(() =>
      Promise.all(
        Array.from({ length: n }, (_, i) =>
          cri()
            .call<{ pod_sandbox_id: string }>('RunPodSandbox', { config: podConfig(`par-${i}`) })
            .then((r) => r.pod_sandbox_id),
        ),
      ),
    );
    const rss = (await rssKiB(daemon.proc?.pid)) / 1024;

    await daemon.stop();
    const [, recoveryMs] = await timed(() => daemon.start());

    console.log(`berth pod sandbox benchmark, ${n} pods, bridge+portmap CNI, runc`);
    console.log(line('RunPodSandbox', figures(run)));
    console.log(line('StopPodSandbox', figures(stop)));
    console.log(line('RemovePodSandbox', figures(remove)));
    console.log(`${'concurrent run'.padEnd(18)} ${n} pods in ${concurrentMs.toFixed(0)} ms wall`);
    console.log(`${'restart recovery'.padEnd(18)} ${recoveryMs.toFixed(0)} ms to serving with ${n} pods`);
    console.log(`${'berthd RSS'.padEnd(18)} ${rss.toFixed(1)} MiB with ${n} pods`);
    console.log(
      'reference (containerd 1.6, same kind of machine): run 87 ms, stop 72 ms, remove 19 ms (medians)',
    );

    for (const id of ids) await cri().call('RemovePodSandbox', { pod_sandbox_id: id });
  } finally {
    await daemon.destroy();
  }
}

runBench(main);
