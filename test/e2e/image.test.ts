/**
 * The CRI ImageService end to end: a real berthd, spoken to over its gRPC socket only, pulling
 * from real docker-registry instances on 127.0.0.1 filled by test/harness/images.ts; and the
 * overlay rootfs (src/imagestore/rootfs.ts) over the layers such a pull unpacked.
 *
 * Needs root. Sends traffic to 127.0.0.1 only: besides the test registries, the only registry
 * names the tests use are docker.io and UPPER, and each daemon's registries file points their
 * origins at a closed loopback port, so even a pull that goes wrong cannot leave the machine.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, readlink, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status, type ServiceError } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import { containerDir, prepareRootfs, removeRootfs } from '../../src/imagestore/rootfs.js';
import type { Platform } from '../../src/registry/manifest.js';
import { readMountInfo } from '../../src/mounts/mountinfo.js';
import { hostPlatform } from '../../src/registry/platform.js';
import { TestDaemon } from '../harness/daemon.js';
import { exists, namesIn } from '../harness/files.js';
import { rejectsWith } from '../harness/grpc.js';
import {
  buildLayer,
  busyboxLayer,
  pushImage,
  pushIndex,
  type BuiltLayer,
  type Compression,
  type PushedImage,
} from '../harness/images.js';
import { parseLog } from '../harness/log.js';
import {
  containerConfig,
  runPod,
  startContainer,
  stopAndRemovePod,
  verboseInfoOf,
  waitContainerState,
} from '../harness/pods.js';
import { freePort, startRegistry, type TestRegistry } from '../harness/registry.js';
import { registrySkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 600_000;
const USER = { username: 'berth', password: 'correct horse battery staple' };

// ---------------------------------------------------------------------------------------------
// The wire

/** runtime.v1.Image as the test client decodes it (uint64 as a string, absent messages as null). */
interface WireImage {
  id: string;
  repo_tags: string[];
  repo_digests: string[];
  size: string;
  uid: { value: string } | null;
  username: string;
  spec: { image: string } | null;
  pinned: boolean;
}

interface WireAuth {
  username?: string;
  password?: string;
  auth?: string;
}

/** What berth puts under ImageStatus's verbose `info.info` (src/image/service.ts verboseInfo). */
interface VerboseInfo {
  manifestDigest: string;
  layers: { digest: string; diffId: string; size: number; mediaType: string }[];
  imageSpec: { config?: { User?: string }; rootfs?: { diff_ids?: string[] } };
}

interface ImageFs {
  mountpoint: string;
  usedBytes: number;
  inodesUsed: number;
}

async function pull(daemon: TestDaemon, image: string, auth?: WireAuth): Promise<string> {
  const req = { image: { image }, ...(auth ? { auth } : {}) };
  const res = await daemon.cri.callImage<{ image_ref: string }>('PullImage', req);
  return res.image_ref;
}

async function imageStatus(daemon: TestDaemon, image: string): Promise<WireImage | null> {
  const res = await daemon.cri.callImage<{ image: WireImage | null }>('ImageStatus', { image: { image } });
  return res.image;
}

/** ImageStatus that must find the image. */
async function found(daemon: TestDaemon, image: string): Promise<WireImage> {
  const got = await imageStatus(daemon, image);
  assert.ok(got, `ImageStatus ${image}: image is null`);
  return got;
}

async function verboseInfo(daemon: TestDaemon, image: string): Promise<VerboseInfo> {
  type Response = { image: WireImage | null; info: Record<string, string> };
  const res = await daemon.cri.callImage<Response>('ImageStatus', { image: { image }, verbose: true });
  return verboseInfoOf<VerboseInfo>(res, `ImageStatus ${image}`);
}

async function listImages(daemon: TestDaemon, filter?: string): Promise<WireImage[]> {
  const req = filter === undefined ? {} : { filter: { image: { image: filter } } };
  const res = await daemon.cri.callImage<{ images: WireImage[] }>('ListImages', req);
  return res.images;
}

async function listedIds(daemon: TestDaemon): Promise<string[]> {
  return (await listImages(daemon)).map((image) => image.id);
}

async function removeImage(daemon: TestDaemon, image: string): Promise<void> {
  await daemon.cri.callImage('RemoveImage', { image: { image } });
}

type FsUsage = {
  fs_id: { mountpoint: string } | null;
  used_bytes: { value: string } | null;
  inodes_used: { value: string } | null;
};

async function imageFs(daemon: TestDaemon): Promise<ImageFs> {
  const res = await daemon.cri.callImage<{ image_filesystems: FsUsage[] }>('ImageFsInfo', {});
  assert.equal(res.image_filesystems.length, 1);
  return fsUsage(res.image_filesystems[0]);
}

function fsUsage(usage: FsUsage | undefined): ImageFs {
  assert.ok(usage?.fs_id && usage.used_bytes && usage.inodes_used, 'ImageFsInfo: fields missing');
  return {
    mountpoint: usage.fs_id.mountpoint,
    usedBytes: Number(usage.used_bytes.value),
    inodesUsed: Number(usage.inodes_used.value),
  };
}

async function writableLayers(daemon: TestDaemon): Promise<ImageFs> {
  const res = await daemon.cri.callImage<{ container_filesystems: FsUsage[] }>('ImageFsInfo', {});
  assert.equal(res.container_filesystems.length, 1);
  return fsUsage(res.container_filesystems[0]);
}

function sortById(images: WireImage[]): WireImage[] {
  return [...images].sort((a, b) => a.id.localeCompare(b.id));
}

// ---------------------------------------------------------------------------------------------
// The daemon's store on disk

function hex(digest: string): string {
  return digest.slice(digest.indexOf(':') + 1);
}

