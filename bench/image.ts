/**
 * Image service figures against a real berthd and Debian's docker-registry on loopback. Prints
 * numbers; never fails on time. Usage: node dist/bench/image.js [pulls] [images]
 */
import { randomBytes } from 'node:crypto';
import { busyboxLayer, buildLayer, pushImage, type BuiltLayer } from '../test/harness/images.js';
import { TestDaemon } from '../test/harness/daemon.js';
import { startRegistry } from '../test/harness/registry.js';
import { runBench } from './run.js';
import { figures, line, timed } from './stats.js';

/** kubelet's parallel callers, as the "with 4 clients at once" figures count them. */
const CLIENTS = 4;

async function main(): Promise<void> {
  const pulls = Number(process.argv[2] ?? 10);
  const imageCount = Number(process.argv[3] ?? 100);
  const registry = await startRegistry();
  const daemon = await TestDaemon.create({ cni: 'bridge' });
  try {
    const base = await busyboxLayer('gzip');
    const layerOf = (i: number, size: number): Promise<BuiltLayer> =>
      buildLayer(
        [{ type: 'file', path: `data/${i}.bin`, content: randomBytes(size) }],
        i % 2 ? 'zstd' : 'gzip',
      );

    // The figure: a small one-layer image pulled again after RemoveImage took its layer.
    const busybox = await pushImage(registry, 'bench/busybox', 'latest', { layers: [base] });
    const busyboxReq = { image: { image: busybox.reference } };
    const small: number[] = [];
    for (let i = 0; i < pulls; i++) {
      small.push((await timed(() => daemon.cri.callImage('PullImage', busyboxReq)))[1]);
      await daemon.cri.callImage('RemoveImage', busyboxReq);
    }

    const cold: number[] = [];
    const warm: number[] = [];
    for (let i = 0; i < pulls; i++) {
      // Four layers of their own (plus the shared base): every cold pull downloads and unpacks them.
      const layers = [base, ...(await Promise.all([0, 1, 2, 3].map((j) => layerOf(i * 10 + j, 256 * 1024))))];
      const image = await pushImage(registry, 'bench/multi', `v${i}`, { layers });
      const req = { image: { image: image.reference } };
      const [, coldMs] = await timed(() => daemon.cri.callImage('PullImage', req));
      const [, warmMs] = await timed(() => daemon.cri.callImage('PullImage', req));
      cold.push(coldMs);
      warm.push(warmMs);
    }

    for (let i = 0; i < imageCount; i++) {
      const image = await pushImage(registry, 'bench/many', `t${i}`, {
        layers: [base, await layerOf(1000 + i, 64)],
      });
      await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
    }
    const statusOf = (i: number): Promise<unknown> =>
      daemon.cri.callImage('ImageStatus', {
        image: { image: `${registry.host}/bench/many:t${i % imageCount}` },
      });
    const listAll = (): Promise<unknown> => daemon.cri.callImage('ListImages', {});
    const status: number[] = [];
    const list: number[] = [];
    for (let i = 0; i < 50; i++) {
      status.push((await timed(() => statusOf(i)))[1]);
      list.push((await timed(listAll))[1]);
    }
    const statusParallel: number[] = [];
    const listParallel: number[] = [];
    const clients = Array.from({ length: CLIENTS }, (_, c) => c);
    for (let i = 0; i < 50; i++) {
      for (const [call, samples] of [
        [statusOf, statusParallel],
        [listAll, listParallel],
      ] as const) {
        const times = await Promise.all(clients.map(async (c) => (await timed(() => call(i + c)))[1]));
        samples.push(...times);
      }
    }

    const images = imageCount + pulls;
    console.log(`berth image benchmark: local docker-registry, ${pulls} pulls, ${images} images listed`);
    console.log(line('PullImage busybox cold', figures(small)));
    console.log(line('PullImage 5 layers cold', figures(cold)));
    console.log(line('PullImage 5 layers warm', figures(warm)));
    console.log(line('ImageStatus', figures(status)));
    console.log(line(`ImageStatus ×${CLIENTS} clients`, figures(statusParallel)));
    console.log(line('ListImages', figures(list)));
    console.log(line(`ListImages ×${CLIENTS} clients`, figures(listParallel)));
    console.log(
      'reference (containerd 1.6, same kind of machine): small image pull 25 ms, list 0.5 ms (medians)',
    );
  } finally {
    await daemon.destroy();
    await registry.stop();
  }
}

runBench(main);
