/**
 * The network a running berthd calls ready, as the CNI conf dir and the plugin bin dirs change under
 * it: berthd caches what it read, and every change must still apply without a restart. A real
 * berthd over its CRI socket with the test bridge config. Needs root; sends no traffic.
 */
import assert from 'node:assert/strict';
import { chmod, copyFile, mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { useDaemon, type TestDaemon } from '../harness/daemon.js';
import { bridgePlugin } from '../harness/network.js';
import { runPodSandbox } from '../harness/pods.js';
import { rootSkip as skip } from '../harness/skip.js';

/** A plugin type no machine has: it exists only once the test installs it. */
const LATE_PLUGIN = 'berth-late-plugin';
/** Any executable will do for readiness, which only looks the binary up. */
const SOME_PLUGIN = '/usr/lib/cni/loopback';

interface NetworkCondition {
  status: boolean;
  reason: string;
  message: string;
}

async function networkCondition(d: TestDaemon): Promise<NetworkCondition | undefined> {
  const res = await d.cri.call<{ status: { conditions: (NetworkCondition & { type: string })[] } }>(
    'Status',
    {},
  );
  return res.status.conditions.find((c) => c.type === 'NetworkReady');
}

async function assertNotReadyBecause(d: TestDaemon, ...words: string[]): Promise<void> {
  const network = await networkCondition(d);
  assert.equal(network?.status, false, 'NetworkReady is false');
  for (const word of words) assert.ok(network?.message.includes(word), `"${word}" in: ${network?.message}`);
}

async function assertReady(d: TestDaemon, why: string): Promise<void> {
  assert.equal((await networkCondition(d))?.status, true, why);
}

describe('network readiness follows the CNI dirs of a running berthd', { skip, timeout: 120_000 }, () => {
  // Not there when berthd starts: a bin dir may be made by a CNI daemonset later.
  let lateBinDir = '';
  const daemon = useDaemon(async () => {
    lateBinDir = join('/run', `berth-test-late-bin-${process.pid}`);
    await rm(lateBinDir, { recursive: true, force: true });
    return { extraArgs: ['--cni-bin-dir', lateBinDir] };
  });

  /** The test bridge with LATE_PLUGIN chained after it, as the conf dir's only network. */
  async function writeConfigNeedingLatePlugin(d: TestDaemon): Promise<string> {
    await d.writeBridgeConfig([{ type: LATE_PLUGIN }]);
    return join(d.cniConfDir, '10-test.conflist');
  }

  test('a plugin binary installed after start, in a bin dir made after start, applies at once', async (t) => {
    const d = daemon();
    t.after(async () => {
      await d.writeCniConfig('bridge');
      await rm(lateBinDir, { recursive: true, force: true });
    });
    await assertReady(d, 'the test bridge is ready');
    await writeConfigNeedingLatePlugin(d);
    await assertNotReadyBecause(d, '10-test.conflist', LATE_PLUGIN);

    await mkdir(lateBinDir, { recursive: true });
    await copyFile(SOME_PLUGIN, join(lateBinDir, LATE_PLUGIN));
    await assertReady(d, 'the installed plugin makes the network ready');

    // Ready now, and cached as such: losing the binary again must still be seen.
    await rm(join(lateBinDir, LATE_PLUGIN));
    await assertNotReadyBecause(d, LATE_PLUGIN);
    await rejectsNetwork(d, 'late-plugin-gone');

    // Installed without the execute bit, then given it: only the second counts.
    await copyFile(SOME_PLUGIN, join(lateBinDir, LATE_PLUGIN));
    await chmod(join(lateBinDir, LATE_PLUGIN), 0o644);
    await assertNotReadyBecause(d, LATE_PLUGIN);
    await chmod(join(lateBinDir, LATE_PLUGIN), 0o755);
    await assertReady(d, 'an executable plugin makes the network ready');
  });

  test('a ready config edited in place, or replaced by an earlier file, applies at once', async (t) => {
    const d = daemon();
    t.after(() => d.writeCniConfig('bridge'));
    await assertReady(d, 'the test bridge is ready');
    const conflist = join(d.cniConfDir, '10-test.conflist');
    // The same file rewritten: its dir entry does not change, its content does.
    await writeFile(
      conflist,
      JSON.stringify({
        cniVersion: '1.0.0',
        name: d.networkName,
        plugins: [bridgePlugin(d.network), { type: 'berth-no-such-plugin' }],
      }),
    );
    await assertNotReadyBecause(d, 'berth-no-such-plugin');
    await d.writeCniConfig('bridge');
    await assertReady(d, 'the rewritten config is ready again');

    // A file sorting first takes over as the default network.
    await writeFile(
      join(d.cniConfDir, '00-first.conflist'),
      JSON.stringify({ cniVersion: '1.0.0', name: 'first', plugins: [{ type: 'berth-first-missing' }] }),
    );
    await assertNotReadyBecause(d, '00-first.conflist', 'berth-first-missing');
    await rm(join(d.cniConfDir, '00-first.conflist'));
    await assertReady(d, 'with the earlier file gone, the test bridge is the default again');
  });
});

async function rejectsNetwork(d: TestDaemon, name: string): Promise<void> {
  await assert.rejects(runPodSandbox(d.cri, d.pod(name)), /network is not ready/);
}