function blobPath(daemon: TestDaemon, digest: string): string {
  return join(daemon.rootDir, 'blobs', 'sha256', hex(digest));
}

function layerPath(daemon: TestDaemon, diffId: string): string {
  return join(daemon.rootDir, 'layers', hex(diffId));
}

// ---------------------------------------------------------------------------------------------
// Images and registries

/** A one-file layer; `randomSize` > 0 makes the file that many random (incompressible) bytes. */
function fileLayer(name: string, compression: Compression = 'gzip', randomSize = 0): Promise<BuiltLayer> {
  const content = randomSize > 0 ? randomBytes(randomSize) : `${name}\n`;
  return buildLayer([{ type: 'file', path: `${name}.txt`, content }], compression);
}

/** `127.0.0.1:<port>/<repo>@<digest>`: a digest reference, and the repo digest berth records. */
function repoDigestOf(registry: TestRegistry, repo: string, digest: string): string {
  return `${registry.host}/${repo}@${digest}`;
}

/** Where docker-registry keeps a blob's bytes (storage.filesystem.rootdirectory is <dir>/storage). */
function registryBlobPath(registry: TestRegistry, digest: string): string {
  const h = hex(digest);
  return join(registry.dir, 'storage/docker/registry/v2/blobs/sha256', h.slice(0, 2), h, 'data');
}

/** Writes `sections` as `dir`/registries.toml; returns its path. */
async function registriesFile(dir: string, sections: string[]): Promise<string> {
  const path = join(dir, 'registries.toml');
  await writeFile(path, sections.join('\n'), { mode: 0o600 });
  return path;
}

/** A registries.toml section; without a server, loopback hosts default to plain HTTP. */
function hostSection(host: string, opts: { server?: string; mirrors?: string[] } = {}): string {
  const lines = [`[registry."${host}"]`];
  if (opts.mirrors) lines.push(`mirrors = [${opts.mirrors.map((url) => `{ url = "${url}" }`).join(', ')}]`);
  if (opts.server) lines.push(`server = "${opts.server}"`);
  return lines.join('\n') + '\n';
}

/** `http://127.0.0.1:<port>` with nothing listening: an origin that keeps pulls on this machine. */
async function closedOrigin(): Promise<string> {
  return `http://127.0.0.1:${await freePort()}`;
}

/**
 * TestDaemon.create with its leftovers swept when berthd fails to start: create() leaves its
 * /run/berth-test-<tag> dir, netns bind mount included, behind then.
 */
async function startDaemon(registryConfig: string): Promise<TestDaemon> {
  const existing = new Set(await namesIn('/run'));
  try {
    return await TestDaemon.create({ cni: 'bridge', extraArgs: ['--registry-config', registryConfig] });
  } catch (err) {
    for (const name of await namesIn('/run')) {
      if (!name.startsWith('berth-test-') || existing.has(name)) continue;
      await run('umount', ['-l', join('/run', name, 'netns')], { timeoutMs: 10_000 }).catch(() => undefined);
      await rm(join('/run', name), { recursive: true, force: true });
    }
    throw err;
  }
}

/** The platform an index can offer besides this machine's. */
function otherPlatform(): Platform {
  return hostPlatform().architecture === 'arm64'
    ? { os: 'linux', architecture: 'amd64' }
    : { os: 'linux', architecture: 'arm64', variant: 'v8' };
}

// ---------------------------------------------------------------------------------------------

