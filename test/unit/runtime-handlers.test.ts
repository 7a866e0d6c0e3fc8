/**
 * The runtime seam's own logic: which handler answers to which name, and which runc command line
 * each verb becomes, the monitor's cleanup included. runc is a script that logs its arguments.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MonitorCgroup } from '../../src/cgroups/monitor.js';
import { probeFeatures } from '../../src/runtime/handlers.js';
import { openRuntimeHandlers, type RuntimeHandlers } from '../../src/runtime/index.js';
import { Runc } from '../../src/runtime/runc.js';

/** Why the handlers here run no user-namespaced pods, and make no checkpoints. */
const NO_USERNS = 'no user namespaces in this test';
const NO_CRIU = 'criu is not usable on this host (see host.criu)';
const NO_RUNC_VERSION = 'the runtime names no runc version: taken to convert as runc before 1.3.2';

let dir: string;
let calls: string;
let handlers: RuntimeHandlers;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'berth-runtime-handlers-'));
  calls = join(dir, 'calls');
  const runc = join(dir, 'fake-runc');
  const script = [
    '#!/bin/sh',
    `echo "$*" >> '${calls}'`,
    'case " $* " in',
    `  *" features "*) echo '{"mountOptions":["rro"]}' ;;`,
    '  *" list "*) echo null ;;',
    'esac',
    '',
  ];
  await writeFile(runc, script.join('\n'));
  await chmod(runc, 0o755);
  handlers = await openRuntimeHandlers(
    { name: 'runc', binary: runc, root: join(dir, 'root-default') },
    [{ name: 'other', binary: runc, root: join(dir, 'root-other') }],
    monitorOptions(dir, { systemdCgroup: true, criuUsable: false }),
  );
});

after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The runc command lines run since the last call. */
async function takeCalls(): Promise<string[]> {
  const text = await readFile(calls, 'utf8').catch(() => '');
  await rm(calls, { force: true });
  return text.split('\n').filter((line) => line !== '');
}

test('the default handler also answers to ""; a pod of a handler no longer configured is refused', () => {
  assert.deepEqual(
    handlers.all().map((handler) => handler.name),
    ['runc', 'other'],
  );
  assert.equal(handlers.find(''), handlers.defaultHandler);
  assert.equal(handlers.find('other')?.name, 'other');
  assert.equal(handlers.find('gone'), undefined);
  assert.throws(() => handlers.of({ id: 'pod1', runtimeHandler: 'gone' }), {
    name: 'FailedPreconditionError',
    message: /"gone" of pod sandbox pod1 is no longer configured/,
  });
});

test('each handler probed its runc once: rro needs mount_setattr (the host probe says) and a runc that names it', async () => {
  for (const handler of handlers.all()) {
    assert.deepEqual(handler.features, {
      recursiveReadOnlyMounts: true,
      userNamespaces: false,
      joinsUserNamespace: false,
      checkpointRestore: false,
      off: { userNamespaces: NO_USERNS, checkpointRestore: NO_CRIU },
      cpuWeight: { conversion: 'linear', why: NO_RUNC_VERSION },
    });
  }
  const probes = (await takeCalls()).filter((line) => line.endsWith(' features'));
  assert.deepEqual(probes.sort(), [
    `--root ${join(dir, 'root-default')} --systemd-cgroup features`,
    `--root ${join(dir, 'root-other')} --systemd-cgroup features`,
  ]);
});

/** A Runc of a fake binary in the test's dir, with a root of its own for the probes. */
function probeRunc(binary: string): Runc {
  return new Runc({
    binary: join(dir, binary),
    root: join(dir, 'root-probe'),
    systemdCgroup: false,
    timeoutMs: 10_000,
  });
}

const NO_HOST_CAPABILITIES = {
  kernelHasMountSetattr: false,
  usernsProbe: { skipped: NO_USERNS },
  criuUsable: false,
};

test('no rro on a kernel without mount_setattr, whatever runc says', async () => {
  const runc = probeRunc('fake-runc');
  const host = NO_HOST_CAPABILITIES;
  assert.deepEqual(await probeFeatures(runc, host), {
    recursiveReadOnlyMounts: false,
    userNamespaces: false,
    joinsUserNamespace: false,
    checkpointRestore: false,
    off: {
      recursiveReadOnlyMounts: 'the kernel has no mount_setattr(2)',
      userNamespaces: NO_USERNS,
      checkpointRestore: NO_CRIU,
    },
    cpuWeight: { conversion: 'linear', why: NO_RUNC_VERSION },
  });
  assert.deepEqual(await probeFeatures(runc, { ...host, kernelHasMountSetattr: true }), {
    recursiveReadOnlyMounts: true,
    userNamespaces: false,
    joinsUserNamespace: false,
    checkpointRestore: false,
    off: { userNamespaces: NO_USERNS, checkpointRestore: NO_CRIU },
    cpuWeight: { conversion: 'linear', why: NO_RUNC_VERSION },
  });
  await takeCalls();
});

