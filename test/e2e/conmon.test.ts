/** Real containers under real conmon and runc: exits, OOM kills, CRI log files. Needs root. */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readlink, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createLogger } from '../../src/log.js';
import {
  Conmon,
  MonitorError,
  type ConmonOptions,
  type MonitorCreateRequest,
} from '../../src/runtime/conmon.js';
import { MonitorCgroup } from '../../src/cgroups/monitor.js';
import { ExitWatcher, type ExitRecord } from '../../src/runtime/exits.js';
import { Runc } from '../../src/runtime/runc.js';
import type { Spec } from '../../src/oci/spec.js';
import { isRunning, processesMentioning, waitForExit } from '../../src/process/index.js';
import { runcDefaultSpec, writeBundle, writeBusyboxRootfs } from '../harness/bundles.js';
import { removeCgroupTree } from '../harness/cgroups.js';
import { parseCriLogLine, type CriLogEntry } from '../harness/cri-log.js';
import { exists } from '../harness/files.js';
import { waitFor } from '../harness/wait.js';

const suffix = randomBytes(4).toString('hex');
const base = `/run/berth-test-conmon-${suffix}`;
const rootfs = join(base, 'rootfs');
const cgroupParent = 'berth-test-conmon';
const T = 10_000;
const TOOLS = ['sh', 'echo', 'sleep', 'cat', 'head', 'tr', 'tail', 'yes', 'printf'];

const runc = new Runc({ binary: 'runc', root: join(base, 'runc'), systemdCgroup: false, timeoutMs: T });
const opts: ConmonOptions = {
  binary: 'conmon',
  runc,
  exitDir: join(base, 'exits'),
  socketDir: join(base, 's'),
  persistDir: join(base, 'persist'),
  timeoutMs: T,
  cgroup: new MonitorCgroup('berth-monitors', 'cgroupfs'),
};
const conmon = new Conmon(opts);
const exits = new ExitWatcher(opts.exitDir, createLogger('silent'), opts.persistDir);
/** Every report of the watcher, in order: each exit must come exactly once. */
const reported: ExitRecord[] = [];
/** `runc spec`'s defaults, which every bundle starts from. */
let template: Spec;

interface SpecEdits {
  args: string[];
  memoryLimit?: number;
  terminal?: boolean;
}

/** A bundle with `runc spec`'s defaults, edited for a non-terminal busybox process. */
async function makeBundle(id: string, edits: SpecEdits): Promise<string> {
  const spec = structuredClone(template);
  assert.ok(spec.process && spec.linux, 'runc spec wrote no process or linux section');
  spec.process.terminal = edits.terminal ?? false;
  spec.process.args = edits.args;
  spec.root = { path: rootfs, readonly: true };
  spec.linux.cgroupsPath = `/${cgroupParent}/${id}`;
  if (edits.memoryLimit !== undefined) {
    spec.linux.resources = {
      ...spec.linux.resources,
      memory: { limit: edits.memoryLimit, swap: edits.memoryLimit },
    };
  }
  return writeBundle(join(base, 'bundles', id), spec);
}

function request(id: string, bundleDir: string, logPath: string): MonitorCreateRequest {
  return { id, name: `test_${id}`, bundleDir, logPath, stdin: false, stdinOnce: false, tty: false };
}

function newId(tag: string): string {
  return `${tag}-${randomBytes(6).toString('hex')}`;
}

/** Creates and starts a container; returns what create returned. */
async function runContainer(id: string, edits: SpecEdits, logPath: string) {
  const bundle = await makeBundle(id, edits);
  const created = await conmon.create(request(id, bundle, logPath));
  await runc.start(id);
  return { bundle, created };
}

async function waitExit(id: string): Promise<ExitRecord> {
  const rec = await exits.wait(id, T);
  assert.ok(rec, `container ${id} did not exit within ${T} ms`);
  return rec;
}

async function logEntries(path: string): Promise<CriLogEntry[]> {
  const text = await readFile(path, 'utf8');
  assert.ok(text === '' || text.endsWith('\n'), 'every log record ends with a newline');
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => {
      const entry = parseCriLogLine(line);
      assert.ok(entry, `not a CRI log line: ${JSON.stringify(line.slice(0, 120))}`);
      return entry;
    });
}

/** Pids of live processes whose command line mentions our temp dir (conmon daemons among them). */
async function processesMentioningBase(): Promise<number[]> {
  const pids: number[] = [];
  for (const pid of await processesMentioning(base)) if (await isRunning(pid)) pids.push(pid);
  return pids;
}