describe('CRI ImageService against docker-registry', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let configDir = '';
  let registry: TestRegistry;
  let authRegistry: TestRegistry;
  let daemon: TestDaemon;
  /** berth/busybox:1.0: busybox (gzip), files and links (zstd), a whiteout and an opaque dir (gzip). */
  let busybox: PushedImage;

  before(async () => {
    configDir = await mkdtemp(join(tmpdir(), 'berth-image-test-'));
    registry = await startRegistry();
    authRegistry = await startRegistry({ htpasswd: USER });
    const closed = await closedOrigin();
    const toml = await registriesFile(configDir, [
      hostSection(registry.host),
      hostSection(authRegistry.host),
      hostSection('docker.io', { server: closed }),
      hostSection('UPPER', { server: closed }),
    ]);
    daemon = await startDaemon(toml);

    const files = await buildLayer(
      [
        { type: 'dir', path: 'data' },
        { type: 'file', path: 'data/keep', content: 'keep\n' },
        { type: 'file', path: 'data/gone', content: 'gone\n' },
        { type: 'file', path: 'data/original', content: 'linked\n' },
        { type: 'hardlink', path: 'data/hardlink', target: 'data/original' },
        { type: 'symlink', path: 'data/link', target: 'keep' },
        { type: 'symlink', path: 'data/abs-link', target: '/data/original' },
        { type: 'dir', path: 'opq' },
        { type: 'file', path: 'opq/old', content: 'old\n' },
        { type: 'dir', path: 'opq/sub' },
        { type: 'file', path: 'opq/sub/older', content: 'older\n' },
      ],
      'zstd',
    );
    const deletions = await buildLayer([
      { type: 'dir', path: 'data' },
      { type: 'whiteout', path: 'data/gone' },
      { type: 'dir', path: 'opq' },
      { type: 'opaque', path: 'opq' },
      { type: 'file', path: 'opq/new', content: 'new\n' },
    ]);
    busybox = await pushImage(registry, 'berth/busybox', '1.0', {
      layers: [await busyboxLayer(), files, deletions],
      config: { User: 'app', Cmd: ['sh'] },
    });
  });

  after(async () => {
    await daemon?.destroy();
    await registry?.stop();
    await authRegistry?.stop();
    if (configDir) await rm(configDir, { recursive: true, force: true });
  });

  describe('PullImage, ImageStatus and ListImages', () => {
    let numeric: PushedImage;

    before(async () => {
      numeric = await pushImage(registry, 'berth/numeric', '1', {
        layers: [await fileLayer('numeric')],
        config: { User: '1000:1000' },
      });
    });

    it('pulls by tag: image_ref is the config digest', async () => {
      assert.equal(busybox.reference, `${registry.host}/berth/busybox:1.0`);
      assert.equal(await pull(daemon, busybox.reference), busybox.configDigest);
      assert.equal(await pull(daemon, numeric.reference), numeric.configDigest);
    });

    it('ImageStatus finds the image by tag, id, id hex, short id and digest reference', async () => {
      const digestRef = repoDigestOf(registry, 'berth/busybox', busybox.manifestDigest);
      const id = busybox.configDigest;
      const layerBytes = busybox.layers.reduce((sum, layer) => sum + layer.bytes.length, 0);
      for (const name of [busybox.reference, id, hex(id), hex(id).slice(0, 12), digestRef]) {
        const image = await found(daemon, name);
        assert.equal(image.id, id, name);
        assert.deepEqual(image.repo_tags, [`${registry.host}/berth/busybox:1.0`], name);
        assert.deepEqual(image.repo_digests, [digestRef], name);
        assert.equal(typeof image.size, 'string');
        assert.ok(Number(image.size) >= layerBytes, `size ${image.size} < the layers' ${layerBytes} bytes`);
        assert.equal(image.username, 'app');
        assert.equal(image.uid, null);
        assert.equal(image.pinned, false);
      }
    });

    it('a numeric User gives uid and no username', async () => {
      const image = await found(daemon, numeric.reference);
      assert.deepEqual(image.uid, { value: '1000' });
      assert.equal(image.username, '');
    });

    it('verbose ImageStatus has info: manifest, layers and config', async () => {
      const info = await verboseInfo(daemon, busybox.reference);
      assert.equal(info.manifestDigest, busybox.manifestDigest);
      assert.deepEqual(
        info.layers.map((l) => [l.digest, l.diffId, l.size, l.mediaType]),
        busybox.layers.map((l) => [l.digest, l.diffId, l.bytes.length, l.mediaType]),
      );
      assert.equal(info.imageSpec.config?.User, 'app');
      const plain = await daemon.cri.callImage<{ info: Record<string, string> }>('ImageStatus', {
        image: { image: busybox.reference },
      });
      assert.deepEqual(plain.info, {}, 'no info unless verbose');
    });

    it('an unknown image is a null image, not an error', async () => {
      for (const name of [
        `${registry.host}/berth/busybox:2.0`,
        `${registry.host}/berth/nothing:1`,
        `sha256:${'0'.repeat(64)}`,
        'ffffffffffff',
      ]) {
        const res = await daemon.cri.callImage<{ image: WireImage | null; info: Record<string, string> }>(
          'ImageStatus',
          { image: { image: name }, verbose: true },
        );
        assert.equal(res.image, null, name);
        assert.deepEqual(res.info, {}, name);
      }
    });

    it('ListImages lists them; a filter returns only the match', async () => {
      const all = await listImages(daemon);
      for (const id of [busybox.configDigest, numeric.configDigest]) {
        assert.ok(
          all.some((image) => image.id === id),
          `${id} not listed`,
        );
      }
      const one = await listImages(daemon, busybox.reference);
      assert.deepEqual(
        one.map((image) => image.id),
        [busybox.configDigest],
      );
      assert.deepEqual(one[0], await found(daemon, busybox.reference));
      const byId = await listImages(daemon, numeric.configDigest);
      assert.deepEqual(
        byId.map((image) => image.id),
        [numeric.configDigest],
      );
      assert.deepEqual(await listImages(daemon, `${registry.host}/berth/nothing:1`), []);
    });

    it('pulls by digest and records the repo digest', async () => {
      const image = await pushImage(registry, 'berth/bydigest', 'v1', {
        layers: [await fileLayer('bydigest')],
      });
      const digestRef = repoDigestOf(registry, 'berth/bydigest', image.manifestDigest);
      assert.equal(image.reference, `${registry.host}/berth/bydigest:v1`);
      assert.equal(await pull(daemon, digestRef), image.configDigest);
      const status = await found(daemon, digestRef);
      assert.equal(status.id, image.configDigest);
      assert.deepEqual(status.repo_tags, [], 'a pull by digest adds no tag');
      assert.deepEqual(status.repo_digests, [digestRef]);
      assert.equal(await imageStatus(daemon, image.reference), null, 'the tag was never pulled');
    });

    it('pulls by tag and digest: the digest is pulled, the tag names it', async () => {
      const image = await pushImage(registry, 'berth/tagdigest', 'v1', {
        layers: [await fileLayer('tagdigest')],
      });
      const other = await pushImage(registry, 'berth/tagdigest', 'v2', {
        layers: [await fileLayer('td-v2')],
      });
      // v1's name with v2's digest: the digest decides what comes down.
      const ref = `${registry.host}/berth/tagdigest:v1@${other.manifestDigest}`;
      assert.equal(await pull(daemon, ref), other.configDigest);
      const status = await found(daemon, `${registry.host}/berth/tagdigest:v1`);
      assert.equal(status.id, other.configDigest);
      assert.deepEqual(status.repo_tags, [`${registry.host}/berth/tagdigest:v1`]);
      assert.deepEqual(status.repo_digests, [
        repoDigestOf(registry, 'berth/tagdigest', other.manifestDigest),
      ]);
      assert.equal(await imageStatus(daemon, image.configDigest), null);
    });
  });

  describe('image formats', () => {
    it('an uncompressed layer', async () => {
      const layer = await buildLayer(
        [
          { type: 'dir', path: 'plain' },
          { type: 'file', path: 'plain/file', content: 'uncompressed\n', mode: 0o640 },
        ],
        'none',
      );
      const image = await pushImage(registry, 'berth/plain', '1', { layers: [layer] });
      assert.equal(await pull(daemon, image.reference), image.configDigest);
      const info = await verboseInfo(daemon, image.reference);
      assert.equal(info.layers[0]?.mediaType, 'application/vnd.oci.image.layer.v1.tar');
      const file = join(layerPath(daemon, layer.diffId), 'fs', 'plain', 'file');
      assert.equal(await readFile(file, 'utf8'), 'uncompressed\n');
      assert.equal((await stat(file)).mode & 0o777, 0o640);
    });

    it('a Docker schema 2 image (gzip and uncompressed layers)', async () => {
      const image = await pushImage(registry, 'berth/docker', '1', {
        layers: [await busyboxLayer(), await fileLayer('docker-plain', 'none')],
        config: { User: 'app' },
        format: 'docker',
      });
      assert.equal(image.manifestMediaType, 'application/vnd.docker.distribution.manifest.v2+json');
      assert.equal(await pull(daemon, image.reference), image.configDigest);
      const status = await found(daemon, image.reference);
      assert.deepEqual(status.repo_digests, [repoDigestOf(registry, 'berth/docker', image.manifestDigest)]);
      assert.equal(status.username, 'app');
      const plain = image.layers[1] as BuiltLayer;
      assert.equal(
        await readFile(join(layerPath(daemon, plain.diffId), 'fs', 'docker-plain.txt'), 'utf8'),
        'docker-plain\n',
      );
    });

    for (const format of ['oci', 'docker'] as const) {
      it(`${format === 'oci' ? 'an OCI index' : 'a Docker manifest list'} of two platforms: the host's image`, async () => {
        const repo = `berth/multi-${format}`;
        const mine = await pushImage(registry, repo, null, {
          layers: [await fileLayer(`${format}-host`)],
          platform: hostPlatform(),
          format,
        });
        const theirs = await pushImage(registry, repo, null, {
          layers: [await fileLayer(`${format}-other`)],
          platform: otherPlatform(),
          format,
        });
        // The other platform first: picking the first entry would be wrong.
        const index = await pushIndex(registry, repo, 'v1', [theirs, mine], format);
        assert.equal(await pull(daemon, index.reference), mine.configDigest);
        const status = await found(daemon, index.reference);
        assert.equal(status.id, mine.configDigest);
        assert.deepEqual(status.repo_digests, [repoDigestOf(registry, repo, index.digest)]);
        assert.equal(await exists(blobPath(daemon, theirs.configDigest)), false, 'other platform downloaded');
        const theirLayer = theirs.layers[0] as BuiltLayer;
        assert.equal(await exists(blobPath(daemon, theirLayer.digest)), false, 'other platform downloaded');
        // And by the index's digest.
        const byDigest = repoDigestOf(registry, repo, index.digest);
        assert.equal(await pull(daemon, byDigest), mine.configDigest);
        assert.equal((await found(daemon, byDigest)).id, mine.configDigest);
      });
    }
  });

  describe('registry authentication', () => {
    let image: PushedImage;

    before(async () => {
      image = await pushImage(authRegistry, 'private/app', 'v1', {
        layers: [await fileLayer('private-a'), await fileLayer('private-b', 'zstd')],
      });
    });

    it('without credentials: UNAUTHENTICATED, saying so', async () => {
      const err = await rejectsWith(pull(daemon, image.reference), status.UNAUTHENTICATED);
      assert.match(err.details, /requires credentials|credentials/);
      assert.ok(err.details.includes(authRegistry.host), err.details);
      assert.equal(await imageStatus(daemon, image.reference), null);
    });

    it('with username and password: pulled', async () => {
      assert.equal(await pull(daemon, image.reference, USER), image.configDigest);
      assert.equal((await found(daemon, image.reference)).id, image.configDigest);
    });

    it('with a wrong password, or none once the registry is known: UNAUTHENTICATED', async () => {
      const err = await rejectsWith(
        pull(daemon, image.reference, { username: USER.username, password: 'wrong' }),
        status.UNAUTHENTICATED,
      );
      assert.match(err.details, /401|credentials/);
      await rejectsWith(pull(daemon, image.reference), status.UNAUTHENTICATED);
    });

    it('with auth = base64("user:pass"): pulled, blobs and all', async () => {
      await removeImage(daemon, image.reference);
      assert.equal(await imageStatus(daemon, image.reference), null);
      for (const layer of image.layers) assert.equal(await exists(blobPath(daemon, layer.digest)), false);
      const auth = Buffer.from(`${USER.username}:${USER.password}`).toString('base64');
      assert.equal(await pull(daemon, image.reference, { auth }), image.configDigest);
      for (const layer of image.layers) assert.equal(await exists(blobPath(daemon, layer.digest)), true);
    });
  });

  describe('failures', () => {
    it('a corrupted layer blob fails the pull naming the digest, and nothing of it is stored', async () => {
      const good = await fileLayer('corrupt-good');
      const bad = await fileLayer('corrupt-bad', 'gzip', 64 * 1024);
      const image = await pushImage(registry, 'berth/corrupt', '1', { layers: [good, bad] });
      const data = registryBlobPath(registry, bad.digest);
      const original = await readFile(data);
      assert.deepEqual(original, bad.bytes);
      // Same length, different bytes: only the digest can tell.
      const corrupted = Buffer.from(original);
      for (let i = 100; i < 200; i++) corrupted[i] = 0xff - (original[i] ?? 0);
      await writeFile(data, corrupted);

      const err = await rejectsWith(pull(daemon, image.reference), status.UNKNOWN);
      assert.ok(err.details.includes(bad.digest), `error does not name ${bad.digest}: ${err.details}`);
      assert.equal(await imageStatus(daemon, image.reference), null);
      assert.ok(!(await listedIds(daemon)).includes(image.configDigest), 'the image is listed');
      assert.equal(await exists(blobPath(daemon, bad.digest)), false, 'the corrupted blob is stored');
      assert.equal(await exists(layerPath(daemon, bad.diffId)), false, 'the corrupted layer is unpacked');
      assert.deepEqual(await namesIn(join(daemon.rootDir, 'ingest')), [], 'partial downloads left');
      const temps = (await namesIn(join(daemon.rootDir, 'layers'))).filter((n) => n.includes('.tmp-'));
      assert.deepEqual(temps, [], 'temporary layer dirs left');

      // Repaired, the same pull works.
      await writeFile(data, original);
      assert.equal(await pull(daemon, image.reference), image.configDigest);
      assert.equal(await exists(blobPath(daemon, bad.digest)), true);
    });

    it('an unknown tag is NOT_FOUND', async () => {
      const err = await rejectsWith(pull(daemon, `${registry.host}/berth/busybox:9.9`), status.NOT_FOUND);
      assert.ok(err.details.includes(`${registry.host}/berth/busybox:9.9`), err.details);
    });
  });

  describe('RemoveImage', () => {
    it('an image with two tags goes with its last tag; shared layers stay', async () => {
      const base = await busyboxLayer();
      const own = await fileLayer('two-tags');
      const keeperOwn = await fileLayer('keeper');
      const keeper = await pushImage(registry, 'berth/keeper', '1', { layers: [base, keeperOwn] });
      const image = await pushImage(registry, 'berth/twotags', 'a', { layers: [base, own] });
      await registry.pushManifest('berth/twotags', 'b', image.manifest, image.manifestMediaType);
      const [tagA, tagB] = ['a', 'b'].map((t) => `${registry.host}/berth/twotags:${t}`) as [string, string];

      assert.equal(await pull(daemon, keeper.reference), keeper.configDigest);
      assert.equal(await pull(daemon, tagA), image.configDigest);
      assert.equal(await pull(daemon, tagB), image.configDigest);
      const both = await found(daemon, image.configDigest);
      assert.deepEqual(both.repo_tags, [tagA, tagB]);
      assert.deepEqual(both.repo_digests, [repoDigestOf(registry, 'berth/twotags', image.manifestDigest)]);

      await removeImage(daemon, tagA);
      const left = await found(daemon, image.configDigest);
      assert.deepEqual(left.repo_tags, [tagB]);
      assert.equal(await imageStatus(daemon, tagA), null);
      assert.equal((await found(daemon, tagB)).id, image.configDigest);

      await removeImage(daemon, tagB);
      assert.equal(await imageStatus(daemon, image.configDigest), null);
      assert.equal(await imageStatus(daemon, tagB), null);
      assert.ok(!(await listedIds(daemon)).includes(image.configDigest));
      for (const digest of [own.digest, image.configDigest, image.manifestDigest]) {
        assert.equal(await exists(blobPath(daemon, digest)), false, `blob ${digest} left`);
      }
      assert.equal(await exists(layerPath(daemon, own.diffId)), false, 'its own layer left');
      // The base is keeper's (and busybox's) too.
      assert.equal(await exists(join(layerPath(daemon, base.diffId), 'fs', 'bin', 'busybox')), true);
      assert.equal(await exists(blobPath(daemon, base.digest)), true);
      assert.equal((await found(daemon, keeper.reference)).id, keeper.configDigest);
      assert.equal(await exists(layerPath(daemon, keeperOwn.diffId)), true);
    });

    it('by id and by digest reference: the image goes, names and all', async () => {
      const one = await pushImage(registry, 'berth/byid', '1', { layers: [await fileLayer('byid')] });
      const two = await pushImage(registry, 'berth/byrepodigest', '1', { layers: [await fileLayer('byrd')] });
      await pull(daemon, one.reference);
      await pull(daemon, two.reference);

      await removeImage(daemon, one.configDigest);
      assert.equal(await imageStatus(daemon, one.configDigest), null);
      assert.equal(await imageStatus(daemon, one.reference), null);

      await removeImage(daemon, repoDigestOf(registry, 'berth/byrepodigest', two.manifestDigest));
      assert.equal(await imageStatus(daemon, two.configDigest), null);
      assert.equal(await imageStatus(daemon, two.reference), null);

      const ids = await listedIds(daemon);
      assert.ok(!ids.includes(one.configDigest) && !ids.includes(two.configDigest));
      for (const image of [one, two]) {
        const layer = image.layers[0] as BuiltLayer;
        assert.equal(await exists(layerPath(daemon, layer.diffId)), false);
        assert.equal(await exists(blobPath(daemon, layer.digest)), false);
        assert.equal(await exists(blobPath(daemon, image.configDigest)), false);
      }
    });

    it('an image pulled through an index leaves no blob behind', async () => {
      const repo = 'berth/multi-remove';
      const mine = await pushImage(registry, repo, null, { layers: [await fileLayer('mr-host')] });
      const theirs = await pushImage(registry, repo, null, {
        layers: [await fileLayer('mr-other')],
        platform: otherPlatform(),
      });
      const index = await pushIndex(registry, repo, 'v1', [mine, theirs]);
      const before = new Set(await namesIn(join(daemon.rootDir, 'blobs', 'sha256')));
      assert.equal(await pull(daemon, index.reference), mine.configDigest);
      await removeImage(daemon, index.reference);
      assert.equal(await imageStatus(daemon, mine.configDigest), null);
      const after = (await namesIn(join(daemon.rootDir, 'blobs', 'sha256'))).filter((n) => !before.has(n));
      const names: Record<string, string> = {
        [hex(index.digest)]: 'index',
        [hex(mine.manifestDigest)]: 'platform manifest',
        [hex(mine.configDigest)]: 'config',
      };
      assert.deepEqual(
        after.map((h) => `${names[h] ?? 'blob'} sha256:${h}`),
        [],
        'blobs left after RemoveImage',
      );
    });

    it('an unknown image is fine', async () => {
      await removeImage(daemon, `${registry.host}/berth/never:1`);
      await removeImage(daemon, `sha256:${'0'.repeat(64)}`);
      await removeImage(daemon, busybox.reference.replace(':1.0', ':0.1'));
      assert.equal((await found(daemon, busybox.reference)).id, busybox.configDigest);
    });
  });

  describe('concurrency', () => {
    it('concurrent pulls of one image download each layer once and agree on the id', async () => {
      const image = await pushImage(registry, 'berth/concurrent', '1', {
        layers: [
          await fileLayer('concurrent-a', 'gzip', 4 * 1024 * 1024),
          await fileLayer('concurrent-b', 'zstd', 2 * 1024 * 1024),
          await fileLayer('concurrent-c', 'none', 1024 * 1024),
        ],
      });
      const byDigest = repoDigestOf(registry, 'berth/concurrent', image.manifestDigest);
      const offset = daemon.output.length;
      const ids = await Promise.all([
        pull(daemon, image.reference),
        pull(daemon, image.reference),
        pull(daemon, byDigest),
      ]);
      assert.deepEqual(ids, [image.configDigest, image.configDigest, image.configDigest]);

      const downloads = parseLog(daemon.output.slice(offset)).filter((e) => e.msg === 'layer downloaded');
      for (const layer of image.layers) {
        const count = downloads.filter((e) => e.layer === layer.digest).length;
        assert.equal(count, 1, `layer ${layer.digest} downloaded ${count} times`);
      }
      const status = await found(daemon, image.reference);
      assert.deepEqual(status.repo_tags, [image.reference]);
      assert.deepEqual(status.repo_digests, [byDigest]);
    });
  });

  describe('ImageFsInfo', () => {
    it('reports the root dir, and usage that grows with a pull and shrinks with a removal', async () => {
      const first = await imageFs(daemon);
      assert.equal(first.mountpoint, daemon.rootDir);
      assert.ok(first.usedBytes > 0, `used_bytes ${first.usedBytes}`);
      assert.ok(first.inodesUsed > 0, `inodes_used ${first.inodesUsed}`);

      const image = await pushImage(registry, 'berth/fsinfo', '1', {
        layers: [await fileLayer('fsinfo', 'gzip', 1024 * 1024)],
      });
      await pull(daemon, image.reference);
      const second = await imageFs(daemon);
      // The blob and the unpacked file: about 2 MiB.
      assert.ok(
        second.usedBytes >= first.usedBytes + 2 * 1024 * 1024,
        `${first.usedBytes} → ${second.usedBytes}`,
      );
      assert.ok(second.inodesUsed > first.inodesUsed, `${first.inodesUsed} → ${second.inodesUsed}`);

      await removeImage(daemon, image.reference);
      const third = await imageFs(daemon);
      // Directories keep the blocks they grew by (ext4 never shrinks them); the files are gone.
      assert.ok(
        third.usedBytes <= second.usedBytes - 2 * 1024 * 1024,
        `${second.usedBytes} → ${third.usedBytes}`,
      );
      assert.equal(third.inodesUsed, first.inodesUsed);
    });

    it("reports the containers' writable layers on the same filesystem, apart from the images", async (t) => {
      const before = await imageFs(daemon);
      const layers = await writableLayers(daemon);
      assert.equal(layers.mountpoint, daemon.rootDir, 'one filesystem for both: kubelet sees no split');
      const pod = await runPod(daemon.cri, daemon.pod('fsinfo'));
      t.after(() => stopAndRemovePod(daemon.cri, pod.id));
      const writer = await startContainer(
        daemon.cri,
        pod,
        containerConfig('writer', busybox.reference, {
          command: ['/bin/sh', '-c', 'head -c 2097152 /dev/zero > /big'],
          // The image's user (1000) may not write to /.
          linux: { security_context: { run_as_user: { value: 0 } } },
        }),
      );
      await waitContainerState(daemon.cri, writer, 'CONTAINER_EXITED');
      const written = await writableLayers(daemon);
      assert.ok(
        written.usedBytes >= layers.usedBytes + 2 * 1024 * 1024,
        `${layers.usedBytes} → ${written.usedBytes}`,
      );
      assert.ok(written.inodesUsed > layers.inodesUsed, `${layers.inodesUsed} → ${written.inodesUsed}`);
      // The layer is the container's, not the images'.
      assert.ok((await imageFs(daemon)).usedBytes < before.usedBytes + 1024 * 1024);

      await daemon.cri.call('RemoveContainer', { container_id: writer });
      const removed = await writableLayers(daemon);
      assert.ok(
        removed.usedBytes <= written.usedBytes - 2 * 1024 * 1024,
        `${written.usedBytes} → ${removed.usedBytes}`,
      );
    });
  });

  describe('container rootfs over the pulled layers', () => {
    const containerId = `berth-image-test-${randomBytes(4).toString('hex')}`;

    after(async () => {
      if (daemon) await removeRootfs(containerId, daemon.rootDir).catch(() => undefined);
    });

    it('prepareRootfs merges the three layers: whiteout, opaque dir, hard link and symlinks', async () => {
      const info = await verboseInfo(daemon, busybox.reference);
      const diffIds = info.layers.map((layer) => layer.diffId);
      assert.deepEqual(diffIds, info.imageSpec.rootfs?.diff_ids);
      assert.deepEqual(
        diffIds,
        busybox.layers.map((layer) => layer.diffId),
      );

      const rootfs = await prepareRootfs(containerId, diffIds, daemon.rootDir);
      const at = (path: string): string => join(rootfs, path);
      try {
        assert.ok((await readMountInfo()).some((m) => m.mountPoint === rootfs && m.fsType === 'overlay'));
        // Layer 1.
        assert.ok(((await stat(at('bin/busybox'))).mode & 0o111) !== 0, 'busybox is not executable');
        assert.equal(await readlink(at('bin/sh')), 'busybox');
        assert.match(await readFile(at('etc/passwd'), 'utf8'), /^app:x:1000:1000:/m);
        // Layer 2, less what layer 3 deletes.
        assert.equal(await readFile(at('data/keep'), 'utf8'), 'keep\n');
        assert.equal(await exists(at('data/gone')), false, 'the whiteout did not hide data/gone');
        assert.deepEqual((await readdir(at('data'))).sort(), [
          'abs-link',
          'hardlink',
          'keep',
          'link',
          'original',
        ]);
        const original = await stat(at('data/original'));
        const hardlink = await stat(at('data/hardlink'));
        assert.equal(hardlink.ino, original.ino, 'the hard link has its own inode');
        assert.equal(original.nlink, 2);
        assert.equal(await readlink(at('data/link')), 'keep');
        assert.equal(await readFile(at('data/link'), 'utf8'), 'keep\n');
        assert.equal(await readlink(at('data/abs-link')), '/data/original');
        // Layer 3's opaque dir replaces layer 2's.
        assert.deepEqual(await readdir(at('opq')), ['new']);
        assert.equal(await readFile(at('opq/new'), 'utf8'), 'new\n');

        // And as a container would see it.
        const { stdout } = await run(
          'chroot',
          [
            rootfs,
            '/bin/sh',
            '-c',
            'cat /data/abs-link /data/link; ls -A /opq; test -e /data/gone || echo gone',
          ],
          { timeoutMs: 10_000 },
        );
        assert.equal(stdout, 'linked\nkeep\nnew\ngone\n');
      } finally {
        await removeRootfs(containerId, daemon.rootDir);
      }
      assert.equal(await exists(containerDir(containerId, daemon.rootDir)), false);
      assert.ok(!(await readMountInfo()).some((m) => m.mountPoint === rootfs));
      // The layers are untouched.
      assert.equal(await exists(join(layerPath(daemon, diffIds[1] as string), 'fs', 'data', 'gone')), true);
    });
  });

  describe('bad input', () => {
    it('PullImage: INVALID_ARGUMENT naming image.image', async () => {
      const cases: [string, RegExp][] = [
        ['', /is required/],
        ['UPPER:tag', /must be lowercase/],
        [`${registry.host}/UPPER/case:tag`, /must be lowercase/],
        ['a@sha256:short', /invalid sha256 digest/],
        [`${registry.host}/berth/busybox:bad tag`, /invalid tag/],
        [hex(busybox.configDigest), /image id/],
      ];
      for (const [image, problem] of cases) {
        const err = await rejectsWith(pull(daemon, image), status.INVALID_ARGUMENT);
        assert.match(err.details, /^image\.image: /, `${JSON.stringify(image)}: ${err.details}`);
        assert.match(err.details, problem, `${JSON.stringify(image)}: ${err.details}`);
      }
      const missing = await rejectsWith(daemon.cri.callImage('PullImage', {}), status.INVALID_ARGUMENT);
      assert.match(missing.details, /image\.image/);
    });

    it('UPPER/case:tag names registry host "UPPER", as in Docker: not INVALID_ARGUMENT', async () => {
      // distribution/reference reads an uppercase first component as a host; the registries file
      // sends that host to a closed loopback port.
      const err = (await pull(daemon, 'UPPER/case:tag').then(
        () => assert.fail('pulled UPPER/case:tag'),
        (e: unknown) => e,
      )) as ServiceError;
      assert.notEqual(err.code, status.INVALID_ARGUMENT, err.details);
      assert.match(err.details, /UPPER\/case/);
      assert.match(err.details, /127\.0\.0\.1/, 'not sent to the closed loopback port');
    });

    it('ImageStatus and RemoveImage without an image: INVALID_ARGUMENT', async () => {
      for (const rpc of ['ImageStatus', 'RemoveImage']) {
        const err = await rejectsWith(daemon.cri.callImage(rpc, {}), status.INVALID_ARGUMENT);
        assert.match(err.details, /image\.image/, rpc);
      }
    });
  });

  describe('restart', () => {
    let images: WireImage[] = [];
    const sweeps: unknown[] = [];

    before(async () => {
      images = sortById(await listImages(daemon));
    });

    it('a restart keeps every image, tag and digest', async () => {
      assert.ok(images.length >= 5, `only ${images.length} images`);
      for (const image of images) assert.ok(image.repo_digests.length > 0, image.id);
      const offset = daemon.output.length;
      await daemon.restart();
      sweeps.push(recoveredSweep(daemon.output.slice(offset)));
      assert.deepEqual(sortById(await listImages(daemon)), images);
    });

    it('so does kill -9, and the images stay usable', async () => {
      let offset = daemon.output.length;
      await daemon.kill9();
      await daemon.start();
      sweeps.push(recoveredSweep(daemon.output.slice(offset)));
      assert.deepEqual(sortById(await listImages(daemon)), images);

      // The layers are all there: a pull downloads nothing.
      offset = daemon.output.length;
      assert.equal(await pull(daemon, busybox.reference), busybox.configDigest);
      const downloads = parseLog(daemon.output.slice(offset)).filter((e) => e.msg === 'layer downloaded');
      assert.deepEqual(downloads, []);
      assert.equal((await verboseInfo(daemon, busybox.reference)).layers.length, 3);
    });

    it('start-up found no leftovers to sweep: every stored blob belonged to an image', () => {
      assert.deepEqual(sweeps, [
        { temporary: 0, layers: 0, blobs: 0 },
        { temporary: 0, layers: 0, blobs: 0 },
      ]);
    });
  });
});

