/**
 * Images built to hurt berthd, end to end: a real berthd spoken to over its CRI socket only,
 * pulling from a real docker-registry on 127.0.0.1 filled by test/harness/images.ts. Layers that
 * try to write outside themselves, configs and Envs beyond any real image, non-regular files where
 * /etc/passwd should be, WorkingDirs through symlinks, and a runtime that never answers a create.
 * Each must get a typed answer naming what was wrong, block nothing, and leave nothing behind.
 *
 * Needs root. Traffic goes to 127.0.0.1 only.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import type { ImageRuntimeConfig } from '../../src/model/image.js';
import { killQuietly, processesMentioning } from '../../src/process/index.js';
import { MEDIA_TYPES } from '../../src/registry/manifest.js';
import { removeCgroupTree } from '../harness/cgroups.js';
import { KUBELET_POD_LINUX, TestDaemon } from '../harness/daemon.js';
import { exists } from '../harness/files.js';
import { rejectsWith } from '../harness/grpc.js';
import {
  buildLayer,
  busyboxLayer,
  pushImage,
  type BuiltLayer,
  type LayerEntry,
  type PushedImage,
} from '../harness/images.js';
import {
  containerConfig,
  createContainer,
  execText,
  runPod,
  stopAndRemovePod,
  type Pod,
} from '../harness/pods.js';
import { startRegistryProxy } from '../harness/registry-proxy.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { writeRuncWrapper } from '../harness/runtime-wrapper.js';
import { registrySkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 600_000;
/** A bound for a call that must not hang: far more than any answer takes on a loaded machine. */
const CALL_DEADLINE_MS = 60_000;
const MiB = 1024 * 1024;

async function pull(daemon: TestDaemon, image: string): Promise<string> {
  const res = await daemon.cri.callImage<{ image_ref: string }>(
    'PullImage',
    { image: { image } },
    { deadlineMs: CALL_DEADLINE_MS },
  );
  return res.image_ref;
}

async function imageStatus(daemon: TestDaemon, image: string): Promise<unknown> {
  const res = await daemon.cri.callImage<{ image: unknown }>('ImageStatus', { image: { image } });
  return res.image;
}

function create(daemon: TestDaemon, pod: Pod, config: Record<string, unknown>): Promise<unknown> {
  return daemon.cri.call(
    'CreateContainer',
    { pod_sandbox_id: pod.id, config, sandbox_config: pod.config },
    { deadlineMs: CALL_DEADLINE_MS },
  );
}

async function listContainers(daemon: TestDaemon, pod: Pod): Promise<{ id: string; state: string }[]> {
  const res = await daemon.cri.call<{ containers: { id: string; state: string }[] }>('ListContainers', {
    filter: { pod_sandbox_id: pod.id },
  });
  return res.containers;
}

/** The cgroups below `parent` in every hierarchy (v1 has one per controller): what a pod's containers left. */
async function cgroupsBelow(parent: string): Promise<string[]> {
  const found: string[] = [];
  for (const hierarchy of await readdir('/sys/fs/cgroup')) {
    const dir = join('/sys/fs/cgroup', hierarchy, parent);
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries) if (e.isDirectory()) found.push(join(hierarchy, parent, e.name));
  }
  return found;
}

