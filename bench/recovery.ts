/**
 * Start-up recovery and memory of a real berthd (bridge CNI, runc under conmon) with many running
 * pods, a container each, from a busybox image on a loopback docker-registry. Prints numbers; never
 * fails on time. Usage: node dist/bench/recovery.js
 * Env: BENCH_PODS (running pods, 100), BENCH_RESTARTS (restarts measured, 5), BENCH_CONCURRENCY
 * (pods started at once while filling, 4).
 */
import { busyboxLayer, pushImage } from '../test/harness/images.js';
import { TestDaemon } from '../test/harness/daemon.js';
import { parseLog } from '../test/harness/log.js';
import { rssKiB } from '../test/harness/memory.js';
import { containerConfig, runPod, startContainer, stopAndRemovePod, type Pod } from '../test/harness/pods.js';
import { inPool } from '../test/harness/pool.js';
import { startRegistry } from '../test/harness/registry.js';
import { envCount, runBench } from './run.js';
import { figures, timed } from './stats.js';

/** Long enough to outlive the benchmark; it is killed with its pod. */
const WORKLOAD = ['/bin/sleep', '100000'];
/**
 * Settled figures: right after start-up or a burst, V8 still holds the pages it grew into; its
 * memory reducer gives them back once berthd has been quiet for several seconds.
 */
const SETTLE_MS = 15_000;

async function settledRssMiB(daemon: TestDaemon): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  return (await rssKiB(daemon.proc?.pid)) / 1024;
}

async function main(): Promise<void> {
  const podCount = envCount('BENCH_PODS', 100);
  const restarts = envCount('BENCH_RESTARTS', 5);
  const concurrency = envCount('BENCH_CONCURRENCY', 4);
  const registry = await startRegistry();
  const daemon = await TestDaemon.create();
  try {
    const image = await pushImage(registry, 'bench/recovery', '1', { layers: [await busyboxLayer()] });
    const idleMiB = await settledRssMiB(daemon);
    await daemon.cri.callImage('PullImage', { image: { image: image.reference } });

    const [pods, fillMs] = await timed(() =>
      inPool(
        Array.from({ length: podCount }, (_, i) => i),
        concurrency,
        async (i): Promise<Pod> => {
          const pod = await runPod(daemon.cri, daemon.pod(`rec-${i}`));
          await startContainer(
            daemon.cri,
            pod,
            containerConfig('sleeper', image.reference, { command: WORKLOAD }),
          );
          return pod;
        },
      ),
    );
    const withPodsMiB = await settledRssMiB(daemon);

    const startMs: number[] = [];
    for (let i = 0; i < restarts; i++) {
      await daemon.stop();
      startMs.push((await timed(() => daemon.start()))[1]);
    }
    // berthd's own figure: from startDaemon to the end of repair, without loading and serving.
    const repairMs = parseLog(daemon.output).flatMap((entry) =>
      entry.msg === 'state recovered' && typeof entry.ms === 'number' ? [entry.ms] : [],
    );
    const afterRestartMiB = await settledRssMiB(daemon);

    await inPool(pods, concurrency, (pod) => stopAndRemovePod(daemon.cri, pod.id));
    const afterRemovalMiB = await settledRssMiB(daemon);

    const start = figures(startMs);
    console.log(`berth start-up recovery, ${podCount} running pods with a container each`);
    console.log(`${'fill'.padEnd(24)} ${fillMs.toFixed(0)} ms`);
    console.log(
      `${'restart to serving'.padEnd(24)} median ${start.median.toFixed(0)} ms   max ${Math.max(...startMs).toFixed(0)} ms   (${restarts} restarts)`,
    );
    console.log(
      `${'of which repair'.padEnd(24)} median ${figures(repairMs.slice(-restarts)).median.toFixed(0)} ms`,
    );
    console.log(`${'berthd RSS idle'.padEnd(24)} ${idleMiB.toFixed(1)} MiB`);
    console.log(`${'RSS with pods'.padEnd(24)} ${withPodsMiB.toFixed(1)} MiB`);
    console.log(`${'RSS after restart'.padEnd(24)} ${afterRestartMiB.toFixed(1)} MiB`);
    console.log(`${'RSS after removal'.padEnd(24)} ${afterRemovalMiB.toFixed(1)} MiB`);
  } finally {
    await daemon.destroy();
    await registry.stop();
  }
}

runBench(main);