/** The imageSweep report of the 'state recovered' line in `output`. */
function recoveredSweep(output: string): unknown {
  const line = parseLog(output).find((e) => e.msg === 'state recovered');
  assert.ok(line, 'no "state recovered" line');
  return line.imageSweep;
}

describe('PullImage through a docker.io mirror', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let configDir = '';
  let mirror: TestRegistry;
  let daemon: TestDaemon;

  before(async () => {
    configDir = await mkdtemp(join(tmpdir(), 'berth-image-test-'));
    mirror = await startRegistry();
    // Written before the daemon starts: it reads the file once. docker.io's origin is a closed
    // loopback port, so the pull can only succeed through the mirror and never leaves the machine.
    const docker = hostSection('docker.io', { mirrors: [mirror.url], server: await closedOrigin() });
    const toml = await registriesFile(configDir, [docker]);
    daemon = await startDaemon(toml);
  });

  after(async () => {
    await daemon?.destroy();
    await mirror?.stop();
    if (configDir) await rm(configDir, { recursive: true, force: true });
  });

  it('berthtest:1 comes from the mirror, listed as docker.io/library/berthtest:1', async () => {
    assert.match(mirror.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    const image = await pushImage(mirror, 'library/berthtest', '1', {
      layers: [await fileLayer('mirrored')],
    });
    assert.equal(await pull(daemon, 'berthtest:1'), image.configDigest);

    const status = await found(daemon, 'docker.io/library/berthtest:1');
    assert.equal(status.id, image.configDigest);
    assert.deepEqual(status.repo_tags, ['docker.io/library/berthtest:1']);
    assert.deepEqual(status.repo_digests, [`docker.io/library/berthtest@${image.manifestDigest}`]);
    for (const name of ['berthtest:1', 'docker.io/berthtest:1', 'index.docker.io/library/berthtest:1']) {
      assert.equal((await found(daemon, name)).id, image.configDigest, name);
    }
    assert.deepEqual(await listedIds(daemon), [image.configDigest]);
  });

  it('an image the mirror lacks fails without reaching beyond 127.0.0.1', async () => {
    const err = (await pull(daemon, 'berthtest:missing').then(
      () => assert.fail('pulled berthtest:missing'),
      (e: unknown) => e,
    )) as ServiceError;
    assert.ok(err.details.includes(mirror.url), err.details);
    assert.ok(!err.details.includes('registry-1.docker.io'), err.details);
    assert.equal(await imageStatus(daemon, 'berthtest:missing'), null);
  });
});

