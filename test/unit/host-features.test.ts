/**
 * The host features berthd probes once at start-up, on this host, and the AppArmor decision they
 * feed: what a container asking for RuntimeDefault, Localhost or Unconfined gets with and without
 * AppArmor on the host.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { findProgram } from '../../src/exec.js';
import {
  pageSizeName,
  probeAppArmor,
  probeHostFeatures,
  probeOwnProcess,
  type AppArmorPaths,
} from '../../src/host/features.js';
import { fakeTreeMaker } from '../harness/files.js';
import { containerCapabilities, KNOWN_CAPABILITIES } from '../../src/oci/capabilities.js';
import { buildContainerSpec } from '../../src/oci/container.js';
import type { ContainerSpecInput } from '../../src/oci/container-input.js';
import { clampOomScoreAdj } from '../../src/oci/oom.js';
import type { OwnProcess } from '../../src/host/features.js';
import type { ContainerSpec } from '../../src/model/container.js';
import { containerSecurity, containerSpec, sandboxSpec } from '../harness/container-spec.js';
import type { SecurityProfile } from '../../src/oci/container-input.js';
import { profileNameOf } from '../../src/host/apparmor.js';
import { apparmorProfile } from '../../src/oci/apparmor.js';
import { DEFAULT_APPARMOR_PROFILE, defaultAppArmorProfile } from '../../src/oci/apparmor-profile.js';

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
  const parser = await findProgram('apparmor_parser').then(
    () => true,
    () => false,
  );
  assert.equal(
    features.appArmor.enabled,
    appArmor.trim() === 'Y' && existsSync('/sys/kernel/security/apparmor') && parser,
  );
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

test("berthd's own capabilities and oom_score_adj are probed once and the spec takes them as given", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'berth-own-process-'));
  try {
    const paths = {
      capLastCap: join(dir, 'cap_last_cap'),
      status: join(dir, 'status'),
      oomScoreAdj: join(dir, 'oom_score_adj'),
    };
    await writeFile(paths.capLastCap, '40\n');
    // All but CAP_SYS_RESOURCE (24), as a VM that withholds it shows.
    await writeFile(paths.status, 'Name:\tberthd\nCapBnd:\t000001fffeffffff\n');
    await writeFile(paths.oomScoreAdj, '-500\n');
    const own = await probeOwnProcess(paths);
    assert.equal(own.oomScoreAdj, -500);
    assert.ok(!own.capabilities.includes('CAP_SYS_RESOURCE'));
    assert.equal(own.capabilities.length, 40);
    // The files change; what was probed does not, and the spec is built from the probe alone.
    await rm(dir, { recursive: true });
    const spec = buildContainerSpec(
      specInput(
        containerSpec({ command: ['/bin/true'], security: containerSecurity({ privileged: true }) }),
        own,
      ),
    );
    assert.deepEqual(spec.process?.capabilities?.bounding, own.capabilities);
    assert.equal(spec.process?.oomScoreAdj, -500);
    assert.deepEqual(await probeOwnProcess(paths), {
      capabilities: [...KNOWN_CAPABILITIES],
      oomScoreAdj: null,
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('the spec builders of capabilities, oom_score_adj and mounts read nothing of the host', async () => {
  const oci = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'src', 'oci');
  for (const name of ['capabilities.js', 'oom.js', 'mounts.js']) {
    const text = await readFile(join(oci, name), 'utf8');
    assert.doesNotMatch(text, /from ['"](node:)?fs|mounts\/(syscalls|mountinfo)/, name);
  }
});

describe('probeAppArmor', () => {
  const fakeTree = fakeTreeMaker('berth-unit-apparmor-');

  /** A module switch saying `enabled`, a securityfs dir if `mounted`, a parser if `parser`. */
  async function host(enabled: string, mounted: boolean, parser: boolean): Promise<AppArmorPaths> {
    const root = await fakeTree({
      enabled: `${enabled}\n`,
      ...(parser ? { apparmor_parser: '#!/bin/sh\n' } : {}),
    });
    if (mounted) await mkdir(join(root, 'apparmor'));
    if (parser) await chmod(join(root, 'apparmor_parser'), 0o755);
    return {
      enabledFile: join(root, 'enabled'),
      securityDir: join(root, 'apparmor'),
      parser: join(root, 'apparmor_parser'),
    };
  }

  test('usable with the module on, securityfs mounted and apparmor_parser there', async () => {
    assert.deepEqual(await probeAppArmor(await host('Y', true, true)), {
      enabled: true,
      defaultProfile: null,
    });
  });

  test('off without a word where the module is off or absent', async () => {
    assert.deepEqual(await probeAppArmor(await host('N', true, true)), {
      enabled: false,
      defaultProfile: null,
    });
    const absent = { ...(await host('Y', true, true)), enabledFile: '/nonexistent/enabled' };
    assert.deepEqual(await probeAppArmor(absent), { enabled: false, defaultProfile: null });
  });

  test('off, saying why, with the module on but securityfs or apparmor_parser missing', async () => {
    const unmounted = await probeAppArmor(await host('Y', false, true));
    assert.equal(unmounted.enabled, false);
    assert.match(unmounted.reason ?? '', /securityfs is not mounted/);
    const noParser = await probeAppArmor(await host('Y', true, false));
    assert.equal(noParser.enabled, false);
    assert.match(noParser.reason ?? '', /apparmor_parser is not installed/);
  });
});

