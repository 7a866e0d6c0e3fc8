import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Descriptor, ImageIndex, Platform } from '../../src/registry/manifest.js';
import { PlatformNotFoundError } from '../../src/registry/errors.js';
import {
  formatPlatform,
  hostPlatform,
  normalizePlatform,
  selectPlatform,
} from '../../src/registry/platform.js';

let n = 0;
function entry(platform: Platform | undefined): Descriptor {
  const digest = `sha256:${(n++).toString(16).padStart(64, '0')}`;
  return {
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    digest,
    size: 1,
    ...(platform ? { platform } : {}),
  };
}

function index(...platforms: (Platform | undefined)[]): ImageIndex {
  return { schemaVersion: 2, manifests: platforms.map(entry) };
}

const amd64 = { os: 'linux', architecture: 'amd64' };
const arm64 = { os: 'linux', architecture: 'arm64', variant: 'v8' };
const armv7 = { os: 'linux', architecture: 'arm', variant: 'v7' };
const armv6 = { os: 'linux', architecture: 'arm', variant: 'v6' };

describe('selectPlatform', () => {
  it('picks linux/amd64 for an amd64 host', () => {
    const idx = index(arm64, amd64, { os: 'windows', architecture: 'amd64' });
    assert.equal(selectPlatform(idx, amd64), idx.manifests[1]);
  });

  it('defaults to the host platform', () => {
    const idx = index(arm64, amd64);
    const want = hostPlatform();
    const chosen = selectPlatform(idx);
    assert.equal(chosen.platform?.architecture, want.architecture);
  });

  it('maps process.arch to OCI names', () => {
    assert.deepEqual(hostPlatform('x64'), { os: 'linux', architecture: 'amd64' });
    assert.deepEqual(hostPlatform('arm64'), { os: 'linux', architecture: 'arm64', variant: 'v8' });
    assert.deepEqual(hostPlatform('s390x'), { os: 'linux', architecture: 's390x' });
  });

  it('treats arm64 with and without v8 alike', () => {
    const idx = index(amd64, { os: 'linux', architecture: 'arm64' });
    assert.equal(selectPlatform(idx, arm64), idx.manifests[1]);
    const idx2 = index(amd64, arm64);
    assert.equal(selectPlatform(idx2, { os: 'linux', architecture: 'arm64' }), idx2.manifests[1]);
  });

  it('matches the variant when given, preferring exact over older compatible ones', () => {
    const idx = index(armv6, armv7);
    assert.equal(selectPlatform(idx, armv7), idx.manifests[1]);
    assert.equal(selectPlatform(idx, armv6), idx.manifests[0]);
    const onlyV6 = index(amd64, armv6);
    assert.equal(selectPlatform(onlyV6, armv7), onlyV6.manifests[1]);
    // A v6 machine cannot run v7 code.
    assert.throws(() => selectPlatform(index(armv7), armv6), PlatformNotFoundError);
  });

  it('does not pick a newer amd64 level for a plain amd64 want', () => {
    const idx = index({ os: 'linux', architecture: 'amd64', variant: 'v3' }, amd64);
    assert.equal(selectPlatform(idx, amd64), idx.manifests[1]);
  });

  it('understands uname spellings', () => {
    const idx = index({ os: 'Linux', architecture: 'x86_64' });
    assert.equal(selectPlatform(idx, amd64), idx.manifests[0]);
    assert.deepEqual(normalizePlatform({ os: 'linux', architecture: 'aarch64' }), {
      os: 'linux',
      architecture: 'arm64',
      variant: 'v8',
    });
  });

  it('first entry wins among equals; entries without platform are skipped', () => {
    const idx = index(undefined, amd64, amd64);
    assert.equal(selectPlatform(idx, amd64), idx.manifests[1]);
  });

  it('lists the available platforms when none fits', () => {
    const idx = index(
      arm64,
      armv7,
      { os: 'unknown', architecture: 'unknown' },
      { os: 'windows', architecture: 'amd64' },
    );
    assert.throws(
      () => selectPlatform(idx, amd64),
      (err: unknown) => {
        assert.ok(err instanceof PlatformNotFoundError);
        assert.equal(err.wanted, 'linux/amd64');
        assert.deepEqual(err.available, ['linux/arm64/v8', 'linux/arm/v7', 'windows/amd64']);
        assert.match(err.message, /linux\/amd64.*linux\/arm64\/v8, linux\/arm\/v7, windows\/amd64/);
        return true;
      },
    );
    assert.throws(() => selectPlatform(index(), amd64), /no platform-specific manifests/);
  });

  it('formatPlatform', () => {
    assert.equal(formatPlatform(amd64), 'linux/amd64');
    assert.equal(formatPlatform(arm64), 'linux/arm64/v8');
  });
});