describe('hostile image content', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let base: BuiltLayer;
  let pod: Pod;

  before(async () => {
    registry = await startRegistry();
    base = await busyboxLayer();
    daemon = await TestDaemon.create({ cni: 'bridge' });
    pod = await runPod(daemon.cri, daemon.pod('hostile-images'));
  });

  after(async () => {
    await daemon?.destroy();
    await registry?.stop();
  });

  describe('layers berth refuses to unpack: FAILED_PRECONDITION naming the entry', () => {
    const long = 'n'.repeat(300);
    const cases: { what: string; entries: LayerEntry[]; entry: string }[] = [
      {
        what: 'a ".." path',
        entries: [{ type: 'file', path: '../escape', content: 'x' }],
        entry: '../escape',
      },
      {
        what: 'a write through an absolute symlink',
        entries: [
          { type: 'symlink', path: 'out', target: '/etc' },
          { type: 'file', path: 'out/evil', content: 'x' },
        ],
        entry: 'out/evil',
      },
      {
        what: 'a write through a relative symlink that climbs out',
        entries: [
          { type: 'symlink', path: 'up', target: '../../../..' },
          { type: 'file', path: 'up/evil', content: 'x' },
        ],
        entry: 'up/evil',
      },
      {
        what: 'a hard link to outside the layer',
        entries: [{ type: 'hardlink', path: 'passwd', target: '../../../../etc/passwd' }],
        entry: 'passwd',
      },
      {
        what: 'a hard link to a file the layer does not have',
        entries: [{ type: 'hardlink', path: 'shadow', target: 'etc/shadow' }],
        entry: 'shadow',
      },
      {
        what: 'the whiteout ".wh..."',
        entries: [
          { type: 'dir', path: 'dir' },
          { type: 'whiteout', path: 'dir/..' },
        ],
        entry: 'dir/.wh...',
      },
      {
        what: 'the whiteout ".wh." of nothing',
        entries: [
          { type: 'dir', path: 'dir' },
          { type: 'file', path: 'dir/.wh.', content: '' },
        ],
        entry: 'dir/.wh.',
      },
      {
        what: 'an over-long whiteout name',
        entries: [
          { type: 'dir', path: 'dir' },
          { type: 'whiteout', path: `dir/${long}` },
        ],
        entry: `dir/.wh.${long}`,
      },
      {
        what: 'an over-long file name',
        entries: [{ type: 'file', path: long, content: 'x' }],
        entry: long,
      },
    ];

    for (const [i, c] of cases.entries()) {
      it(c.what, async () => {
        const layer = await buildLayer(c.entries);
        const image = await pushImage(registry, `hostile/layer-${i}`, '1', { layers: [base, layer] });
        const err = await rejectsWith(pull(daemon, image.reference), status.FAILED_PRECONDITION);
        assert.ok(err.details.includes(layer.digest), `details do not name the layer: ${err.details}`);
        assert.ok(
          err.details.includes(JSON.stringify(c.entry)),
          `details do not name ${JSON.stringify(c.entry)}: ${err.details}`,
        );
        assert.equal(await imageStatus(daemon, image.reference), null, 'the refused image is stored');
      });
    }
  });

  describe('manifests and configs berth will not take', () => {
    it('a config blob over 4 MiB is refused at pull, naming the blob; nothing of it is stored', async () => {
      // 5 MiB of Env: a config kubelet could not even be shown in one verbose ImageStatus.
      const Env = Array.from({ length: 50_000 }, (_, i) => `E${i}=${'x'.repeat(96)}`);
      const image = await pushImage(registry, 'hostile/big-config', '1', {
        layers: [base],
        config: { Cmd: ['sleep', '1000'], Env },
      });
      assert.ok(image.config.length > 4 * MiB);
      const err = await rejectsWith(pull(daemon, image.reference), status.FAILED_PRECONDITION);
      assert.ok(err.details.includes(image.configDigest), `details do not name the config: ${err.details}`);
      assert.equal(await imageStatus(daemon, image.reference), null);
      const blob = join(daemon.rootDir, 'blobs', 'sha256', image.configDigest.slice('sha256:'.length));
      assert.equal(await exists(blob), false, 'the config blob is stored');
    });

    it('a manifest over 4 MiB is refused at pull, naming it', async () => {
      const huge = Buffer.from(
        JSON.stringify({
          schemaVersion: 2,
          mediaType: MEDIA_TYPES.ociManifest,
          config: {
            mediaType: MEDIA_TYPES.ociConfig,
            digest: `sha256:${'0'.repeat(64)}`,
            size: 2,
          },
          layers: [],
          annotations: { padding: 'x'.repeat(5 * MiB) },
        }),
      );
      // docker-registry refuses to store such a manifest: the proxy serves it instead.
      const proxy = await startRegistryProxy(registry.url, {
        serve: {
          pathContaining: '/manifests/huge',
          body: huge,
          contentType: MEDIA_TYPES.ociManifest,
        },
      });
      try {
        const err = await rejectsWith(
          pull(daemon, `${proxy.host}/hostile/manifest:huge`),
          status.FAILED_PRECONDITION,
        );
        assert.match(err.details, /manifest \S*hostile\/manifest:huge is \d+ bytes, more than the 4194304/);
      } finally {
        await proxy.stop();
      }
    });

    it('malformed indexes and manifests are refused at pull, naming the field', async () => {
      const image = await pushImage(registry, 'hostile/descriptors', '1', { layers: [base] });
      const manifest = JSON.parse(image.manifest.toString()) as { layers: Record<string, unknown>[] };
      const [layer] = manifest.layers;
      const withLayer = (changed: Record<string, unknown>): object => ({ ...manifest, layers: [changed] });
      const index = (manifests: unknown): object => ({
        schemaVersion: 2,
        mediaType: MEDIA_TYPES.ociIndex,
        manifests,
      });
      const cases: [string, object, string][] = [
        [
          'no-media-type',
          withLayer({ ...layer, mediaType: undefined }),
          'image manifest: layers[0] has no media type',
        ],
        [
          'bad-digest',
          withLayer({ ...layer, digest: 'sha256:../../../etc/passwd' }),
          'image manifest: layers[0] has no sha256 digest',
        ],
        [
          'negative-size',
          withLayer({ ...layer, size: -1 }),
          'image manifest: layers[0] has no size in bytes',
        ],
        ['index-no-list', index('all of them'), 'image index has no list of manifests'],
        [
          'index-platform',
          index([
            {
              mediaType: image.manifestMediaType,
              digest: image.manifestDigest,
              size: image.manifestSize,
              platform: { os: 7, architecture: 'amd64' },
            },
          ]),
          'image index: manifests[0] has a malformed platform',
        ],
      ];
      for (const [name, document, problem] of cases) {
        const body = Buffer.from(JSON.stringify(document));
        const { mediaType } = document as { mediaType: string };
        // docker-registry checks what it stores: the proxy serves these instead.
        const proxy = await startRegistryProxy(registry.url, {
          serve: { pathContaining: `/manifests/${name}`, body, contentType: mediaType },
        });
        try {
          const err = await rejectsWith(
            pull(daemon, `${proxy.host}/hostile/descriptors:${name}`),
            status.FAILED_PRECONDITION,
          );
          assert.ok(err.details.includes(problem), err.details);
        } finally {
          await proxy.stop();
        }
      }
    });

    it('config fields of the wrong type are refused at pull, naming the field', async () => {
      const cases: [string, Record<string, unknown>, string][] = [
        ['env-string', { Env: 'PATH=/bin' }, 'config.Env is not a list of strings'],
        ['cmd-numbers', { Cmd: [1, 2] }, 'config.Cmd is not a list of strings'],
        ['user-object', { User: { name: 'root' } }, 'config.User is not a string'],
        ['workdir-number', { WorkingDir: 7 }, 'config.WorkingDir is not a string'],
      ];
      for (const [name, fields, problem] of cases) {
        const image = await pushImage(registry, `hostile/config-${name}`, '1', {
          layers: [base],
          config: fields as Partial<ImageRuntimeConfig>,
        });
        const err = await rejectsWith(pull(daemon, image.reference), status.FAILED_PRECONDITION);
        assert.ok(err.details.includes(`image config ${image.configDigest}: ${problem}`), err.details);
        assert.equal(await imageStatus(daemon, image.reference), null);
      }
    });
    it("an image Env beyond 16,384 entries or 1 MiB: CreateContainer refuses it naming the image's Env", async () => {
      const many = await pushImage(registry, 'hostile/many-env', '1', {
        layers: [base],
        config: {
          Cmd: ['sleep', '1000'],
          Env: Array.from({ length: 20_000 }, (_, i) => `E${i}=1`),
        },
      });
      const large = await pushImage(registry, 'hostile/large-env', '1', {
        layers: [base],
        config: {
          Cmd: ['sleep', '1000'],
          Env: ['A', 'B'].map((k) => `${k}=${'y'.repeat(600 * 1024)}`),
        },
      });
      for (const image of [many, large]) {
        await pull(daemon, image.reference);
        const err = await rejectsWith(
          create(daemon, pod, containerConfig('env', image.reference)),
          status.FAILED_PRECONDITION,
        );
        assert.match(err.details, /Env/, err.details);
        assert.ok(err.details.includes(image.reference), `details do not name the image: ${err.details}`);
      }
      assert.deepEqual(await listContainers(daemon, pod), []);
    });
  });

  describe('a WorkingDir through symlinks: resolved inside the rootfs, as runc will see it', () => {
    const escape = `/berth-test-escape-${randomBytes(4).toString('hex')}`;

    after(async () => {
      await rm(escape, { recursive: true, force: true });
    });

    /** Runs the image's default command with `WorkingDir`; returns the process's real cwd. */
    async function cwdOf(name: string, entries: LayerEntry[], workingDir: string): Promise<string> {
      const image = await pushImage(registry, `hostile/workdir-${name}`, '1', {
        layers: [base, await buildLayer(entries)],
        config: { Cmd: ['sleep', '1000'], WorkingDir: workingDir },
      });
      await pull(daemon, image.reference);
      const id = await createContainer(daemon.cri, pod, containerConfig(name, image.reference));
      try {
        await daemon.cri.call('StartContainer', { container_id: id });
        // The container has a pid namespace of its own: its process is pid 1.
        return (await execText(daemon.cri, id, ['readlink', '/proc/1/cwd'])).trim();
      } finally {
        await daemon.cri.call('StopContainer', { container_id: id, timeout: 0 });
        await daemon.cri.call('RemoveContainer', { container_id: id });
      }
    }

    it('a link to a directory that does not exist yet: made inside the rootfs, never on the host', async () => {
      const cwd = await cwdOf(
        'dangling',
        [{ type: 'symlink', path: 'work', target: `${escape}/deep` }],
        '/work',
      );
      assert.equal(cwd, `${escape}/deep`);
      assert.equal(await exists(escape), false, 'made on the host');
    });

    it('a relative link that climbs above the root stops at the root', async () => {
      const cwd = await cwdOf(
        'climbing',
        [{ type: 'symlink', path: 'work', target: `../../../../..${escape}/app` }],
        '/work/sub',
      );
      assert.equal(cwd, `${escape}/app/sub`);
      assert.equal(await exists(escape), false, 'made on the host');
    });

    it('a link loop, or a link to a file: FAILED_PRECONDITION naming the working dir', async () => {
      const cases: [string, LayerEntry[]][] = [
        ['loop', [{ type: 'symlink', path: 'work', target: 'work' }]],
        ['file', [{ type: 'symlink', path: 'work', target: '/etc/passwd' }]],
      ];
      for (const [name, entries] of cases) {
        const image = await pushImage(registry, `hostile/workdir-${name}`, '1', {
          layers: [base, await buildLayer(entries)],
          config: { Cmd: ['sleep', '1000'], WorkingDir: '/work' },
        });
        await pull(daemon, image.reference);
        const err = await rejectsWith(
          create(daemon, pod, containerConfig(name, image.reference)),
          status.FAILED_PRECONDITION,
        );
        assert.match(err.details, /working dir "\/work" \(the image's WorkingDir\)/, err.details);
      }
      // The config's working_dir through the same loop: the config's field is named.
      const loop = `${registry.host}/hostile/workdir-loop:1`;
      const err = await rejectsWith(
        create(daemon, pod, containerConfig('cri-loop', loop, { working_dir: '/work/sub' })),
        status.FAILED_PRECONDITION,
      );
      assert.match(err.details, /working dir "\/work\/sub" \(config\.working_dir\)/, err.details);
      assert.deepEqual(await listContainers(daemon, pod), []);
    });
  });
});

describe('image files that are not regular files', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let images: { what: string; file: string; image: PushedImage }[];

  before(async () => {
    registry = await startRegistry();
    const base = await busyboxLayer();
    const over = async (what: string, file: string, entry: LayerEntry, User: string): Promise<void> => {
      const image = await pushImage(registry, `hostile/${what}`, '1', {
        layers: [base, await buildLayer([entry])],
        config: { Cmd: ['sleep', '1000'], User },
      });
      images.push({ what, file, image });
    };
    images = [];
    await over('fifo-passwd', '/etc/passwd', { type: 'fifo', path: 'etc/passwd' }, 'app');
    await over('fifo-group', '/etc/group', { type: 'fifo', path: 'etc/group' }, '1000');
    // /dev/zero's numbers: a read that never ends.
    await over('zero-group', '/etc/group', { type: 'char', path: 'etc/group', major: 1, minor: 5 }, '0');
    await over(
      'huge-passwd',
      '/etc/passwd',
      { type: 'file', path: 'etc/passwd', content: Buffer.alloc(5 * MiB, 'root:x:0:0::/:/bin/sh\n') },
      'app',
    );
    daemon = await TestDaemon.create({ cni: 'bridge' });
    for (const { image } of images) await pull(daemon, image.reference);
  });

  after(async () => {
    // Not destroy(): its RemovePodSandbox has no deadline, and a pod with a hung create never goes.
    await daemon?.kill9();
    await daemon?.sweep();
    await registry?.stop();
  });

  it('CreateContainer is refused at once naming the file; nothing blocks; the pod goes; SIGTERM stops berthd', async () => {
    const pod = await runPod(daemon.cri, daemon.pod('fifo'));
    // More creates at once than libuv has threads: a read that blocked would hold one each.
    const attempts = images.flatMap(({ what, file, image }) =>
      [0, 1].map(async (n) => {
        const err = await rejectsWith(
          create(daemon, pod, containerConfig(`${what}-${n}`, image.reference)),
          status.FAILED_PRECONDITION,
        );
        assert.ok(err.details.includes(file), `${what}: details do not name ${file}: ${err.details}`);
      }),
    );
    await Promise.all(attempts);
    assert.deepEqual(await listContainers(daemon, pod), []);

    // The thread pool is free: calls that need it answer.
    const bounded = { deadlineMs: CALL_DEADLINE_MS };
    await daemon.cri.callImage('ImageFsInfo', {}, bounded);
    await daemon.cri.call('ListContainerStats', {}, bounded);
    const other = await runPod(daemon.cri, daemon.pod('after-fifo'));
    await stopAndRemovePod(daemon.cri, other.id);
    await daemon.cri.call('StopPodSandbox', { pod_sandbox_id: pod.id }, bounded);
    await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: pod.id }, bounded);

    const proc = daemon.proc;
    assert.ok(proc);
    let timer: NodeJS.Timeout | undefined;
    const hung = new Promise<'hung'>((resolve) => {
      timer = setTimeout(() => resolve('hung'), CALL_DEADLINE_MS);
    });
    const exit = await Promise.race([daemon.signalAndWait('SIGTERM'), hung]);
    clearTimeout(timer);
    if (exit === 'hung') {
      proc.kill('SIGKILL');
      assert.fail(`berthd did not exit within ${CALL_DEADLINE_MS} ms of SIGTERM`);
    }
    assert.deepEqual(exit, { code: 0, signal: null });
  });
});