/** Asserts that nothing of a failed create is left: container, conmon, exit and persist files. */
async function assertNothingLeft(id: string): Promise<void> {
  assert.equal(await runc.state(id), null, 'no runc container');
  assert.equal(await exists(join(opts.exitDir, id)), false, 'no exit file');
  assert.equal(await exists(join(opts.persistDir, id)), false, 'no persist dir');
  assert.equal(await exists(join(opts.socketDir, id)), false, 'no attach socket link');
  for (const pid of await processesMentioningBase()) {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    assert.ok(!cmdline.includes(id), `process ${pid} for ${id} still runs: ${cmdline.replaceAll('\0', ' ')}`);
  }
}

before(async () => {
  await writeBusyboxRootfs(rootfs, TOOLS);
  template = await runcDefaultSpec();
  await exits.start((rec) => reported.push(rec));
});

after(async () => {
  exits.close();
  for (const c of await runc.list().catch(() => [])) {
    await runc.delete(c.id, { force: true }).catch(() => undefined);
  }
  for (const pid of await processesMentioningBase()) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone meanwhile.
    }
    await waitForExit(pid, 5_000);
  }
  await rm(base, { recursive: true, force: true });
  await removeCgroupTree(cgroupParent);
});

test('prepareForCreate leaves this process in the cgroups it is in', async () => {
  const before = await readFile('/proc/self/cgroup', 'utf8');
  conmon.prepareForCreate();
  conmon.prepareForCreate();
  // Best effort and not awaited: give the no-op move time to land.
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(await readFile('/proc/self/cgroup', 'utf8'), before);
});

test('exit code, monitor files, and stdout/stderr lines in the CRI log', async () => {
  const id = newId('exit3');
  // kubelet makes the pod log directory; when it has not, the runtime must.
  const logPath = join(base, 'logs', 'pod_uid', 'c', '0.log');
  const before = BigInt(Date.now()) * 1_000_000n;
  const bundle = await makeBundle(id, { args: ['/bin/sh', '-c', 'echo hello; echo err >&2; exit 3'] });
  const created = await conmon.create(request(id, bundle, logPath));

  assert.ok(created.pid > 0 && created.monitorPid > 0);
  assert.equal((await runc.state(id))?.status, 'created', 'create only: runc start runs it');
  assert.equal(Number(await readFile(join(bundle, 'conmon.pid'), 'utf8')), created.monitorPid);
  const monitorCmd = (await readFile(`/proc/${created.monitorPid}/cmdline`, 'utf8')).split('\0');
  assert.equal(monitorCmd[0], 'conmon');
  assert.ok(monitorCmd.includes(id));
  const initStat = await readFile(`/proc/${created.pid}/stat`, 'utf8');
  assert.equal(Number(initStat.slice(initStat.lastIndexOf(')') + 2).split(' ')[1]), created.monitorPid);
  for (const name of ['ctl', 'winsz', 'attach']) assert.ok(await exists(join(bundle, name)), name);
  assert.equal(await readlink(join(opts.socketDir, id)), bundle);
  assert.equal(await exits.read(id), null, 'not exited yet');

  await runc.start(id);
  const rec = await waitExit(id);
  const afterExit = BigInt(Date.now()) * 1_000_000n;
  assert.equal(rec.exitCode, 3);
  assert.equal(rec.oomKilled, false);
  assert.ok(BigInt(rec.finishedAt) >= before - 10_000_000n && BigInt(rec.finishedAt) <= afterExit);
  assert.ok(await waitForExit(created.monitorPid, T), 'conmon exits after the container');

  const entries = await logEntries(logPath);
  assert.deepEqual(entries.map((e) => [e.stream, e.partial, e.message]).sort(), [
    ['stderr', false, 'err'],
    ['stdout', false, 'hello'],
  ]);
  for (const e of entries) {
    assert.match(e.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}(Z|[+-]\d\d:\d\d)$/, 'RFC3339Nano');
    const ms = Date.parse(e.timestamp);
    assert.ok(Math.abs(ms - Date.now()) < 60_000, `timestamp ${e.timestamp} is now`);
  }

  await runc.delete(id);
  await exits.forget(id);
  assert.equal(await exits.read(id), null);
  assert.equal(await exists(join(opts.persistDir, id)), false);
  await waitFor(async () => reported.some((r) => r.id === id), T, { what: 'the watcher to report' });
  assert.equal(reported.filter((r) => r.id === id).length, 1, 'reported once');
});