describe('apparmorProfile', () => {
  const runtimeDefault: SecurityProfile = { kind: 'RuntimeDefault' };
  const unconfined: SecurityProfile = { kind: 'Unconfined' };
  const localhost: SecurityProfile = { kind: 'Localhost', path: 'my-profile' };
  const off = { enabled: false, defaultProfile: null };
  const on = { enabled: true, defaultProfile: 'berth-default' };

  test('without AppArmor: RuntimeDefault and Unconfined get none, a named profile is refused', () => {
    assert.equal(apparmorProfile(runtimeDefault, off), null);
    assert.equal(apparmorProfile(unconfined, off), null);
    assert.throws(() => apparmorProfile(localhost, off), {
      name: 'InvalidArgumentError',
      message: /apparmor\.localhost_ref.*AppArmor is not enabled on this host/,
    });
  });

  test("with AppArmor: the named profile is applied, RuntimeDefault is berth's default, Unconfined none", () => {
    assert.equal(apparmorProfile(localhost, on), 'my-profile');
    assert.equal(apparmorProfile(runtimeDefault, on), 'berth-default');
    assert.equal(apparmorProfile(unconfined, on), null);
  });

  test('with AppArmor but no default profile loaded, RuntimeDefault is refused, never unconfined', () => {
    assert.throws(() => apparmorProfile(runtimeDefault, { enabled: true, defaultProfile: null }), {
      name: 'FailedPreconditionError',
      message: /default profile is not loaded/,
    });
  });
});

describe('the loaded profiles list', () => {
  test('a line is "name (mode)"; a name may hold spaces and parentheses', () => {
    assert.equal(profileNameOf('berth-default (enforce)'), 'berth-default');
    assert.equal(profileNameOf('/usr/bin/man (complain)'), '/usr/bin/man');
    assert.equal(profileNameOf('a b (x) (unconfined)'), 'a b (x)');
    assert.equal(profileNameOf('runc//child (kill)'), 'runc//child');
    assert.equal(profileNameOf(''), null);
    assert.equal(profileNameOf('no-mode'), null);
  });
});

describe("berth's default profile text", () => {
  const text = defaultAppArmorProfile();

  test('is one profile under its name, with the ABI pinned', () => {
    assert.equal(DEFAULT_APPARMOR_PROFILE, 'berth-default');
    assert.match(text, /^abi <abi\/3\.0>,$/m);
    assert.match(text, /^profile berth-default flags=\(attach_disconnected,mediate_deleted\) \{$/m);
    assert.equal(text.match(/^profile /gm)?.length, 1);
    assert.ok(text.trimEnd().endsWith('}'));
    assert.equal(text.includes('#include'), false, 'no include: the text is all of it');
  });

  test('denies what reaches past the container', () => {
    for (const rule of [
      'deny mount,',
      'deny umount,',
      'deny /proc/* wl,',
      'deny /proc/[^0-9]*/** wl,',
      'deny /proc/{kcore,kmsg,sysrq-trigger} rwlkx,',
      'deny /sys/firmware/** rwlkx,',
    ]) {
      assert.ok(text.includes(`  ${rule}\n`), rule);
    }
    assert.match(text, /^ {2}signal \(send, receive\) peer=berth-default,$/m);
    assert.match(text, /^ {2}ptrace \(trace, read, tracedby, readby\) peer=berth-default,$/m);
    assert.match(text, /^ {2}signal \(receive\) peer=unconfined,$/m);
    assert.doesNotMatch(text, /signal \(send[^)]*\) peer=unconfined/, 'no signals out of the container');
  });
});

/** A container's spec input as src/container/prepare.ts makes it from the probed `own` process. */
function specInput(spec: ContainerSpec, own: OwnProcess): ContainerSpecInput {
  return {
    containerId: 'c1',
    sandboxId: 's1',
    spec,
    sandbox: sandboxSpec(),
    image: { name: 'img', config: {} },
    rootfsPath: '/rootfs',
    user: { uid: 0, gid: 0, additionalGids: [] },
    podNamespaces: { network: null, ipc: null, uts: null, pid: null },
    targetPid: null,
    sandboxFiles: { resolvConf: '', hostname: '', hosts: '' },
    cgroupsPath: '/kubepods/c1',
    cgroupNamespace: false,
    oomScoreAdj: clampOomScoreAdj(-998, own.oomScoreAdj),
    seccomp: null,
    apparmorProfile: null,
    devices: [],
    deviceRules: [],
    mounts: [],
    capabilities: containerCapabilities(spec.security, own.capabilities),
  };
}
