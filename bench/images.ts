/**
 * The images the side-by-side benchmark runs, the same bytes on every registry they are pushed to
 * (fixed mtimes make equal entries give equal digests): berth's own test registry, and the
 * registry on 127.0.0.1:5055 that containerd pulls from (scripts/bench-containerd.sh).
 */
import { readFileSync } from 'node:fs';
import { busyboxLayer, buildLayer, pushImage, type PushedImage } from '../test/harness/images.js';
import type { TestRegistry } from '../test/harness/registry.js';

/** The static pause process berth's infra runs too, so both runtimes' pods hold the same program. */
const CATATONIT = '/usr/bin/catatonit';

/** Repository and tag of each image, the part of a reference after the registry's host. */
export const BENCH_IMAGES = {
  /** containerd's sandbox_image (bench/containerd/config.toml names it). */
  pause: 'bench/pause:1',
  /** What the benchmark's containers run: busybox, `sleep` by default. */
  app: 'bench/app:1',
  /** A layer no other image shares, so removing the image really removes its layer. */
  pull: 'bench/pull:1',
  /** bench/streaming.ts's: busybox with httpd and yes, and a page in /www for httpd to serve. */
  streaming: 'bench/streaming:1',
} as const;

export type BenchImage = keyof typeof BENCH_IMAGES;

export const BENCH_IMAGE_KINDS: readonly BenchImage[] = ['pause', 'app', 'pull', 'streaming'];

/** What httpd in the streaming image serves. */
export const STREAMING_PAGE = '<html>served from a bench pod</html>\n';

/** `<host>/<repo>:<tag>` of each bench image on the registry at `host`. */
export function benchImageRefs(host: string): Record<BenchImage, string> {
  return {
    pause: `${host}/${BENCH_IMAGES.pause}`,
    app: `${host}/${BENCH_IMAGES.app}`,
    pull: `${host}/${BENCH_IMAGES.pull}`,
    streaming: `${host}/${BENCH_IMAGES.streaming}`,
  };
}

function split(name: string): [repo: string, tag: string] {
  const [repo = '', tag = ''] = name.split(':');
  return [repo, tag];
}

export async function pushBenchImages(registry: TestRegistry): Promise<Record<BenchImage, PushedImage>> {
  const pauseLayer = await buildLayer([
    { type: 'file', path: 'catatonit', content: readFileSync(CATATONIT), mode: 0o755 },
  ]);
  const pullLayer = await busyboxLayer('gzip', {
    entries: [{ type: 'file', path: 'etc/bench-pull', content: 'a layer of its own\n' }],
  });
  const streamingLayer = await busyboxLayer('gzip', {
    applets: ['httpd', 'yes'],
    entries: [
      { type: 'dir', path: 'www' },
      { type: 'file', path: 'www/index.html', content: STREAMING_PAGE },
    ],
  });
  return {
    pause: await pushImage(registry, ...split(BENCH_IMAGES.pause), {
      layers: [pauseLayer],
      config: { Entrypoint: ['/catatonit', '-P'], WorkingDir: '/' },
    }),
    app: await pushImage(registry, ...split(BENCH_IMAGES.app), {
      layers: [await busyboxLayer('gzip')],
      config: { Cmd: ['/bin/sleep', '1000000'], WorkingDir: '/' },
    }),
    pull: await pushImage(registry, ...split(BENCH_IMAGES.pull), {
      layers: [pullLayer],
      config: { Cmd: ['/bin/sleep', '1000000'], WorkingDir: '/' },
    }),
    streaming: await pushImage(registry, ...split(BENCH_IMAGES.streaming), {
      layers: [streamingLayer],
      config: { Cmd: ['/bin/sleep', '1000'], WorkingDir: '/', Env: ['PATH=/bin'] },
    }),
  };
}
