/**
 * A pod whose network never came up can always be removed: berthd journals each CNI plugin before
 * its ADD runs and DELs only those. A plugin binary vanishes mid-ADD, deterministically: the
 * berth-test-remove fixture deletes it during its own ADD, after the readiness check passed. Real
 * bridge, host-local and runc; needs root.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { copyFile, mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import { FIXTURES, podConfig, TestDaemon } from '../harness/daemon.js';
import { rejectsGrpc, rejectsWith } from '../harness/grpc.js';
import { runPodSandbox } from '../harness/pods.js';
import { rootSkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 180_000;
const VICTIM = 'berth-test-victim';

describe('removing a pod whose network never came up', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  // A bin dir of the test's own, holding the plugin that vanishes: a pass-through that logs its calls.
  const base = `/run/berth-test-netrm-${randomBytes(4).toString('hex')}`;
  const binDir = join(base, 'bin');
  const victimBinary = join(binDir, VICTIM);
  const callLog = join(base, 'calls.log');
  let daemon: TestDaemon;

  const victim = { type: VICTIM, failDelFile: join(base, 'never-there'), callLogFile: callLog };
  const remover = (failAdd: boolean) => ({
    type: 'berth-test-remove',
    removeFile: victimBinary,
    ...(failAdd ? { failAdd: 'yes' } : {}),
  });

  async function installVictim(): Promise<void> {
    await copyFile(join(FIXTURES, 'cni', 'berth-test-flaky'), victimBinary);
  }

  async function victimCalls(): Promise<string[]> {
    const text = await readFile(callLog, 'utf8').catch(() => '');
    return text
      .split('\n')
      .filter(Boolean)
      .map((line) => line.split(' ')[0] ?? '');
  }

  async function pods(): Promise<string[]> {
    const res = await daemon.cri.call<{ items: { id: string }[] }>('ListPodSandbox', {});
    return res.items.map((item) => item.id);
  }

  /** Nothing of any pod is left: no row, netns, lease, runc container or sandbox dir. */
  async function assertNothingLeft(): Promise<void> {
    assert.deepEqual(await pods(), []);
    assert.deepEqual(await daemon.netnsFiles(), []);
    assert.deepEqual(await daemon.leasedIps(), []);
    assert.deepEqual(await daemon.runcContainers(), []);
    assert.deepEqual(await daemon.sandboxDirs(), []);
  }

  before(async () => {
    await mkdir(binDir, { recursive: true });
    await installVictim();
    daemon = await TestDaemon.create({ extraArgs: ['--cni-bin-dir', binDir] });
  });

  afterEach(async () => {
    await rm(callLog, { force: true });
    await installVictim();
  });

  after(async () => {
    await daemon?.destroy();
    await rm(base, { recursive: true, force: true });
  });

  it('needs no DEL of a plugin whose ADD never ran: the failed start leaves nothing to remove', async () => {
    await daemon.writeBridgeConfig([remover(false), victim]);
    const st = await daemon.cri.call<{ status: { conditions: { type: string; status: boolean }[] } }>(
      'Status',
      {},
    );
    assert.ok(
      st.status.conditions.some((c) => c.type === 'NetworkReady' && c.status),
      'network not ready',
    );

    await rejectsWith(
      runPodSandbox(daemon.cri, podConfig('netrm-never-ran')),
      status.UNKNOWN,
      `plugin binary "${VICTIM}" not found`,
    );
    // The victim never ran, so it was never asked to DEL either.
    assert.deepEqual(await victimCalls(), []);
    for (const id of await pods()) await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id });
    await assertNothingLeft();
  });

  it('still DELs a plugin whose ADD ran: removal fails naming it while its binary is gone, then succeeds', async () => {
    await daemon.writeBridgeConfig([victim, remover(true)]);
    const err = await rejectsGrpc(runPodSandbox(daemon.cri, podConfig('netrm-ran')));
    assert.match(err.details, /berth-test-remove: ADD refused/);
    assert.deepEqual(await victimCalls(), ['ADD']);

    // The undo's DEL of the victim failed: the pod is kept, with its lease, for Remove to retry.
    const [id] = await pods();
    assert.ok(id, 'the pod whose undo failed is not listed');
    assert.equal((await daemon.leasedIps()).length, 1);
    const refused = await rejectsGrpc(daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id }));
    assert.match(refused.details, new RegExp(`plugin binary "${VICTIM}" not found`));
    assert.deepEqual(await pods(), [id]);

    await installVictim();
    await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id });
    assert.deepEqual(await victimCalls(), ['ADD', 'DEL']);
    await assertNothingLeft();
  });
});
