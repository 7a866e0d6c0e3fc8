/**
 * `crictl info` of cri-tools 1.36 against a real berthd: it prints StatusResponse's `status`,
 * `runtimeHandlers` and `features` under those keys, then lays the verbose info map over them, so
 * an info key of the same name hides what the runtime reports in the response itself.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { useDaemon } from '../harness/daemon.js';
import { rootSkip } from '../harness/skip.js';
import { runProgram } from '../harness/streaming.js';
import { sharedTool, toolSkip } from '../harness/tools.js';
import { BOUND_SCALE } from '../harness/bounds.js';

const CRICTL_136 = sharedTool('CRICTL_136', 'crictl-1.36');
const skip = rootSkip || toolSkip(CRICTL_136, 'CRICTL_136', 'crictl-1.36');
if (skip) console.log(`# crictl info: skipped, ${skip}`);

/** The keys crictl 1.36 fills from the response's own fields. */
const RESPONSE_KEYS = ['status', 'runtimeHandlers', 'features'];

describe('crictl 1.36 info', { skip, timeout: 120_000 * BOUND_SCALE }, () => {
  const daemon = useDaemon();

  test("shows the response's features, and no verbose info key hides a response field", async () => {
    const d = daemon();
    const { code, stdout, stderr } = await runProgram(CRICTL_136 ?? '', [
      '--runtime-endpoint',
      `unix://${d.socket}`,
      '--timeout',
      '20s',
      'info',
    ]);
    assert.equal(code, 0, stderr);
    const shown = JSON.parse(stdout) as Record<string, unknown>;
    const features = shown.features as Record<string, unknown> | undefined;
    assert.equal(features?.supplemental_groups_policy, true, stdout);
    const info = await d.cri.call<{ info: Record<string, string> }>('Status', { verbose: true });
    const colliding = Object.keys(info.info).filter((key) => RESPONSE_KEYS.includes(key));
    assert.deepEqual(colliding, [], 'verbose info keys that crictl overwrites the response with');
    assert.ok(info.info.probedFeatures, 'verbose info has the probed features');
  });
});
