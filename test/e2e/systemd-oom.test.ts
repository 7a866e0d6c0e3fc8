/**
 * What the systemd driver learns from systemd about an OOM kill conmon may miss (host/
 * systemd.ts), against the node's own systemd: a scope with OOMPolicy=stop whose process the
 * OOM killer takes is found failed with Result=oom-kill; a scope whose process was SIGKILLed
 * otherwise, or one systemd does not have, is not. Scopes made with systemd-run, no berthd: cheap
 * enough for every VM run. Needs root, systemd 253 or later and cgroup v2.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { SCOPE_OOM_POLICY_SINCE, scopeOomKilled, systemdVersion } from '../../src/host/systemd.js';
import { hostRunsSystemd } from '../../src/config/load.js';
import { run } from '../../src/exec.js';
import { ANSWER_BOUND_MS } from '../harness/bounds.js';
import { V2_ONLY } from '../harness/cgroup-drivers.js';
import { rootSkip } from '../harness/skip.js';

const version = hostRunsSystemd() ? await systemdVersion(ANSWER_BOUND_MS) : null;
const skip =
  rootSkip ||
  V2_ONLY ||
  (version === null
    ? 'needs a host running systemd'
    : version < SCOPE_OOM_POLICY_SINCE
      ? `needs systemd ${SCOPE_OOM_POLICY_SINCE} or later for OOMPolicy on scopes; this host has ${version}`
      : false);

describe('OOM kills as systemd records them', { skip }, () => {
  const units: string[] = [];

  /** Runs `argv` in a new scope with OOMPolicy=stop and 16 MiB of memory, until it ends. */
  async function inScope(argv: string[]): Promise<string> {
    const unit = `berth-test-oom-${randomBytes(4).toString('hex')}.scope`;
    units.push(unit);
    // prettier-ignore
    const props = ['-p', 'OOMPolicy=stop', '-p', 'MemoryMax=16M', '-p', 'MemorySwapMax=0'];
    // It fails as its process does: by a signal.
    await run('systemd-run', ['--scope', '--quiet', `--unit=${unit}`, ...props, '--', ...argv], {
      timeoutMs: ANSWER_BOUND_MS,
    }).catch(() => undefined);
    return unit;
  }

  after(async () => {
    for (const unit of units) {
      await run('systemctl', ['reset-failed', unit], { timeoutMs: ANSWER_BOUND_MS }).catch(() => undefined);
    }
  });

  test('a scope the OOM killer emptied failed with oom-kill', async () => {
    const unit = await inScope(['tail', '/dev/zero']);
    assert.equal(await scopeOomKilled(unit, ANSWER_BOUND_MS), true);
  });

  test('a scope emptied by another SIGKILL, or one systemd does not have, is no OOM kill', async () => {
    const unit = await inScope(['sh', '-c', 'kill -9 $$']);
    assert.equal(await scopeOomKilled(unit, ANSWER_BOUND_MS), false);
    assert.equal(await scopeOomKilled('berth-test-oom-none.scope', ANSWER_BOUND_MS), false);
  });
});