test('a long line is P pieces then F; output without a final newline ends with a P piece', async () => {
  const id = newId('long');
  const logPath = join(base, 'logs', `${id}.log`);
  const script = "head -c 20000 /dev/zero | tr '\\0' a; echo; echo err-line >&2; printf 'no newline'";
  await runContainer(id, { args: ['/bin/sh', '-c', script] }, logPath);
  assert.equal((await waitExit(id)).exitCode, 0);

  const stdout = (await logEntries(logPath)).filter((e) => e.stream === 'stdout');
  const firstFull = stdout.findIndex((e) => !e.partial);
  assert.ok(firstFull > 0, 'the long line came in more than one piece');
  const pieces = stdout.slice(0, firstFull + 1);
  assert.ok(
    pieces.slice(0, -1).every((e) => e.partial),
    'P pieces before the F',
  );
  assert.ok(
    pieces.every((e) => e.message.length <= 8192),
    'conmon cuts at its 8 KiB reads',
  );
  assert.equal(pieces.map((e) => e.message).join(''), 'a'.repeat(20000));
  // The unterminated tail: a P record, with nothing to close it.
  assert.deepEqual(
    stdout.slice(firstFull + 1).map((e) => [e.partial, e.message]),
    [[true, 'no newline']],
  );
  await runc.delete(id);
  await exits.forget(id);
});

test('an OOM kill is exit 137 with oomKilled; a SIGKILL is 137 without', async () => {
  const oomId = newId('oom');
  const script = 'x=$(head -c 64m /dev/zero | tr "\\0" a); echo ${#x}';
  await runContainer(oomId, { args: ['/bin/sh', '-c', script], memoryLimit: 8 * 1024 * 1024 }, '');
  const oom = await waitExit(oomId);
  assert.equal(oom.exitCode, 137);
  assert.equal(oom.oomKilled, true);

  const killedId = newId('killed');
  const { created } = await runContainer(killedId, { args: ['/bin/sleep', '600'] }, '');
  assert.ok(await isRunning(created.pid));
  await runc.kill(killedId, 'SIGKILL');
  const killed = await waitExit(killedId);
  assert.deepEqual([killed.exitCode, killed.oomKilled], [137, false]);

  // A fresh watcher (berthd restarted) reads the same records from the files.
  const again = new ExitWatcher(opts.exitDir, createLogger('silent'), opts.persistDir);
  assert.deepEqual(await again.read(oomId), oom);
  assert.deepEqual(await again.read(killedId), killed);
  again.close();
  for (const id of [oomId, killedId]) {
    await runc.delete(id);
    await exits.forget(id);
  }
});

test('reopenLog: after a rename, new lines go to a fresh file at the old path', async () => {
  const id = newId('reopen');
  const logPath = join(base, 'logs', `${id}.log`);
  const script = 'i=0; while true; do echo "tick $i"; i=$((i+1)); sleep 0.05; done';
  const { bundle, created } = await runContainer(id, { args: ['/bin/sh', '-c', script] }, logPath);
  await waitFor(async () => (await logEntries(logPath)).length >= 2, T, { what: 'first lines' });

  const rotated = `${logPath}.1`;
  await rename(logPath, rotated);
  await conmon.reopenLog(bundle, logPath);
  assert.ok(await exists(logPath), 'reopenLog resolves once the fresh file exists');
  await waitFor(async () => (await logEntries(logPath)).length >= 2, T, { what: 'lines in the fresh file' });

  const old = (await logEntries(rotated)).map((e) => e.message);
  const fresh = (await logEntries(logPath)).map((e) => e.message);
  const tick = (m: string): number => Number(/^tick (\d+)$/.exec(m)?.[1] ?? NaN);
  assert.ok(
    old.concat(fresh).every((m) => Number.isInteger(tick(m))),
    'only whole tick lines',
  );
  assert.ok(tick(fresh[0] ?? '') > tick(old.at(-1) ?? ''), 'the fresh file continues where the old ended');
  assert.deepEqual(
    old.concat(fresh).map(tick),
    old.concat(fresh).map((_m, i) => tick(old[0] ?? '') + i),
    'no line lost or doubled',
  );

  // Without a path to watch it returns once conmon has the message.
  await conmon.reopenLog(bundle);
  await runc.kill(id, 'SIGKILL');
  assert.equal((await waitExit(id)).exitCode, 137);
  assert.ok(await waitForExit(created.monitorPid, T));
  // conmon is gone: its ctl fifo has no reader, and the call fails instead of hanging.
  const started = Date.now();
  await assert.rejects(conmon.reopenLog(bundle, logPath), { name: 'FailedPreconditionError' });
  await assert.rejects(conmon.reopenLog(join(base, 'no-such-bundle')), { name: 'FailedPreconditionError' });
  assert.ok(Date.now() - started < T);
  await runc.delete(id);
  await exits.forget(id);
});

