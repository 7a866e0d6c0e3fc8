/**
 * Container specs from buildContainerSpec under a real runc: joining a real infra's namespaces,
 * the RuntimeDefault seccomp profile, and CRI mount propagation through host mounts that are
 * shared or slave, and its refusal (the host left as it was) where they are private. Needs root.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ContainerMount, ContainerSecurity, ContainerSpec } from '../../src/model/container.js';
import { run } from '../../src/exec.js';
import { mountContaining, parseMountInfo } from '../../src/mounts/mountinfo.js';
import { probeOwnProcess } from '../../src/host/features.js';
import { containerCapabilities } from '../../src/oci/capabilities.js';
import { buildContainerSpec } from '../../src/oci/container.js';
import type { ContainerSpecInput } from '../../src/oci/container-input.js';
import { hostDevices } from '../../src/oci/devices.js';
import { buildInfraSpec } from '../../src/oci/infra.js';
import { resolveMounts } from '../../src/container/mount-sources.js';
import { clampOomScoreAdj } from '../../src/oci/oom.js';
import { Runc } from '../../src/runtime/runc.js';
import { defaultSeccompProfile } from '../../src/oci/seccomp.js';
import type { Spec } from '../../src/oci/spec.js';
import { resolveUser } from '../../src/oci/user.js';
import { ROOTFS_DIRS, writeBundle, writeBusyboxRootfs } from '../harness/bundles.js';
import { removeCgroupTree } from '../harness/cgroups.js';
import { containerSecurity, containerSpec, sandboxSpec } from '../harness/container-spec.js';

const suffix = randomBytes(4).toString('hex');
const base = `/run/berth-test-mounts-${suffix}`;
const cgroupParent = `/berth-test-mounts-${suffix}`;
const rootfs = join(base, 'rootfs');
const files = join(base, 'sandbox');
/** tmpfs volumes, by the propagation each is given: a test's mounts are on the one it needs. */
const volumes = {
  private: join(base, 'vol-private'),
  bidi: join(base, 'vol-bidi'),
  h2c: join(base, 'vol-h2c'),
  master: join(base, 'vol-master'),
  rro: join(base, 'vol-rro'),
};
/** A bind of volumes.master made a slave of it: it receives what is mounted there. */
const slave = join(base, 'vol-slave');
const T = 15_000;
const runc = new Runc({ binary: 'runc', root: join(base, 'runc'), systemdCgroup: false, timeoutMs: T });
const ids: string[] = [];
const infraId = `berth-mounts-infra-${suffix}`;
let infraPid = 0;
const own = await probeOwnProcess();

const APPLETS = [
  'sh',
  'cat',
  'echo',
  'ls',
  'mkdir',
  'mount',
  'readlink',
  'sleep',
  'true',
  'unshare',
  'hostname',
  'touch',
];

before(async () => {
  await mkdir(base, { recursive: true });
  await writeBusyboxRootfs(rootfs, [...APPLETS, 'linux32', 'linux64'], [...ROOTFS_DIRS, 'etc']);
  await mkdir(files);
  await writeFile(join(files, 'hostname'), 'pod-host\n');
  await writeFile(join(files, 'resolv.conf'), 'nameserver 127.0.0.1\n');
  await writeFile(join(files, 'hosts'), '127.0.0.1\tlocalhost\n');
  const shared = new Set([volumes.bidi, volumes.h2c, volumes.master]);
  for (const vol of Object.values(volumes)) {
    await mkdir(vol);
    await run('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', vol], { timeoutMs: T });
    await run('mount', [shared.has(vol) ? '--make-shared' : '--make-private', vol], { timeoutMs: T });
  }
  await mkdir(slave);
  await run('mount', ['--bind', volumes.master, slave], { timeoutMs: T });
  await run('mount', ['--make-slave', slave], { timeoutMs: T });
  infraPid = await startInfra();
});

after(async () => {
  for (const id of [...ids, infraId]) await runc.delete(id, { force: true }).catch(() => undefined);
  for (const vol of [slave, ...Object.values(volumes)]) {
    await run('umount', ['--recursive', '--lazy', vol], { timeoutMs: T }).catch(() => undefined);
  }
  await rm(base, { recursive: true, force: true });
  await removeCgroupTree(cgroupParent);
});