test('checkpoints only with a usable criu and a runtime that has the command', async () => {
  const runc = probeRunc('fake-runc');
  const host = NO_HOST_CAPABILITIES;
  assert.equal((await probeFeatures(runc, host)).checkpointRestore, false);
  // Not even asked: without criu the runtime's command could do nothing.
  assert.deepEqual(
    (await takeCalls()).filter((line) => line.includes('checkpoint')),
    [],
  );
  assert.equal((await probeFeatures(runc, { ...host, criuUsable: true })).checkpointRestore, true);
  const noCommand = probeRunc('runc-without-checkpoint');
  await writeFile(
    noCommand.opts.binary,
    '#!/bin/sh\ncase " $* " in *" checkpoint "*) exit 1 ;; *" features "*) echo {} ;; esac\n',
  );
  await chmod(noCommand.opts.binary, 0o755);
  const without = await probeFeatures(noCommand, { ...host, criuUsable: true });
  assert.equal(without.checkpointRestore, false);
  assert.equal(without.off.checkpointRestore, `${noCommand.opts.binary} has no checkpoint command`);
  await takeCalls();
});

test("a verb runs the handler's runc with the handler's root and flags", async () => {
  await takeCalls();
  const other = handlers.of({ id: 'pod1', runtimeHandler: 'other' });
  await other.kill('c1', 'SIGKILL', { all: true });
  await handlers.defaultHandler.kill('c1', 'TERM');
  assert.deepEqual(await other.list(), []);
  assert.deepEqual(await takeCalls(), [
    `--root ${join(dir, 'root-other')} --systemd-cgroup kill --all c1 SIGKILL`,
    `--root ${join(dir, 'root-default')} --systemd-cgroup kill c1 TERM`,
    `--root ${join(dir, 'root-other')} --systemd-cgroup list --format json`,
  ]);
});

test("the monitor's cleanup deletes through the handler's one runc", async () => {
  await takeCalls();
  const other = handlers.of({ id: 'pod1', runtimeHandler: 'other' });
  // runc knows a container by its state dir under the root; without one nothing is run.
  await mkdir(join(dir, 'root-other', 'c2'), { recursive: true });
  await other.release('c2', 0);
  await other.release('c3', 0);
  assert.deepEqual(await takeCalls(), [
    `--root ${join(dir, 'root-other')} --systemd-cgroup delete --force c2`,
  ]);
});

test("each handler's features are probed against its own binary, not the default's or runc in PATH", async () => {
  // Two runtimes that differ in every probed answer: the newer lists rro and has the checkpoint
  // command, the older neither; each logs which of them was asked.
  const fake = async (name: string, answers: string[]): Promise<string> => {
    const path = join(dir, name);
    const script = ['#!/bin/sh', `echo "${name} $*" >> '${calls}'`, 'case " $* " in', ...answers, 'esac', ''];
    await writeFile(path, script.join('\n'));
    await chmod(path, 0o755);
    return path;
  };
  const newer = await fake('runc-newer', [
    `  *" features "*) echo '{"mountOptions":["rro"],"annotations":{"org.opencontainers.runc.version":"1.3.6"}}' ;;`,
  ]);
  const older = await fake('runc-older', [
    `  *" features "*) echo '{"mountOptions":["ro"],"annotations":{"org.opencontainers.runc.version":"1.1.5+ds1"}}' ;;`,
    '  *" checkpoint "*) exit 1 ;;',
  ]);
  await takeCalls();
  const opened = await openRuntimeHandlers(
    { name: 'runc', binary: older, root: join(dir, 'root-older') },
    [{ name: 'newer', binary: newer, root: join(dir, 'root-newer') }],
    monitorOptions(dir, { systemdCgroup: false, criuUsable: true }),
  );
  assert.deepEqual(opened.find('newer')?.features, {
    recursiveReadOnlyMounts: true,
    userNamespaces: false,
    joinsUserNamespace: false,
    checkpointRestore: true,
    off: { userNamespaces: NO_USERNS },
    cpuWeight: { conversion: 'log-quadratic', why: 'runc 1.3.6 converts as runc 1.3.2 and later' },
  });
  assert.deepEqual(opened.defaultHandler.features, {
    recursiveReadOnlyMounts: false,
    userNamespaces: false,
    joinsUserNamespace: false,
    checkpointRestore: false,
    off: {
      recursiveReadOnlyMounts: `${older} does not list the rro mount option in its features`,
      userNamespaces: NO_USERNS,
      checkpointRestore: `${older} has no checkpoint command`,
    },
    cpuWeight: { conversion: 'linear', why: 'runc 1.1.5+ds1 converts as runc before 1.3.2' },
  });
  // Each binary was asked about itself with its own handler's root, and nothing else was asked.
  assert.deepEqual((await takeCalls()).sort(), [
    `runc-newer --root ${join(dir, 'root-newer')} checkpoint --help`,
    `runc-newer --root ${join(dir, 'root-newer')} features`,
    `runc-older --root ${join(dir, 'root-older')} checkpoint --help`,
    `runc-older --root ${join(dir, 'root-older')} features`,
  ]);
});

/** The monitor's options for handlers opened over a temp dir: conmon is never run in these tests. */
function monitorOptions(dir: string, node: { systemdCgroup: boolean; criuUsable: boolean }) {
  return {
    binary: join(dir, 'no-conmon-is-run'),
    ...node,
    kernelHasMountSetattr: true,
    usernsProbe: { skipped: NO_USERNS },
    exitDir: join(dir, 'exits'),
    socketDir: join(dir, 'sockets'),
    persistDir: join(dir, 'persist'),
    timeoutMs: 10_000,
    cgroup: new MonitorCgroup('inherit', 'cgroupfs'),
    execDir: join(dir, 'exec'),
  };
}
