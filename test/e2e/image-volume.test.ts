/**
 * Image volumes (KEP-4639) end to end, as kubelet sends them: an image pulled from the test
 * registry on 127.0.0.1 mounted read-only in a container, whole or at a sub path, with no layer
 * copied; sub paths that are not in the image, or that try to leave it, refused naming the path;
 * RemoveImage refused while a container mounts the image, naming it; nothing mounted left once the
 * container goes. Real berthd, runc and busybox. Needs root.
 */
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { containerDir } from '../../src/imagestore/rootfs.js';
import { parseMountInfo, topMount } from '../../src/mounts/mountinfo.js';
import { PAUSE_BEFORE_STEP_ENV, podConfig, TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { buildLayer, busyboxLayer, pushImage, type PushedImage } from '../harness/images.js';
import { mountPointsBelow } from '../harness/mounts.js';
import {
  containerConfig,
  containerStatus,
  execSync,
  runPod,
  startContainer,
  usernsNamespaceOptions,
  type Pod,
} from '../harness/pods.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { registrySkip as skip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 300_000;

describe('image volumes', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let busybox: PushedImage;
  /** Two layers: data/ in the first, data/sub/ and links in the second, one file replaced. */
  let data: PushedImage;
  /** One layer: the layer's own dir is the volume. */
  let single: PushedImage;
  let pod: Pod;

  before(async () => {
    registry = await startRegistry();
    busybox = await pushImage(registry, 'berth/iv-busybox', '1', { layers: [await busyboxLayer()] });
    const base = await buildLayer(
      [
        { type: 'dir', path: 'data' },
        { type: 'file', path: 'data/a', content: 'a from the base layer\n' },
        { type: 'file', path: 'data/replaced', content: 'old\n' },
      ],
      'gzip',
    );
    const top = await buildLayer(
      [
        { type: 'dir', path: 'data' },
        { type: 'dir', path: 'data/sub' },
        { type: 'file', path: 'data/sub/b', content: 'b from the top layer\n' },
        { type: 'file', path: 'data/replaced', content: 'new\n' },
        // Both lead out of the image on the host; resolved in the image, they stay in it.
        { type: 'symlink', path: 'data/up', target: '../../../../../../data/sub' },
        { type: 'symlink', path: 'data/abs', target: '/data/sub' },
      ],
      'gzip',
    );
    data = await pushImage(registry, 'berth/iv-data', '1', { layers: [base, top] });
    single = await pushImage(registry, 'berth/iv-single', '1', {
      layers: [await buildLayer([{ type: 'file', path: 'only', content: 'single layer\n' }], 'gzip')],
    });
    daemon = await TestDaemon.create({ cni: 'bridge' });
    for (const image of [busybox, data, single]) {
      await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
    }
    pod = await runPod(daemon.cri, daemon.pod('iv'));
  });

  after(async () => {
    await daemon?.destroy();
    await registry?.stop();
  });

  const imageMount = (containerPath: string, image: string, subPath = ''): Record<string, unknown> => ({
    container_path: containerPath,
    readonly: true,
    image: { image },
    image_sub_path: subPath,
  });

  const sleeper = (name: string, mounts: Record<string, unknown>[]): Record<string, unknown> =>
    containerConfig(name, busybox.reference, { command: ['sleep', '3600'], mounts });

  async function sh(id: string, script: string): Promise<string> {
    const res = await execSync(daemon.cri, id, ['sh', '-c', script]);
    return res.stdout.toString() + res.stderr.toString();
  }

  /**
   * An image's setuid binaries and device nodes grant nothing: each of the container's volumes at
   * `paths` is read-only, nosuid and nodev, as its own /proc/self/mountinfo shows.
   */
  async function assertGrantNothing(id: string, paths: readonly string[]): Promise<void> {
    const table = parseMountInfo(await sh(id, 'cat /proc/self/mountinfo'));
    for (const path of paths) {
      const options = (topMount(table, path)?.mountOptions ?? '').split(',');
      for (const flag of ['ro', 'nosuid', 'nodev']) assert.ok(options.includes(flag), `${path}: ${flag}`);
    }
  }

  test('whole, at a sub path, through links that stay in the image, and of one layer, read-only', async () => {
    const id = await startContainer(
      daemon.cri,
      pod,
      sleeper('reader', [
        imageMount('/iv', data.reference),
        imageMount('/sub', data.reference, 'data/sub'),
        imageMount('/up', data.reference, 'data/up'),
        imageMount('/abs', data.reference, 'data/abs'),
        imageMount('/single', single.reference),
        imageMount('/file', data.reference, 'data/a'),
      ]),
    );
    assert.equal(await sh(id, 'cat /iv/data/a /iv/data/replaced'), 'a from the base layer\nnew\n');
    assert.equal(await sh(id, 'cat /sub/b'), 'b from the top layer\n');
    assert.equal(await sh(id, 'cat /up/b /abs/b'), 'b from the top layer\nb from the top layer\n');
    assert.equal(await sh(id, 'cat /single/only'), 'single layer\n');
    assert.equal(await sh(id, 'cat /file'), 'a from the base layer\n');
    for (const path of ['/iv/data/x', '/sub/x', '/single/x']) {
      assert.match(await sh(id, `touch ${path}`), /Read-only file system/, path);
    }
    await assertGrantNothing(id, ['/iv', '/sub', '/single', '/file']);
    // kubelet finds its volumes in the status by the image they name.
    const mounts = (await containerStatus(daemon.cri, id)).mounts as {
      container_path: string;
      image: { image: string } | null;
      image_sub_path: string;
      host_path: string;
      readonly: boolean;
    }[];
    const sub = mounts.find((m) => m.container_path === '/sub');
    assert.equal(sub?.image?.image, data.reference);
    assert.equal(sub?.image_sub_path, 'data/sub');
    assert.equal(sub?.host_path, '');
    assert.equal(sub?.readonly, true);

    // The image cannot go while a container mounts it; the container's own image is busybox.
    await rejectsWith(
      daemon.cri.callImage('RemoveImage', { image: { image: data.reference } }),
      status.FAILED_PRECONDITION,
      id,
    );
    const dir = containerDir(id, daemon.rootDir);
    assert.ok(
      (await mountPointsBelow(dir)).some((p) => p.startsWith(join(dir, 'iv'))),
      'the overlay is mounted',
    );
    await daemon.cri.call('StopContainer', { container_id: id, timeout: 0 });
    await daemon.cri.call('RemoveContainer', { container_id: id });
    // Its files go in the background, right after the record.
    await waitFor(async () => (await mountPointsBelow(dir)).length === 0, 30_000, { what: 'no mount left' });
    await daemon.cri.callImage('RemoveImage', { image: { image: single.reference } });
  });

  test('in a pod of its own user namespace: the layers idmapped, files showing their image owners', async () => {
    const hostId = 65536 * 43;
    // The first test removed it.
    await daemon.cri.callImage('PullImage', { image: { image: single.reference } });
    const namespaceOptions = usernsNamespaceOptions(hostId);
    const usernsPod = await runPod(
      daemon.cri,
      podConfig('iv-userns', { linux: { security_context: { namespace_options: namespaceOptions } } }),
    );
    const id = await startContainer(
      daemon.cri,
      usernsPod,
      containerConfig('reader', busybox.reference, {
        command: ['sleep', '3600'],
        linux: { security_context: { namespace_options: namespaceOptions } },
        mounts: [
          imageMount('/iv', data.reference),
          imageMount('/sub', data.reference, 'data/sub'),
          imageMount('/single', single.reference),
        ],
      }),
    );
    assert.equal(
      await sh(id, 'cat /iv/data/a /sub/b /single/only'),
      'a from the base layer\nb from the top layer\nsingle layer\n',
    );
    // Unmapped, the image's root-owned files would show as the overflow id (65534) inside.
    assert.equal(
      await sh(id, 'stat -c %u:%g /iv/data/a /iv/data/sub/b /sub /single/only'),
      '0:0\n0:0\n0:0\n0:0\n',
    );
    for (const path of ['/iv/data/x', '/sub/x', '/single/x']) {
      assert.match(await sh(id, `touch ${path}`), /Read-only file system/, path);
    }
    await assertGrantNothing(id, ['/iv', '/sub', '/single']);
    const dir = containerDir(id, daemon.rootDir);
    assert.ok(
      (await mountPointsBelow(dir)).some((p) => p.startsWith(join(dir, 'ivm'))),
      'the layers are bound idmapped',
    );
    await daemon.cri.call('StopPodSandbox', { pod_sandbox_id: usernsPod.id });
    await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: usernsPod.id });
    await waitFor(async () => (await mountPointsBelow(dir)).length === 0, 30_000, { what: 'no mount left' });
  });

  test('a sub path not in the image, or leaving it, and a writable one, are refused naming them', async () => {
    const create = (name: string, mount: Record<string, unknown>) =>
      daemon.cri.call('CreateContainer', {
        pod_sandbox_id: pod.id,
        config: sleeper(name, [mount]),
        sandbox_config: pod.config,
      });
    await rejectsWith(
      create('missing', imageMount('/x', data.reference, 'data/nothing')),
      status.NOT_FOUND,
      /sub path "data\/nothing" not found/,
    );
    await rejectsWith(
      create('dotdot', imageMount('/x', data.reference, 'data/../../etc')),
      status.INVALID_ARGUMENT,
      /config\.mounts\[0\]\.image_sub_path/,
    );
    await rejectsWith(
      create('writable', { ...imageMount('/x', data.reference), readonly: false }),
      status.INVALID_ARGUMENT,
      /config\.mounts\[0\]\.readonly/,
    );
    await rejectsWith(
      create('unknown', imageMount('/x', `${registry.host}/berth/not-pulled:1`)),
      status.NOT_FOUND,
      /not-pulled/,
    );
    const listed = await daemon.cri.call<{ containers: { metadata: { name: string } }[] }>(
      'ListContainers',
      {},
    );
    assert.deepEqual(
      listed.containers.map((c) => c.metadata.name),
      [],
    );
    assert.deepEqual(await mountPointsBelow(join(daemon.rootDir, 'containers')), []);
  });

  test('kill -9 with the volumes mounted and the create unfinished: nothing mounted after restart', async () => {
    await daemon.restart({ [PAUSE_BEFORE_STEP_ENV]: 'spec' });
    const pending = daemon.cri
      .call('CreateContainer', {
        pod_sandbox_id: pod.id,
        config: sleeper('paused', [
          imageMount('/iv', data.reference),
          imageMount('/sub', data.reference, 'data/sub'),
        ]),
        sandbox_config: pod.config,
      })
      .catch((err: unknown) => err);
    const pauseFile = await daemon.pausedBefore('spec');
    const containers = join(daemon.rootDir, 'containers');
    assert.ok(
      (await mountPointsBelow(containers)).some((p) => p.includes('/iv/')),
      'the volume is mounted',
    );
    await daemon.kill9();
    assert.ok((await pending) instanceof Error, 'the paused CreateContainer succeeded');
    await rm(pauseFile);
    await daemon.restart();
    assert.deepEqual(await mountPointsBelow(containers), []);
    await daemon.cri.callImage('RemoveImage', { image: { image: data.reference } });
  });
});