describe('a pull that fails half way, then kill -9', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let configDir = '';
  let registry: TestRegistry;
  let daemon: TestDaemon;

  before(async () => {
    configDir = await mkdtemp(join(tmpdir(), 'berth-image-test-'));
    registry = await startRegistry();
    daemon = await startDaemon(await registriesFile(configDir, [hostSection(registry.host)]));
  });

  after(async () => {
    await daemon?.destroy();
    await registry?.stop();
    if (configDir) await rm(configDir, { recursive: true, force: true });
  });

  it('leaves nothing recorded: start-up deletes what it stored, and the pull then works', async () => {
    // The good layer is unpacked and committed; the image is never recorded (its other layer is corrupt).
    const good = await fileLayer('half-good');
    const bad = await fileLayer('half-bad', 'zstd', 64 * 1024);
    const image = await pushImage(registry, 'berth/half', '1', { layers: [good, bad] });
    const data = registryBlobPath(registry, bad.digest);
    const original = await readFile(data);
    const corrupted = Buffer.from(original);
    for (let i = 100; i < 200; i++) corrupted[i] = 0xff - (original[i] ?? 0);
    await writeFile(data, corrupted);
    const err = await rejectsWith(pull(daemon, image.reference), status.UNKNOWN);
    assert.ok(err.details.includes(bad.digest), `error does not name ${bad.digest}: ${err.details}`);
    assert.equal(await exists(layerPath(daemon, bad.diffId)), false, 'the corrupt layer is unpacked');

    const offset = daemon.output.length;
    await daemon.kill9();
    await daemon.start();
    const sweep = recoveredSweep(daemon.output.slice(offset)) as { layers: number; blobs: number };
    assert.ok(sweep.layers + sweep.blobs > 0, `nothing swept: ${JSON.stringify(sweep)}`);
    assert.equal(await exists(layerPath(daemon, good.diffId)), false, 'an unrecorded layer is kept');
    assert.equal(await exists(blobPath(daemon, good.digest)), false, 'an unrecorded blob is kept');
    assert.deepEqual(await listedIds(daemon), []);
    const temps = (await namesIn(join(daemon.rootDir, 'layers'))).filter((n) => n.includes('.tmp-'));
    assert.deepEqual(temps, [], 'temporary layer dirs left');

    await writeFile(data, original);
    assert.equal(await pull(daemon, image.reference), image.configDigest);
    assert.equal((await found(daemon, image.reference)).id, image.configDigest);
    for (const layer of [good, bad]) {
      assert.equal(await exists(layerPath(daemon, layer.diffId)), true, `layer ${layer.diffId} missing`);
    }
  });
});