describe('a create whose runtime never answers', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const tag = randomBytes(4).toString('hex');
  /** The pods' cgroup parent: whatever the test's containers leave in cgroups shows up below it. */
  const parent = `berth-test-stall-${tag}`;
  let dir = '';
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let image: PushedImage;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-stall-'));
    registry = await startRegistry();
    image = await pushImage(registry, 'hostile/stall', '1', {
      layers: [await busyboxLayer()],
      config: { Cmd: ['sleep', '1000'] },
    });
    const config = join(dir, 'berth.toml');
    await writeFile(config, '[runtime]\ntimeout = "20s"\n');
    const runtime = await stallingRuntime(dir);
    daemon = await TestDaemon.create({
      cni: 'bridge',
      extraArgs: ['--config', config, '--runtime', runtime],
    });
    await pull(daemon, image.reference);
  });

  after(async () => {
    await daemon?.destroy();
    // The hook the wrapper added outlives the runc that ran it.
    for (const pid of await processesMentioning(dir)) killQuietly(pid);
    await removeCgroupTree(parent);
    await registry?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('fails in time, leaving no cgroup, process, runc container or record; the pod then goes', async () => {
    const pod = await runPod(
      daemon.cri,
      daemon.pod('stall', {
        linux: { ...KUBELET_POD_LINUX, cgroup_parent: `/${parent}` },
      }),
    );
    const err = await rejectsWith(
      create(daemon, pod, containerConfig('stall', image.reference)),
      status.DEADLINE_EXCEEDED,
    );
    const id = /[0-9a-f]{64}/.exec(err.details)?.[0];
    assert.ok(id, `no container id in ${err.details}`);
    assert.deepEqual(await cgroupsBelow(parent), [], 'cgroups left behind');
    assert.deepEqual(await processesMentioning(id), [], 'processes of the container left behind');
    assert.deepEqual(await daemon.runcContainers(), []);
    assert.deepEqual(await listContainers(daemon, pod), []);
    await stopAndRemovePod(daemon.cri, pod.id);
  });
});

/**
 * runc, except that every container's config gets a createRuntime hook that does not return for
 * 5 minutes, far past berthd's deadline: `runc create` has made the container's cgroups and its
 * init waits in them, but no state is written yet, as when runc is stuck on a huge config. The
 * hook is this script again, with "hang"; the suite kills it when done, else it ends by itself.
 */
function stallingRuntime(dir: string): Promise<string> {
  const path = join(dir, 'runc');
  const hook = JSON.stringify({
    createRuntime: [{ path, args: [path, 'hang'] }],
  }).replaceAll('/', '\\/');
  return writeRuncWrapper(path, [
    'if [ "$1" = hang ]; then i=0; while [ $i -lt 300 ]; do sleep 1; i=$((i + 1)); done; exit 0; fi',
    'prev=',
    'for arg in "$@"; do',
    `  if [ "$prev" = --bundle ]; then sed -i 's/^{/{"hooks":${hook},/' "$arg/config.json"; fi`,
    '  prev=$arg',
    'done',
  ]);
}
