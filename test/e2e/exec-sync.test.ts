/** ExecSync through real runc exec, in a busybox container built by hand; needs root. */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { EXEC_SYNC_OUTPUT_CAP, execSync, type ExecSyncOptions } from '../../src/runtime/exec-sync.js';
import { Runc } from '../../src/runtime/runc.js';
import type { Process, Spec } from '../../src/oci/spec.js';
import { runBusyboxContainer, waitForRuncStatus } from '../harness/bundles.js';
import { removeCgroupTree } from '../harness/cgroups.js';

const isRoot = process.getuid?.() === 0;
const suffix = randomBytes(4).toString('hex');
const base = `/run/berth-test-exec-${suffix}`;
const CGROUP_PARENT = 'berth-test-exec';
const id = `exec-${suffix}`;
const stoppedId = `exec-${suffix}-stopped`;
const T = 10_000;
const runc = new Runc({ binary: 'runc', root: join(base, 'runc'), systemdCgroup: false, timeoutMs: T });
const tmpDir = join(base, 'tmp');
const APPLETS = [
  'sh',
  'echo',
  'sleep',
  'cat',
  'id',
  'head',
  'dd',
  'yes',
  'true',
  'false',
  'kill',
  'ps',
  'pwd',
];

let spec: Spec;

/** A busybox container running `args` in a cgroup under our parent. */
function startContainer(cid: string, args: string[]): Promise<Spec> {
  const cgroupsPath = `/${CGROUP_PARENT}/${cid}`;
  return runBusyboxContainer(runc, cid, join(base, 'bundles', cid), { applets: APPLETS, args, cgroupsPath });
}

function proc(args: string[], over: Partial<Process> = {}): Process {
  assert.ok(spec.process);
  return { ...spec.process, args, ...over };
}

const opts = (o: Partial<ExecSyncOptions> = {}): ExecSyncOptions => ({
  timeoutMs: 0,
  maxOutputBytes: EXEC_SYNC_OUTPUT_CAP,
  tmpDir,
  ...o,
});

