/**
 * The CRI validation suite's AppArmor specs (critest 1.34), on a node whose kernel enforces
 * AppArmor: the Debian 13 VM of the VM suites. The whole suite runs on the host (critest.test.ts),
 * where critest skips these as AppArmor is off. critest loads and unloads its test profiles with
 * `sudo apparmor_parser`; the VM has no sudo and the test runs as root already, so critest finds a
 * `sudo` on its PATH that runs the command as it is.
 */
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  assertCritestPassed,
  critestRegistryArgs,
  critestSkip,
  pushCritestBusybox,
  runCritest,
} from '../harness/critest.js';
import { TestDaemon } from '../harness/daemon.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { appArmorEnabled, registrySkip } from '../harness/skip.js';
import { BOUND_SCALE } from '../harness/bounds.js';

/** A hang bound; the specs take about a minute and a half in the emulated VM. */
const CRITEST_TIMEOUT_MS = 600_000 * BOUND_SCALE;
/** critest 1.34's AppArmor specs: runtime/default, unconfined, a Localhost profile that denies, and more. */
const APPARMOR_SPECS = 9;

const appArmorSkip = !appArmorEnabled
  ? 'AppArmor is not enabled on this host (the VM suites run this file)'
  : !existsSync('/sbin/apparmor_parser')
    ? 'no apparmor_parser to load critest profiles with'
    : false;

describe(
  'critest AppArmor specs',
  { skip: registrySkip || critestSkip || appArmorSkip, timeout: CRITEST_TIMEOUT_MS + 300_000 },
  () => {
    let registry: TestRegistry;
    let daemon: TestDaemon;
    let dir = '';

    before(async () => {
      registry = await startRegistry();
      await pushCritestBusybox(registry);
      dir = await mkdtemp(join(tmpdir(), 'berth-critest-aa-'));
      await writeFile(join(dir, 'sudo'), '#!/bin/sh\nexec "$@"\n');
      await chmod(join(dir, 'sudo'), 0o755);
      daemon = await TestDaemon.create({
        cni: 'bridge',
        extraArgs: await critestRegistryArgs(registry, dir),
      });
    });

    after(async () => {
      try {
        await daemon?.destroy();
      } finally {
        await registry?.stop();
        if (dir) await rm(dir, { recursive: true, force: true });
      }
    });

    it('passes every AppArmor spec', async () => {
      const env = { ...process.env, PATH: `${dir}:${process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'}` };
      const outcome = await runCritest(daemon, 'AppArmor', CRITEST_TIMEOUT_MS, null, env);
      console.log(
        `critest AppArmor: ${outcome.passed} passed, ${outcome.failed} failed, ${outcome.skipped} skipped`,
      );
      assertCritestPassed(outcome, APPARMOR_SPECS);
    });
  },
);
