import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InvalidArgumentError } from '../../src/errors.js';
import {
  formatReference,
  isDigest,
  parseReference,
  referenceName,
  repoDigest,
  repoTag,
  type ImageReference,
} from '../../src/registry/reference.js';

const HEX = 'dbcc1c35ac38df41fd2f5e4130b32ffdb93ebae8b3dbe638c23575912276fc9c';
const DIGEST = `sha256:${HEX}`;

function ref(
  registry: string,
  repository: string,
  tag: string | null,
  digest: string | null = null,
): ImageReference {
  return { registry, repository, tag, digest };
}

describe('parseReference normalises like distribution/reference', () => {
  const table: [string, ImageReference][] = [
    ['busybox', ref('docker.io', 'library/busybox', 'latest')],
    ['busybox:1.36', ref('docker.io', 'library/busybox', '1.36')],
    ['library/busybox', ref('docker.io', 'library/busybox', 'latest')],
    ['docker.io/busybox', ref('docker.io', 'library/busybox', 'latest')],
    ['docker.io/library/busybox:latest', ref('docker.io', 'library/busybox', 'latest')],
    ['index.docker.io/busybox', ref('docker.io', 'library/busybox', 'latest')],
    ['index.docker.io/library/busybox', ref('docker.io', 'library/busybox', 'latest')],
    ['dmcgowan/myapp', ref('docker.io', 'dmcgowan/myapp', 'latest')],
    ['library/foo/bar', ref('docker.io', 'library/foo/bar', 'latest')],
    ['registry.k8s.io/pause:3.9', ref('registry.k8s.io', 'pause', '3.9')],
    ['gcr.io/google-containers/pause', ref('gcr.io', 'google-containers/pause', 'latest')],
    ['localhost/a', ref('localhost', 'a', 'latest')],
    ['localhost:5000/a/b', ref('localhost:5000', 'a/b', 'latest')],
    ['localhost:5000/a/b:v1', ref('localhost:5000', 'a/b', 'v1')],
    [`127.0.0.1:5000/x@${DIGEST}`, ref('127.0.0.1:5000', 'x', null, DIGEST)],
    [`busybox:1@${DIGEST}`, ref('docker.io', 'library/busybox', '1', DIGEST)],
    [`busybox@${DIGEST}`, ref('docker.io', 'library/busybox', null, DIGEST)],
    ['[::1]:5000/x:y', ref('[::1]:5000', 'x', 'y')],
    ['[fc00::1]:5000/docker/docker', ref('[fc00::1]:5000', 'docker/docker', 'latest')],
    ['test_com/foo', ref('docker.io', 'test_com/foo', 'latest')],
    ['test-com:8080/foo', ref('test-com:8080', 'foo', 'latest')],
    ['xn--n3h.com:18080/foo', ref('xn--n3h.com:18080', 'foo', 'latest')],
    // Uppercase first element: repositories can't have it, so it must be a host.
    ['Foo/bar', ref('Foo', 'bar', 'latest')],
    // Without a slash, "host:port" is a name and a tag, as in Docker.
    ['localhost:5000', ref('docker.io', 'library/localhost', '5000')],
    ['dock__er/a-b---c.d', ref('docker.io', 'dock__er/a-b---c.d', 'latest')],
    [`docker.io/${HEX}`, ref('docker.io', `library/${HEX}`, 'latest')],
    ['a:Tag_1.x-y', ref('docker.io', 'library/a', 'Tag_1.x-y')],
  ];
  for (const [input, expected] of table) {
    it(input, () => assert.deepEqual(parseReference(input), expected));
  }
});

describe('parseReference rejects', () => {
  const table: [string, string][] = [
    ['', 'empty'],
    [' busybox', 'whitespace'],
    ['Busybox', 'must be lowercase'],
    ['docker/Docker', 'must be lowercase'],
    ['docker.io/library/BusyBox:1', 'must be lowercase'],
    [HEX, 'image id'],
    [DIGEST, 'bare digest'],
    ['https://github.com/docker/docker', 'invalid registry host'],
    ['-docker', 'invalid repository name'],
    ['docker-/docker', 'invalid repository name'],
    ['docker///docker', 'invalid repository name'],
    ['dock..er/docker', 'invalid registry host'],
    ['library/dock..er', 'invalid repository name'],
    ['____/____', 'invalid repository name'],
    ['docker/', 'invalid repository name'],
    ['localhost/', 'repository name is empty'],
    ['[fc00::1]:5000', 'invalid repository name'],
    ['fc00::1:5000/debian', 'invalid registry host'],
    ['[fe80::1%eth0]:5000/debian', 'invalid registry host'],
    ['busybox:-tag', 'invalid tag'],
    [`busybox:${'t'.repeat(129)}`, 'invalid tag'],
    ['busybox@sha256:abc', 'invalid sha256 digest'],
    [`busybox@sha256:${HEX.toUpperCase()}`, 'invalid sha256 digest'],
    [`busybox@md5:${HEX}`, 'unsupported digest algorithm'],
    ['busybox@latest', 'invalid digest'],
    [`a/${'b'.repeat(250)}`, 'longer than 255'],
  ];
  for (const [input, fragment] of table) {
    it(JSON.stringify(input), () => {
      assert.throws(
        () => parseReference(input, 'image.image'),
        (err: unknown) => {
          assert.ok(err instanceof InvalidArgumentError, String(err));
          assert.equal(err.field, 'image.image');
          assert.ok(err.message.includes(fragment), `"${err.message}" lacks "${fragment}"`);
          return true;
        },
      );
    });
  }
});

describe('formatting', () => {
  it('formatReference gives the full form', () => {
    assert.equal(formatReference(parseReference('busybox')), 'docker.io/library/busybox:latest');
    assert.equal(formatReference(parseReference(`busybox@${DIGEST}`)), `docker.io/library/busybox@${DIGEST}`);
    assert.equal(
      formatReference(parseReference(`busybox:1@${DIGEST}`)),
      `docker.io/library/busybox:1@${DIGEST}`,
    );
    assert.equal(formatReference(parseReference('localhost:5000/a/b:v1')), 'localhost:5000/a/b:v1');
  });

  it('formatReference round-trips', () => {
    for (const s of ['registry.k8s.io/pause:3.9', `127.0.0.1:5000/x@${DIGEST}`, 'docker.io/library/a:b']) {
      assert.equal(formatReference(parseReference(s)), s);
    }
  });

  it('repoTag and repoDigest', () => {
    assert.equal(repoTag(parseReference('busybox')), 'docker.io/library/busybox:latest');
    assert.equal(repoTag(parseReference(`busybox:1@${DIGEST}`)), 'docker.io/library/busybox:1');
    assert.equal(repoTag(parseReference(`busybox@${DIGEST}`)), null);
    assert.equal(repoDigest(parseReference('busybox:1'), DIGEST), `docker.io/library/busybox@${DIGEST}`);
    assert.equal(referenceName(parseReference('registry.k8s.io/pause:3.9')), 'registry.k8s.io/pause');
  });

  it('isDigest', () => {
    assert.equal(isDigest(DIGEST), true);
    assert.equal(isDigest(`sha512:${HEX}${HEX}`), true);
    assert.equal(isDigest(HEX), false);
    assert.equal(isDigest('sha256:abc'), false);
    assert.equal(isDigest(`sha256:${HEX.toUpperCase()}`), false);
    assert.equal(isDigest(`sha384:${HEX}`), false);
  });
});
