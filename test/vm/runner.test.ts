/**
 * scripts/vm/run.sh, the VM runner itself, on the host: a job's exit code and output come back, a guest
 * that panics ends the run at once instead of idling until the timeout, and a boot that fails
 * before the job starts is tried again; and its file runner in the guest (scripts/vm/guest/files.sh)
 * kills a test file that outlives its bound, says what hung and runs the next file.
 * scripts/vm/suites.sh runs this file after it has the image.
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
/**
 * A file's bound in the file runner's test: far above the 30-odd s an emulated node took to run a
 * tiny file on a loaded host.
 */
const FILE_BOUND_S = 90;
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

  // One run for three proofs (an emulated boot is over a minute): the job's exit code and output
  // come back; a guest that crashes mid-run is booted once more and the file runner goes on where
  // it was; and the file runner deals with a file that hangs.
  it("returns the job's exit code and streams its output; after a guest crash the file runner goes on in a second boot; a file that outlives its bound is killed, says what hung, is cleaned up after, and the next runs", async () => {
    // The guest crashes in the first file, once: the second boot runs it again, and it passes.
    const crashes = `
import { existsSync, writeFileSync } from 'node:fs';
import { it } from 'node:test';
it('crashes the guest in its first boot', () => {
  if (existsSync('/mnt/job/crashed')) return;
  writeFileSync('/mnt/job/crashed', '');
  writeFileSync('/proc/sysrq-trigger', 'c');
});
`;
    // The first file leaves what a hung e2e file would: a detached process naming a test daemon's
    // dir (as conmon does), a mount below it, a berthd log; then it hangs in its second test.
    const hangs = `
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { describe, it } from 'node:test';
describe('a stuck suite', () => {
  it('passes first', () => {
    mkdirSync('/run/berth-test-runner1/m', { recursive: true });
    execFileSync('mount', ['-t', 'tmpfs', 'berth-test', '/run/berth-test-runner1/m']);
    const args = ['-e', 'setInterval(() => {}, 1000)', '/run/berth-test-runner1'];
    spawn(process.execPath, args, { detached: true, stdio: 'ignore' }).unref();
    writeFileSync(process.env.BERTH_TEST_DAEMON_LOG_DIR + '/berthd-runner1.log', 'a line of berthd\\n');
  });
  it('waits forever', () => new Promise(() => setInterval(() => {}, 1000)));
});
`;
    const next = `
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { it } from 'node:test';
it('runs after the killed file, with its leftovers gone', () => {
  const named = readdirSync('/proc').filter((p) => /^[0-9]+$/.test(p)).filter((pid) => {
    try { return readFileSync('/proc/' + pid + '/cmdline', 'utf8').includes('/run/berth-test-runner1'); }
    catch { return false; }
  });
  assert.deepEqual(named, []);
  assert.doesNotMatch(readFileSync('/proc/self/mountinfo', 'utf8'), /berth-test-runner1/);
  assert.equal(existsSync('/run/berth-test-runner1'), false);
});
`;
    const job = [
      'echo "inside $(stat -fc %T /sys/fs/cgroup)"',
      `cat >/tmp/crashes.test.mjs <<'EOF'${crashes}EOF`,
      `cat >/tmp/hangs.test.mjs <<'EOF'${hangs}EOF`,
      `cat >/tmp/next.test.mjs <<'EOF'${next}EOF`,
      'cp scripts/vm/guest/files.sh /tmp/files.sh',
      `BERTH_VM_FILES_STATE=/mnt/job/files-state BERTH_VM_FILE_BOUND_S=${FILE_BOUND_S} bash /tmp/files.sh /tmp/crashes.test.mjs /tmp/hangs.test.mjs /tmp/next.test.mjs`,
      '',
    ].join('\n');
    const r = await run('files', job);
    const out = r.stdout;
    assert.equal(r.code, 1, `${out}\n${r.stderr}`);
    assert.match(out, /inside cgroup2fs/);
    assert.match(r.stderr, /boot 1 of 3/);
    assert.match(r.stderr, /sysrq_handle_crash/);
    assert.match(r.stderr, /the job recorded how far it got: booting once more/);
    assert.match(r.stderr, /boot 2 of 3/);
    assert.match(out, /✔ crashes the guest in its first boot/);
    // The second boot's output only follows the first's: nothing of it twice.
    assert.equal(out.match(/inside cgroup2fs/g)?.length, 2, out);
    assert.equal(out.match(/file 1 of 3: \/tmp\/crashes.test.mjs/g)?.length, 2, out);
    assert.match(
      out,
      new RegExp(
        `KILLED: /tmp/hangs.test.mjs did not end within its ${FILE_BOUND_S} s bound; it was running: a stuck suite > waits forever`,
      ),
      out,
    );
    assert.match(out, /the last lines of berthd-runner1, which this file started:\na line of berthd\n/);
    assert.match(out, /cleaned up after it: killed 1 test daemon processes, unmounted 1 mounts/);
    assert.match(out, /✔ runs after the killed file, with its leftovers gone/);
    assert.match(out, /\/tmp\/next.test.mjs passed in/);
    assert.match(out, /1 of 3 files failed: \/tmp\/hangs.test.mjs/);
    // The closing lines count every file: the crashing one's pass in its second boot, the killed
    // one's pass and its kill, the next one's pass.
    assert.match(out, /# tests 4\n# suites 0\n# pass 3\n# fail 1\n[^]*\n3 passed, 1 failed\n$/);
  });
});
