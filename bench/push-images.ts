/**
 * Puts the side-by-side benchmark's images into a long-running registry on loopback (default
 * 127.0.0.1:5055, containerd's mirror in scripts/bench-containerd.sh). They are pushed to a
 * registry of the test harness first, by the same code that gives berth its copy, then copied
 * across with skopeo keeping their digests, so both runtimes pull the same bytes.
 * Usage: node dist/bench/push-images.js [host:port]
 */
import { run } from '../src/exec.js';
import { startRegistry } from '../test/harness/registry.js';
import { BENCH_IMAGE_KINDS, benchImageRefs, pushBenchImages } from './images.js';
import { runBench } from './run.js';

const COPY_TIMEOUT_MS = 120_000;

async function main(): Promise<void> {
  const target = process.argv[2] ?? '127.0.0.1:5055';
  if (!/^(127\.0\.0\.1|\[::1\]|localhost):\d+$/.test(target))
    throw new Error(`${target}: only a registry on loopback, as host:port`);
  const source = await startRegistry();
  try {
    await pushBenchImages(source);
    const from = benchImageRefs(source.host);
    const to = benchImageRefs(target);
    for (const image of BENCH_IMAGE_KINDS) {
      await run(
        'skopeo',
        [
          'copy',
          '--quiet',
          '--preserve-digests',
          '--src-tls-verify=false',
          '--dest-tls-verify=false',
          `docker://${from[image]}`,
          `docker://${to[image]}`,
        ],
        { timeoutMs: COPY_TIMEOUT_MS },
      );
      console.log(`pushed ${to[image]}`);
    }
  } finally {
    await source.stop();
  }
}

runBench(main);