/** A pod infra: busybox sleep in new pid, ipc, uts and network namespaces. */
async function startInfra(): Promise<number> {
  const spec = buildInfraSpec({
    rootfsPath: rootfs,
    hostname: 'berth-pod',
    netnsPath: null,
    hostIpc: false,
    hostPid: false,
    sysctls: {},
    cgroupsPath: `${cgroupParent}/${infraId}`,
    privileged: false,
    oomScoreAdj: clampOomScoreAdj(0, own.oomScoreAdj),
    annotations: {},
  });
  if (!spec.process || !spec.linux?.namespaces) throw new Error('infra spec without process');
  spec.process.args = ['/bin/sleep', '1000'];
  spec.linux.namespaces.push({ type: 'network' });
  const bundle = await writeBundle(bundleDir(infraId), spec);
  const pid = await runc.create(infraId, bundle, join(bundle, 'init.pid'));
  await runc.start(infraId);
  return pid;
}

function bundleDir(id: string): string {
  return join(base, 'bundles', id);
}

/** Like the pod's: its pid namespace shared, no AppArmor profile. */
function podSecurity(over: Partial<ContainerSecurity> = {}): ContainerSecurity {
  return containerSecurity({
    namespaces: { network: 'POD', pid: 'POD', ipc: 'POD', targetId: '' },
    apparmor: { kind: 'Unconfined' },
    ...over,
  });
}

function commandSpec(command: string[], over: Partial<ContainerSpec> = {}): ContainerSpec {
  return containerSpec({
    metadata: { name: 'test', attempt: 0 },
    image: 'busybox',
    command,
    security: podSecurity(),
    ...over,
  });
}

const sandbox = sandboxSpec({
  metadata: { name: 'pod', uid: 'uid', namespace: 'ns', attempt: 0 },
  hostname: 'berth-pod',
  cgroupParent,
  namespaces: { network: 'POD', pid: 'POD', ipc: 'POD', targetId: '' },
});

/** The spec the way src/container/prepare.ts makes it: user, mounts and devices resolved first. */
async function specFor(
  id: string,
  spec: ContainerSpec,
  over: Partial<ContainerSpecInput> = {},
): Promise<Spec> {
  const sec = spec.security;
  const user = await resolveUser(rootfs, sec, undefined);
  const mounts = await resolveMounts(spec.mounts);
  const capabilities = containerCapabilities(sec, own.capabilities);
  ids.push(id);
  return buildContainerSpec({
    containerId: id,
    sandboxId: infraId,
    spec,
    sandbox,
    image: { name: 'busybox', config: {} },
    rootfsPath: rootfs,
    user,
    podNamespaces: {
      network: `/proc/${infraPid}/ns/net`,
      ipc: `/proc/${infraPid}/ns/ipc`,
      uts: `/proc/${infraPid}/ns/uts`,
      pid: `/proc/${infraPid}/ns/pid`,
    },
    targetPid: null,
    sandboxFiles: {
      resolvConf: join(files, 'resolv.conf'),
      hostname: join(files, 'hostname'),
      hosts: join(files, 'hosts'),
    },
    cgroupsPath: `${cgroupParent}/${id}`,
    oomScoreAdj: clampOomScoreAdj(0, own.oomScoreAdj),
    seccomp: sec.privileged ? null : defaultSeccompProfile(capabilities.set),
    apparmorProfile: null,
    devices: sec.privileged ? await hostDevices() : [],
    deviceRules: [],
    cgroupNamespace: false,
    mounts,
    capabilities,
    ...over,
  });
}

/** `runc run` in the foreground: the container's stdout, once it has exited (and been deleted). */
async function runOnce(id: string, spec: Spec): Promise<string> {
  const bundle = await writeBundle(bundleDir(id), spec);
  const { stdout } = await run('runc', ['--root', join(base, 'runc'), 'run', '--bundle', bundle, id], {
    timeoutMs: T,
  });
  return stdout;
}

async function execIn(id: string, args: string[]): Promise<string> {
  const { stdout } = await run('runc', ['--root', join(base, 'runc'), 'exec', id, ...args], { timeoutMs: T });
  return stdout;
}

async function mountInfoFor(path: string): Promise<string[]> {
  const table = parseMountInfo(await readFile('/proc/self/mountinfo', 'utf8'));
  return mountContaining(table, path)?.optionalFields ?? [];
}

function mount(containerPath: string, hostPath: string, over: Partial<ContainerMount> = {}): ContainerMount {
  return {
    containerPath,
    hostPath,
    readonly: false,
    recursiveReadOnly: false,
    selinuxRelabel: false,
    propagation: 'PRIVATE',
    idmap: null,
    image: null,
    ...over,
  };
}

