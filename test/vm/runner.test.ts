/**
 * scripts/vm/run.sh, the VM runner itself, on the host: a job's exit code comes back, a guest
 * that panics ends the run at once instead of idling until the timeout, and a boot that fails
 * before the job starts is tried again. scripts/vm/suites.sh runs this file after it has the image.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { rootSkip } from '../harness/skip.js';
import { runProgram } from '../harness/streaming.js';

const RUN_SH = fileURLToPath(new URL('../../../scripts/vm/run.sh', import.meta.url));
// Bounds for a hang, far above the ~25 s an emulated boot takes here.
const RUN_TIMEOUT_S = 900;
const TEST_BOUND_MS = 2 * RUN_TIMEOUT_S * 1000;

const skip = rootSkip || (process.env.BERTH_VM_SUITES === 'skip' ? 'BERTH_VM_SUITES=skip' : false);

describe('the VM runner', { skip, timeout: 4 * TEST_BOUND_MS }, () => {
  let dir = '';
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-vm-runner-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  async function run(name: string, body: string, env: Record<string, string> = {}) {
    const script = join(dir, `${name}.sh`);
    writeFileSync(script, body);
    return runProgram('bash', [RUN_SH, script, String(RUN_TIMEOUT_S)], {
      env: { ...process.env, ...env },
      timeoutMs: TEST_BOUND_MS,
    });
  }

  it("returns the job's exit code and streams its output", async () => {
    const r = await run('exit7', 'echo "inside $(stat -fc %T /sys/fs/cgroup)"\nexit 7\n');
    assert.equal(r.code, 7, r.stderr);
    assert.match(r.stdout, /inside cgroup2fs/);
    assert.match(r.stderr, /boot 1 of 3/);
  });

  it('ends the run as soon as the guest kernel panics, with its console', async () => {
    const r = await run('panic', 'echo c >/proc/sysrq-trigger\nsleep 600\n');
    assert.equal(r.code, 124, r.stderr);
    assert.match(r.stderr, /the VM stopped without the job's exit code/);
    assert.match(r.stderr, /sysrq_handle_crash/);
    // Started, so never booted again: a second run of a job could repeat what it did.
    assert.doesNotMatch(r.stderr, /boot 2 of/);
  });

  it('boots again when the guest fails before the job starts, then gives up', async () => {
    // An init that exits at once: the kernel panics ("Attempted to kill init!") before the job.
    const r = await run('noinit', 'echo never\n', {
      BERTH_VM_APPEND: 'init=/bin/false',
      BERTH_VM_BOOT_TRIES: '2',
      BERTH_VM_BOOT_BOUND_S: '240',
    });
    assert.equal(r.code, 124, r.stderr);
    assert.match(r.stderr, /boot 1 of 2 did not start the job/);
    assert.match(r.stderr, /boot 2 of 2 did not start the job/);
    assert.match(r.stderr, /no boot started the job; giving up/);
    // Each boot ended by itself, not by the boot bound.
    assert.doesNotMatch(r.stderr, /had not started/);
    assert.doesNotMatch(r.stdout, /never/);
  });

  it('stops a boot that has not started the job within the boot bound', async () => {
    const r = await run('slow', 'echo never\n', { BERTH_VM_BOOT_TRIES: '1', BERTH_VM_BOOT_BOUND_S: '1' });
    assert.equal(r.code, 124, r.stderr);
    assert.match(r.stderr, /had not started 1 s into the boot; stopping the VM/);
    assert.match(r.stderr, /no boot started the job; giving up/);
  });
});
