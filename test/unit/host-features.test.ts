/**
 * The host features berthd probes once at start-up, on this host, and the AppArmor decision they
 * feed: what a container asking for RuntimeDefault, Localhost or Unconfined gets with and without
 * AppArmor on the host.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { pageSizeName, probeHostFeatures } from '../../src/host/features.js';
import type { SecurityProfile } from '../../src/oci/container-input.js';
import { apparmorProfile } from '../../src/oci/apparmor.js';

test('huge page sizes are named as CRI names them', () => {
  assert.equal(pageSizeName(2048), '2MB');
  assert.equal(pageSizeName(1024 * 1024), '1GB');
  assert.equal(pageSizeName(64), '64KB');
  assert.equal(pageSizeName(32 * 1024 * 1024), '32GB');
});

test('probes this host: each feature answered, none claimed without asking', async () => {
  const scratchDir = await mkdtemp(join(tmpdir(), 'berth-host-features-'));
  const features = await probeHostFeatures({ timeoutMs: 10_000, scratchDir });
  await rm(scratchDir, { recursive: true });
  const appArmor = await readFile('/sys/module/apparmor/parameters/enabled', 'utf8').catch(() => 'N');
  assert.equal(features.appArmor.enabled, appArmor.trim() === 'Y');
  assert.ok(features.cgroups.controllers.length > 0);
  assert.equal(features.seccomp.enabled, features.seccomp.actions.length > 0);
  // Linux 5.12 and later have mount_setattr; this suite runs on such kernels only.
  assert.equal(features.idmappedMounts.mountSetattr, true);
  assert.ok(features.idmappedMounts.kernel.length > 0);
  const { overlayLower, tmpfs, reason } = features.idmappedMounts;
  assert.equal(reason === null, overlayLower && tmpfs, `a reason exactly when something failed: ${reason}`);
  assert.ok(features.criu === null || /^\d+\.\d+/.test(features.criu.version));
  assert.deepEqual(JSON.parse(JSON.stringify(features)), features, 'JSON as shown by verbose Status');
});

describe('apparmorProfile', () => {
  const runtimeDefault: SecurityProfile = { kind: 'RuntimeDefault' };
  const unconfined: SecurityProfile = { kind: 'Unconfined' };
  const localhost: SecurityProfile = { kind: 'Localhost', path: 'my-profile' };

  test('without AppArmor: RuntimeDefault and Unconfined get none, a named profile is refused', () => {
    assert.equal(apparmorProfile(runtimeDefault, false), null);
    assert.equal(apparmorProfile(unconfined, false), null);
    assert.throws(() => apparmorProfile(localhost, false), {
      name: 'InvalidArgumentError',
      message: /apparmor\.localhost_ref.*AppArmor is not enabled on this host/,
    });
  });

  test('with AppArmor: the named profile is applied; berth has no default profile, so RuntimeDefault gets none', () => {
    assert.equal(apparmorProfile(localhost, true), 'my-profile');
    assert.equal(apparmorProfile(runtimeDefault, true), null);
    assert.equal(apparmorProfile(unconfined, true), null);
  });
});