test('a container joins the infra pid, ipc, uts and net namespaces, with its own mount namespace', async () => {
  const id = `berth-mounts-join-${suffix}`;
  const links = ['pid', 'ipc', 'uts', 'net', 'mnt'].map((ns) => `readlink /proc/self/ns/${ns}`);
  const script = [...links, 'hostname', 'cat /proc/1/cmdline', 'echo', 'cat /etc/hostname'].join('; ');
  const out = await runOnce(id, await specFor(id, commandSpec(['sh', '-c', script])));
  const [pid, ipc, uts, net, mnt, hostname, pid1, etcHostname] = out.trim().split('\n');
  assert.equal(pid, await readlink(`/proc/${infraPid}/ns/pid`));
  assert.equal(ipc, await readlink(`/proc/${infraPid}/ns/ipc`));
  assert.equal(uts, await readlink(`/proc/${infraPid}/ns/uts`));
  assert.equal(net, await readlink(`/proc/${infraPid}/ns/net`));
  assert.notEqual(mnt, await readlink(`/proc/${infraPid}/ns/mnt`));
  assert.notEqual(ipc, await readlink('/proc/self/ns/ipc'), 'not the host ipc');
  assert.equal(hostname, 'berth-pod', "the infra's hostname, through its uts namespace");
  assert.equal(pid1, '/bin/sleep\x001000\x00', 'pid 1 is the infra');
  assert.equal(etcHostname, 'pod-host', 'the pod file is mounted');
});

test('the RuntimeDefault seccomp profile loads, allows ordinary work and denies user namespaces', async () => {
  const script = [
    '/bin/busybox true; echo true=$?',
    'linux32 true; echo linux32=$?',
    'linux64 true; echo linux64=$?',
    'unshare -U true 2>/dev/null; echo unshare=$?',
    'cat /proc/self/status',
  ].join('; ');
  const confined = `berth-mounts-seccomp-${suffix}`;
  const out = await runOnce(confined, await specFor(confined, commandSpec(['sh', '-c', script])));
  assert.match(out, /^true=0$/m);
  assert.match(out, /^linux32=0$/m, 'personality(PER_LINUX32) is allowed');
  assert.match(out, /^linux64=0$/m);
  assert.match(out, /^unshare=1$/m);
  assert.match(out, /^Seccomp:\s+2$/m, 'filter mode');

  // The control: the same container without the profile may create a user namespace, so the
  // profile is what stopped it above.
  const open = `berth-mounts-noseccomp-${suffix}`;
  const control = await runOnce(
    open,
    await specFor(open, commandSpec(['sh', '-c', script]), { seccomp: null }),
  );
  assert.match(control, /^unshare=0$/m);
  assert.match(control, /^Seccomp:\s+0$/m);
});

test('BIDIRECTIONAL and HOST_TO_CONTAINER on a private host mount are refused, and it stays private', async () => {
  const vol = volumes.private;
  await mkdir(join(vol, 'data'));
  for (const propagation of ['BIDIRECTIONAL', 'HOST_TO_CONTAINER'] as const) {
    const m = mount('/vol', join(vol, 'data'), { propagation });
    await assert.rejects(resolveMounts([mount('/ok', vol), m]), (err: Error) => {
      assert.equal(err.name, 'FailedPreconditionError');
      assert.match(err.message, /^config\.mounts\[1\]: /);
      assert.ok(err.message.includes(`${propagation} of /vol (host path ${join(vol, 'data')})`), err.message);
      assert.match(err.message, /the mount it is on is private$/);
      return true;
    });
  }
  assert.deepEqual(await mountInfoFor(vol), [], 'the volume is still private');
});

test('BIDIRECTIONAL on a shared host mount: a mount made in a privileged container appears on the host', async () => {
  const vol = volumes.bidi;
  await mkdir(join(vol, 'data'));
  const link = join(base, 'bidi-link');
  await symlink(join(vol, 'data'), link);
  const sharedBefore = await mountInfoFor(vol);
  assert.ok(
    sharedBefore.some((f) => f.startsWith('shared:')),
    'the volume is shared',
  );

  const m = mount('/vol', link, { propagation: 'BIDIRECTIONAL' });
  const resolved = await resolveMounts([m]);
  assert.equal(resolved[0]?.hostPath, join(vol, 'data'), 'the symlink is resolved');
  assert.equal(resolved[0]?.requestedHostPath, link);
  assert.equal(resolved[0]?.sourcePropagation, 'shared');

  const id = `berth-mounts-bidi-${suffix}`;
  const script = 'mkdir -p /vol/sub && mount -t tmpfs tmpfs /vol/sub && echo from-container > /vol/sub/file';
  const privileged = podSecurity({ privileged: true });
  const spec = await specFor(id, commandSpec(['sh', '-c', script], { mounts: [m], security: privileged }));
  assert.equal(spec.linux?.rootfsPropagation, 'rshared');
  await runOnce(id, spec);
  assert.equal(await readFile(join(vol, 'data', 'sub', 'file'), 'utf8'), 'from-container\n');
  assert.deepEqual(await mountInfoFor(vol), sharedBefore, 'its propagation as it was');
});