test('no log path: output is dropped, the container still runs and exits', async () => {
  const id = newId('nolog');
  await runContainer(id, { args: ['/bin/sh', '-c', 'yes | head -c 100000; exit 0'] }, '');
  assert.equal((await waitExit(id)).exitCode, 0);
  await runc.delete(id);
  await exits.forget(id);
});

test('a tty container: conmon takes the pty from runc and logs what it prints', async () => {
  const id = newId('tty');
  const logPath = join(base, 'logs', `${id}.log`);
  const bundle = await makeBundle(id, { args: ['/bin/sh', '-c', 'echo on-a-tty'], terminal: true });
  await conmon.create({ ...request(id, bundle, logPath), tty: true });
  await runc.start(id);
  assert.equal((await waitExit(id)).exitCode, 0);
  // A pty turns \n into \r\n; the log keeps the \r.
  const entries = await logEntries(logPath);
  assert.deepEqual(
    entries.map((e) => [e.stream, e.message]),
    [['stdout', 'on-a-tty\r']],
  );
  await runc.delete(id);
  await exits.forget(id);
});

test("a failed create carries runc's reason and leaves nothing behind", async () => {
  const id = newId('bad');
  const bundle = await makeBundle(id, { args: ['/bin/sh', '-c', 'exit 0'] });
  const spec = JSON.parse(await readFile(join(bundle, 'config.json'), 'utf8')) as { root: { path: string } };
  spec.root.path = join(base, 'missing-rootfs');
  await writeFile(join(bundle, 'config.json'), JSON.stringify(spec));
  const started = Date.now();
  await assert.rejects(conmon.create(request(id, bundle, join(base, 'logs', `${id}.log`))), (err: Error) => {
    assert.ok(err instanceof MonitorError);
    assert.match(err.message, /invalid rootfs: .*missing-rootfs: no such file or directory/);
    assert.equal(err.timedOut, false);
    return true;
  });
  assert.ok(Date.now() - started < T, 'failed fast');
  await assertNothingLeft(id);

  const noSpec = newId('nospec');
  const empty = join(base, 'bundles', noSpec);
  await mkdir(empty, { recursive: true });
  await assert.rejects(conmon.create(request(noSpec, empty, '')), /config\.json not found/);
  await assertNothingLeft(noSpec);
});

test('a create for an existing id is AlreadyExists and leaves that container alone', async () => {
  const id = newId('dup');
  const { bundle, created } = await runContainer(id, { args: ['/bin/sleep', '600'] }, '');
  await assert.rejects(conmon.create(request(id, bundle, '')), { name: 'AlreadyExistsError' });
  assert.equal((await runc.state(id))?.status, 'running');
  assert.ok(await isRunning(created.monitorPid));
  await assert.rejects(conmon.create(request('../x', bundle, '')), { name: 'InvalidArgumentError' });
  await assert.rejects(conmon.create(request(newId('colon'), bundle, '/var/log/a:b.log')), {
    name: 'InvalidArgumentError',
  });
  await runc.kill(id, 'SIGKILL');
  await waitExit(id);
  await runc.delete(id);
  await exits.forget(id);
});

test('a conmon that fails, hangs or is missing: typed errors, nothing left running', async () => {
  const fake = async (name: string, body: string): Promise<string> => {
    const path = join(base, name);
    await writeFile(path, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
    return path;
  };
  const failing = new Conmon({
    ...opts,
    binary: await fake('conmon-fails', 'echo "conmon: boom" >&2; exit 1'),
  });
  const id = newId('fails');
  const bundle = await makeBundle(id, { args: ['/bin/sh', '-c', 'exit 0'] });
  await assert.rejects(failing.create(request(id, bundle, '')), (err: Error) => {
    assert.ok(err instanceof MonitorError);
    assert.match(err.message, /conmon: boom/);
    return true;
  });
  await assertNothingLeft(id);

  const hangs = new Conmon({ ...opts, timeoutMs: 500, binary: await fake('conmon-hangs', 'sleep 600') });
  const started = Date.now();
  await assert.rejects(hangs.create(request(id, bundle, '')), (err: Error) => {
    assert.ok(err instanceof MonitorError);
    assert.equal(err.timedOut, true);
    assert.match(err.message, /timed out/);
    return true;
  });
  // Killed at the timeout, not left to sleep its ten minutes.
  assert.ok(Date.now() - started < 3 * T);
  await waitFor(async () => (await processesMentioningBase()).length === 0, T, {
    what: 'the hung fake to be killed',
  });

  const missing = new Conmon({ ...opts, binary: join(base, 'no-such-conmon') });
  await assert.rejects(missing.create(request(id, bundle, '')), /cannot run .*no-such-conmon.*ENOENT/);
  await assertNothingLeft(id);
});
