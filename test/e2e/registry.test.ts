/**
 * RegistryClient against a real registry: Debian's docker-registry (distribution 2.8) on
 * 127.0.0.1, filled with images built by the test harness.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { parseReference } from '../../src/registry/reference.js';
import {
  MEDIA_TYPES,
  type Descriptor,
  type ImageIndex,
  type ImageManifest,
} from '../../src/registry/manifest.js';
import { RegistryClient, type FetchedBlob } from '../../src/registry/client.js';
import { RegistryAuthError, RegistryNotFoundError } from '../../src/registry/errors.js';
import { parseRegistryHosts } from '../../src/registry/hosts.js';
import { selectPlatform } from '../../src/registry/platform.js';
import { buildLayer, busyboxLayer, pushImage, pushIndex, type PushedImage } from '../harness/images.js';
import { freePort, startRegistry, type TestRegistry } from '../harness/registry.js';

const TIMEOUT_MS = 10_000;

async function digestOf(blob: FetchedBlob): Promise<{ digest: string; size: number }> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of blob.stream) {
    const buf = chunk as Buffer;
    hash.update(buf);
    size += buf.length;
  }
  return { digest: `sha256:${hash.digest('hex')}`, size };
}

describe('registry client against docker-registry', () => {
  let registry: TestRegistry;
  let image: PushedImage;
  let dockerImage: PushedImage;
  let client: RegistryClient;

  before(async () => {
    registry = await startRegistry();
    const base = await busyboxLayer('gzip');
    const extra = await buildLayer(
      [
        { type: 'dir', path: 'data' },
        { type: 'file', path: 'data/hello', content: 'hello\n', uid: 1000, gid: 1000 },
      ],
      'zstd',
    );
    image = await pushImage(registry, 'test/busybox', 'v1', {
      layers: [base, extra],
      config: { Cmd: ['sh'], User: 'app' },
    });
    dockerImage = await pushImage(registry, 'test/docker', 'v1', { layers: [base], format: 'docker' });
    client = new RegistryClient({ hosts: parseRegistryHosts('', 'none'), timeoutMs: TIMEOUT_MS });
  });
  after(async () => {
    client?.close();
    await registry?.stop();
  });

  it('fetches a manifest by tag and by digest', async () => {
    const byTag = await client.fetchManifest(parseReference(image.reference));
    assert.equal(byTag.digest, image.manifestDigest);
    assert.equal(byTag.mediaType, MEDIA_TYPES.ociManifest);
    assert.equal(byTag.endpoint, registry.url);
    assert.deepEqual(byTag.bytes, image.manifest);

    const byDigest = await client.fetchManifest(
      parseReference(`${registry.host}/test/busybox@${image.manifestDigest}`),
    );
    assert.equal(byDigest.digest, image.manifestDigest);
    const tagAndDigest = await client.fetchManifest(
      parseReference(`${registry.host}/test/busybox:ignored@${image.manifestDigest}`),
    );
    assert.equal(tagAndDigest.digest, image.manifestDigest);
  });

  it('streams every blob with the right digest and size', async () => {
    const ref = parseReference(image.reference);
    const manifest = JSON.parse((await client.fetchManifest(ref)).bytes.toString()) as ImageManifest;
    assert.equal(manifest.config.digest, image.configDigest);
    for (const desc of [manifest.config, ...manifest.layers]) {
      const blob = await client.fetchBlob(ref, desc, undefined, { preferEndpoint: registry.url });
      assert.equal(blob.endpoint, registry.url);
      assert.deepEqual(await digestOf(blob), { digest: desc.digest, size: desc.size });
    }
    assert.deepEqual(
      manifest.layers.map((l) => l.mediaType),
      [MEDIA_TYPES.ociLayerGzip, MEDIA_TYPES.ociLayerZstd],
    );
  });

  it('serves Docker schema 2 manifests as such', async () => {
    const got = await client.fetchManifest(parseReference(dockerImage.reference));
    assert.equal(got.mediaType, MEDIA_TYPES.dockerManifest);
    assert.equal(got.digest, dockerImage.manifestDigest);
    const manifest = JSON.parse(got.bytes.toString()) as ImageManifest;
    assert.equal(manifest.layers[0]?.mediaType, MEDIA_TYPES.dockerLayerGzip);
  });

  for (const format of ['oci', 'docker'] as const) {
    it(`an ${format} index with two platforms: selectPlatform picks linux/amd64`, async () => {
      const repo = `test/multi-${format}`;
      const amd64 = await pushImage(registry, repo, null, {
        layers: [await buildLayer([{ type: 'file', path: 'arch', content: 'amd64' }])],
        platform: { os: 'linux', architecture: 'amd64' },
        format,
      });
      const arm64 = await pushImage(registry, repo, null, {
        layers: [await buildLayer([{ type: 'file', path: 'arch', content: 'arm64' }])],
        platform: { os: 'linux', architecture: 'arm64', variant: 'v8' },
        format,
      });
      const pushed = await pushIndex(registry, repo, 'v1', [arm64, amd64], format);

      const ref = parseReference(pushed.reference);
      const top = await client.fetchManifest(ref);
      assert.equal(top.digest, pushed.digest);
      assert.equal(top.mediaType, format === 'oci' ? MEDIA_TYPES.ociIndex : MEDIA_TYPES.dockerManifestList);
      const chosen: Descriptor = selectPlatform(JSON.parse(top.bytes.toString()) as ImageIndex, {
        os: 'linux',
        architecture: 'amd64',
      });
      assert.equal(chosen.digest, amd64.manifestDigest);
      const child = await client.fetchManifestByDigest(ref, chosen.digest, undefined, {
        preferEndpoint: top.endpoint,
      });
      assert.equal(child.digest, amd64.manifestDigest);
      assert.equal(child.mediaType, format === 'oci' ? MEDIA_TYPES.ociManifest : MEDIA_TYPES.dockerManifest);
    });
  }

  it('an unknown tag, repository or blob is RegistryNotFoundError', async () => {
    await assert.rejects(
      client.fetchManifest(parseReference(`${registry.host}/test/busybox:nope`)),
      (err: unknown) => {
        assert.ok(err instanceof RegistryNotFoundError);
        assert.equal(err.reference, `${registry.host}/test/busybox:nope`);
        return true;
      },
    );
    await assert.rejects(
      client.fetchManifest(parseReference(`${registry.host}/no/such:v1`)),
      RegistryNotFoundError,
    );
    const missing = `sha256:${'0'.repeat(64)}`;
    await assert.rejects(
      client.fetchBlob(parseReference(image.reference), {
        mediaType: MEDIA_TYPES.ociLayer,
        digest: missing,
        size: 1,
      }),
      RegistryNotFoundError,
    );
  });

  it('pulls docker.io, registry.k8s.io and gcr.io images from a mirror under the same path', async () => {
    await pushImage(registry, 'library/mirrored', 'v1', { layers: [await busyboxLayer()] });
    await pushImage(registry, 'pause', '3.9', {
      layers: [await buildLayer([{ type: 'file', path: 'p', content: 'p' }])],
    });
    await pushImage(registry, 'google-containers/pause', '3.2', {
      layers: [await buildLayer([{ type: 'file', path: 'g', content: 'g' }])],
    });
    // Each origin points at a closed loopback port, so a miss at the mirror can't leave the machine.
    const closed = `http://127.0.0.1:${await freePort()}`;
    const toml = ['docker.io', 'registry.k8s.io', 'gcr.io']
      .map((r) => `[registry."${r}"]\nmirrors = [{ url = "${registry.url}" }]\nserver = "${closed}"\n`)
      .join('\n');
    const mirrored = new RegistryClient({
      hosts: parseRegistryHosts(toml, 'mirrors.toml'),
      timeoutMs: TIMEOUT_MS,
    });
    try {
      for (const name of [
        'mirrored:v1',
        'docker.io/library/mirrored:v1',
        'registry.k8s.io/pause:3.9',
        'gcr.io/google-containers/pause:3.2',
      ]) {
        const ref = parseReference(name);
        const got = await mirrored.fetchManifest(ref);
        assert.equal(got.endpoint, registry.url, name);
        const manifest = JSON.parse(got.bytes.toString()) as ImageManifest;
        const blob = await mirrored.fetchBlob(ref, manifest.config, undefined, {
          preferEndpoint: got.endpoint,
        });
        assert.equal(blob.endpoint, registry.url);
        assert.equal((await digestOf(blob)).digest, manifest.config.digest);
      }
    } finally {
      mirrored.close();
    }
  });
});

describe('registry client against docker-registry with htpasswd', () => {
  const user = { username: 'berth', password: 'correct horse' };
  let registry: TestRegistry;
  let image: PushedImage;

  before(async () => {
    registry = await startRegistry({ htpasswd: user });
    image = await pushImage(registry, 'private/app', 'v1', {
      layers: [await buildLayer([{ type: 'file', path: 'x', content: 'x' }])],
    });
  });
  after(() => registry?.stop());

  const withClient = async (toml: string, body: (c: RegistryClient) => Promise<void>): Promise<void> => {
    const c = new RegistryClient({ hosts: parseRegistryHosts(toml, 'auth.toml'), timeoutMs: TIMEOUT_MS });
    try {
      await body(c);
    } finally {
      c.close();
    }
  };

  it('the right password works, from the request or from the hosts file', async () => {
    const ref = parseReference(image.reference);
    await withClient('', async (c) => {
      const got = await c.fetchManifest(ref, user);
      assert.equal(got.digest, image.manifestDigest);
      const manifest = JSON.parse(got.bytes.toString()) as ImageManifest;
      const layer = manifest.layers[0] as Descriptor;
      assert.equal((await digestOf(await c.fetchBlob(ref, layer, user))).digest, layer.digest);
      const auth = Buffer.from(`${user.username}:${user.password}`).toString('base64');
      assert.equal((await c.fetchManifest(ref, { auth })).digest, image.manifestDigest);
    });
    const toml = `[registry."${registry.host}"]\nusername = "${user.username}"\npassword = "${user.password}"\n`;
    await withClient(toml, async (c) => {
      assert.equal((await c.fetchManifest(ref)).digest, image.manifestDigest);
    });
  });

  it('a wrong password, or none, is RegistryAuthError', async () => {
    const ref = parseReference(image.reference);
    await withClient('', async (c) => {
      await assert.rejects(
        c.fetchManifest(ref, { username: user.username, password: 'wrong' }),
        (err: unknown) => {
          assert.ok(err instanceof RegistryAuthError);
          assert.equal(err.reason, 'unauthenticated');
          assert.equal(err.status, 401);
          return true;
        },
      );
      await assert.rejects(c.fetchManifest(ref), RegistryAuthError);
    });
  });
});