test('privileged spec: all capabilities and host devices', async () => {
  const id = `berth-mounts-priv-${suffix}`;
  const privileged = commandSpec(['sh', '-c', 'cat /proc/self/status; ls /dev'], {
    security: podSecurity({ privileged: true }),
  });
  const spec = await specFor(id, privileged);
  assert.ok((spec.linux?.devices?.length ?? 0) > 0);
  const out = await runOnce(id, spec);
  const capEff = /^CapEff:\s*([0-9a-f]+)$/m.exec(out)?.[1];
  const capBnd = /^CapBnd:\s*([0-9a-f]+)$/m.exec(await readFile('/proc/self/status', 'utf8'))?.[1];
  assert.equal(capEff, capBnd, 'every capability berth itself holds');
  assert.match(out, /^Seccomp:\s+0$/m);
  const hostHas = (await readdir('/dev')).filter((n) => /^(vda|loop0|kmsg|mem)$/.test(n));
  for (const name of hostHas)
    assert.match(out, new RegExp(`^${name}$`, 'm'), `/dev/${name} in the container`);
});

test('HOST_TO_CONTAINER on a shared host mount sees later host mounts; PRIVATE does not', async () => {
  const vol = volumes.h2c;
  await mkdir(join(vol, 'h2c'));
  const missing = join(vol, 'priv', 'made', 'by', 'resolve');
  const mounts = [
    mount('/h2c', join(vol, 'h2c'), { propagation: 'HOST_TO_CONTAINER' }),
    mount('/priv', missing),
  ];
  const id = `berth-mounts-h2c-${suffix}`;
  const spec = await specFor(id, commandSpec(['sleep', '1000'], { mounts }));
  assert.equal(spec.linux?.rootfsPropagation, 'rslave');
  assert.deepEqual(await readdir(missing), [], 'a missing host path is created');

  const bundle = await writeBundle(bundleDir(id), spec);
  await runc.create(id, bundle, join(bundle, 'init.pid'));
  await runc.start(id);

  for (const dir of [join(vol, 'h2c', 'late'), join(missing, 'late')]) {
    await mkdir(dir);
    await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir], { timeoutMs: T });
    await writeFile(join(dir, 'file'), 'from-host\n');
  }
  assert.equal(await execIn(id, ['cat', '/h2c/late/file']), 'from-host\n');
  assert.equal(await execIn(id, ['ls', '-A', '/priv/late']), '', 'a private mount does not receive');
  await runc.delete(id, { force: true });
});

test('HOST_TO_CONTAINER on a slave host mount receives what its master gets', async () => {
  await mkdir(join(volumes.master, 'h2c'));
  const m = mount('/h2c', join(slave, 'h2c'), { propagation: 'HOST_TO_CONTAINER' });
  assert.equal((await resolveMounts([m]))[0]?.sourcePropagation, 'slave');
  const id = `berth-mounts-slave-${suffix}`;
  const spec = await specFor(id, commandSpec(['sleep', '1000'], { mounts: [m] }));
  const bundle = await writeBundle(bundleDir(id), spec);
  await runc.create(id, bundle, join(bundle, 'init.pid'));
  await runc.start(id);
  const late = join(volumes.master, 'h2c', 'late');
  await mkdir(late);
  await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', late], { timeoutMs: T });
  await writeFile(join(late, 'file'), 'from-master\n');
  assert.equal(await execIn(id, ['cat', '/h2c/late/file']), 'from-master\n');
  assert.deepEqual(
    (await mountInfoFor(slave)).filter((f) => f.startsWith('shared:')),
    [],
    'the slave was not made shared',
  );
  await runc.delete(id, { force: true });
});

test('recursive read-only: a submount of a readonly mount is read-only too with rro, not without', async () => {
  const vol = volumes.rro;
  await mkdir(join(vol, 'sub'));
  await run('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', join(vol, 'sub')], { timeoutMs: T });
  const mounts = [
    mount('/rro', vol, { readonly: true, recursiveReadOnly: true }),
    mount('/ro', vol, { readonly: true }),
  ];
  const script =
    'touch /rro/sub/a 2>&1; echo rro=$?; touch /ro/sub/b; echo ro=$?; touch /ro/c 2>/dev/null; echo top=$?';
  const id = `berth-mounts-rro-${suffix}`;
  const out = await runOnce(id, await specFor(id, commandSpec(['sh', '-c', script], { mounts })));
  assert.match(out, /Read-only file system/);
  assert.match(out, /^rro=1$/m);
  assert.match(out, /^ro=0$/m, 'plain ro leaves submounts writable');
  assert.match(out, /^top=1$/m);
});