describe('execSync', { skip: isRoot ? false : 'needs root' }, () => {
  before(async () => {
    await mkdir(tmpDir, { recursive: true });
    spec = await startContainer(id, ['/bin/sleep', '1000']);
  });

  after(async () => {
    for (const c of await runc.list().catch(() => [])) {
      await runc.delete(c.id, { force: true }).catch(() => undefined);
    }
    await removeCgroupTree(CGROUP_PARENT);
    await rm(base, { recursive: true, force: true });
  });

  test('stdout and stderr come back separately, exit code 0', async () => {
    const r = await execSync(runc, id, proc(['/bin/sh', '-c', 'echo out; echo err >&2']), opts());
    assert.equal(r.stdout.toString(), 'out\n');
    assert.equal(r.stderr.toString(), 'err\n');
    assert.equal(r.exitCode, 0);
    assert.equal(r.timedOut, false);
    assert.deepEqual(await readdir(tmpDir), [], 'temp files removed');
  });

  test('a non-zero exit code is a result, not an error', async () => {
    const r = await execSync(runc, id, proc(['/bin/sh', '-c', 'echo bye; exit 7']), opts());
    assert.equal(r.exitCode, 7);
    assert.equal(r.stdout.toString(), 'bye\n');
    const r255 = await execSync(runc, id, proc(['/bin/sh', '-c', 'exit 255']), opts());
    assert.equal(r255.exitCode, 255, "the command's 255 is not mistaken for runc's");
  });

  test('death by signal reads as 128+n', async () => {
    const r = await execSync(runc, id, proc(['/bin/sh', '-c', 'kill -9 $$']), opts());
    assert.equal(r.exitCode, 137);
    assert.equal(r.timedOut, false);
  });

  test('output past the cap is cut to exactly the cap, promptly', async () => {
    const started = Date.now();
    const r = await execSync(
      runc,
      id,
      proc(['/bin/sh', '-c', 'head -c 4194304 /dev/zero; head -c 100000 /dev/zero >&2; echo done >&2']),
      opts({ maxOutputBytes: 16384 }),
    );
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout.length, 16384);
    assert.equal(r.stderr.length, 16384);
    assert.ok(r.stdout.every((b) => b === 0));
    // No timeout here: a writer blocked on a pipe nobody drains would hang for good.
    assert.ok(Date.now() - started < 30_000, `took ${Date.now() - started} ms`);
    const none = await execSync(runc, id, proc(['/bin/echo', 'hidden']), opts({ maxOutputBytes: 0 }));
    assert.equal(none.stdout.length, 0);
  });

  test('a timeout kills the process and returns what was collected', async () => {
    const started = Date.now();
    const r = await execSync(runc, id, proc(['/bin/sleep', '30']), opts({ timeoutMs: 500 }));
    const took = Date.now() - started;
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, 137);
    // Well short of the 30 s the command would sleep.
    assert.ok(took >= 500 && took < 20_000, `took ${took} ms`);
    const ps = await execSync(runc, id, proc(['/bin/ps', '-o', 'pid,args']), opts());
    assert.match(ps.stdout.toString(), /sleep 1000/, 'ps sees the container');
    assert.doesNotMatch(ps.stdout.toString(), /sleep 30/, 'the timed-out process is gone');
    assert.deepEqual(await readdir(tmpDir), []);
  });

  test('a timed-out command whose child holds its output still returns promptly', async () => {
    // Only the exec'd shell is killed (as containerd does); its orphaned child keeps runc's pipes
    // open, so runc itself has to be killed after its grace period.
    const started = Date.now();
    const r = await execSync(
      runc,
      id,
      proc(['/bin/sh', '-c', 'echo started; sleep 31; echo never']),
      opts({ timeoutMs: 500 }),
    );
    assert.equal(r.timedOut, true);
    assert.equal(r.stdout.toString(), 'started\n');
    // Well short of the 31 s the child would hold the pipes.
    assert.ok(Date.now() - started < 20_000, `took ${Date.now() - started} ms`);
  });

  test('env, user and cwd come from the process', async () => {
    const r = await execSync(
      runc,
      id,
      proc(['/bin/sh', '-c', 'id -u; id -g; echo "$FOO"; pwd'], {
        env: ['PATH=/bin', 'FOO=bar baz'],
        user: { uid: 1234, gid: 5678 },
        cwd: '/tmp',
      }),
      opts(),
    );
    assert.equal(r.stdout.toString(), '1234\n5678\nbar baz\n/tmp\n');
    assert.equal(r.exitCode, 0);
  });

  test('a command that does not exist exits 127, one that may not run 126, with the reason on stderr', async () => {
    const missing = await execSync(runc, id, proc(['/nope']), opts());
    assert.equal(missing.exitCode, 127);
    assert.match(missing.stderr.toString(), /\/nope.*no such file or directory/);
    const denied = await execSync(runc, id, proc(['/tmp']), opts());
    assert.equal(denied.exitCode, 126);
    assert.match(denied.stderr.toString(), /permission denied/);
  });

  test('a stopped or unknown container is FailedPrecondition', async () => {
    await startContainer(stoppedId, ['/bin/true']);
    await waitForRuncStatus(runc, stoppedId, 'stopped');
    await assert.rejects(execSync(runc, stoppedId, proc(['/bin/true']), opts()), (err: Error) => {
      assert.equal(err.name, 'FailedPreconditionError');
      assert.match(err.message, /cannot exec in a stopped container/);
      return true;
    });
    await assert.rejects(execSync(runc, `${id}-missing`, proc(['/bin/true']), opts()), {
      name: 'FailedPreconditionError',
    });
    assert.deepEqual(await readdir(tmpDir), []);
  });

  test('bad arguments are refused before runc runs', async () => {
    await assert.rejects(execSync(runc, id, proc([]), opts()), { name: 'InvalidArgumentError' });
    await assert.rejects(execSync(runc, id, proc(['/bin/true']), opts({ maxOutputBytes: -1 })), {
      name: 'InvalidArgumentError',
    });
  });
});
