/** A real infra container under runc, in a real pinned netns; needs root. */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../../src/exec.js';
import { createPinnedNetns, isMounted, prepareNetnsDir, removeNetns } from '../../src/netns/index.js';
import { buildInfraSpec, ensureInfraRootfs, type InfraSpecOptions } from '../../src/oci/infra.js';
import { probeOwnProcess } from '../../src/host/features.js';
import { clampOomScoreAdj } from '../../src/oci/oom.js';
import { Runc } from '../../src/runtime/runc.js';
import { waitForRuncStatus, writeBundle } from '../harness/bundles.js';
import { removeCgroupTree } from '../harness/cgroups.js';
import { nsInode } from '../harness/namespaces.js';

const suffix = randomBytes(4).toString('hex');
const base = `/run/berth-test-${suffix}`;
const netnsDir = join(base, 'netns');
const id = `berth-test-${suffix}`;
const badId = `${id}-bad`;
const oomId = `${id}-oom`;
const T = 10_000;
const runc = new Runc({ binary: 'runc', root: join(base, 'runc'), systemdCgroup: false, timeoutMs: T });

let rootfs = '';
/** berthd's probe of its own process, here the test's. */
const own = await probeOwnProcess();
let netns = '';

function specOptions(over: Partial<InfraSpecOptions> = {}): InfraSpecOptions {
  return {
    rootfsPath: rootfs,
    hostname: 'berth-test',
    netnsPath: netns,
    hostIpc: false,
    hostPid: false,
    sysctls: { 'net.ipv4.ip_forward': '1' },
    cgroupsPath: `/berth-test/${id}`,
    privileged: false,
    oomScoreAdj: clampOomScoreAdj(-998, own.oomScoreAdj),
    annotations: { 'io.kubernetes.cri.sandbox-id': id },
    ...over,
  };
}

function bundleDir(name: string): string {
  return join(base, 'bundles', name);
}

function lacksCapSysResource(status: string): boolean {
  const eff = /^CapEff:\s*([0-9a-f]+)$/m.exec(status)?.[1];
  return eff !== undefined && (BigInt(`0x${eff}`) & (1n << 24n)) === 0n;
}

before(async () => {
  rootfs = await ensureInfraRootfs(join(base, 'lib'));
  await prepareNetnsDir(netnsDir);
  netns = await createPinnedNetns(netnsDir, `berth-test-${suffix}`, T);
});

after(async () => {
  for (const cid of [id, badId, oomId]) await runc.delete(cid, { force: true }).catch(() => undefined);
  if (netns) await removeNetns(netns).catch(() => undefined);
  if (await isMounted(netnsDir))
    await run('umount', ['--lazy', netnsDir], { timeoutMs: T }).catch(() => undefined);
  await rm(base, { recursive: true, force: true });
  await removeCgroupTree('berth-test');
});

test('ensureInfraRootfs is idempotent and holds catatonit', async () => {
  assert.equal(await ensureInfraRootfs(join(base, 'lib')), rootfs);
  const entries = (await readdir(rootfs)).sort();
  assert.deepEqual(entries, ['catatonit', 'dev', 'etc', 'proc', 'sys', 'tmp']);
  assert.deepEqual(await readdir(join(base, 'lib', 'infra')), ['rootfs'], 'no temp dir left');
});

test('infra container lifecycle in the pinned netns', async () => {
  const bundle = await writeBundle(bundleDir(id), buildInfraSpec(specOptions()));
  const pidFile = join(bundle, 'init.pid');
  const pid = await runc.create(id, bundle, pidFile);
  assert.ok(pid > 0);
  assert.equal((await runc.state(id))?.status, 'created');
  await assert.rejects(runc.create(id, bundle, pidFile), { name: 'AlreadyExistsError' });

  await runc.start(id);
  const st = await runc.state(id);
  assert.deepEqual(st, { id, pid, status: 'running', bundle });
  assert.ok((await runc.list()).some((c) => c.id === id));

  assert.equal(await nsInode(`/proc/${pid}/ns/net`), await nsInode(netns), 'joined the pin');
  assert.notEqual(await nsInode(`/proc/${pid}/ns/pid`), await nsInode('/proc/self/ns/pid'));
  assert.equal(await readFile(`/proc/${pid}/cmdline`, 'utf8'), '/catatonit\0-P\0');
  assert.equal(
    Number((await readFile(`/proc/${pid}/oom_score_adj`, 'utf8')).trim()),
    clampOomScoreAdj(-998, own.oomScoreAdj),
  );
  const { stdout } = await run('nsenter', [`--net=${netns}`, 'cat', '/proc/sys/net/ipv4/ip_forward'], {
    timeoutMs: T,
  });
  assert.equal(stdout.trim(), '1', 'sysctl applied inside the pod netns');

  await runc.kill(id, 'SIGTERM');
  assert.ok(await waitForRuncStatus(runc, id, 'stopped'), 'catatonit exits on SIGTERM');
  await runc.kill(id, 'SIGTERM');
  await runc.kill(id, 'SIGKILL', true);

  await runc.delete(id);
  assert.equal(await runc.state(id), null);
  assert.ok(!(await runc.list()).some((c) => c.id === id));
  await runc.delete(id);
  await runc.delete(id, { force: true });
  await runc.kill(id, 'SIGKILL');
  assert.equal(await isMounted(netns), true, 'the pin outlives the container');
});

test('a bad bundle fails fast with runc reason and leaves nothing', async () => {
  const bundle = await writeBundle(
    bundleDir(badId),
    buildInfraSpec(specOptions({ rootfsPath: join(base, 'missing') })),
  );
  const started = Date.now();
  await assert.rejects(runc.create(badId, bundle, join(bundle, 'init.pid')), (err: Error) => {
    assert.equal(err.name, 'ExecError');
    assert.match(err.message, /invalid rootfs: .*missing: no such file or directory/);
    return true;
  });
  assert.ok(Date.now() - started < T, 'did not wait for a timeout');
  assert.equal(await runc.state(badId), null);
});

test('an unclamped negative oom_score_adj fails here, with the init reason', async (t) => {
  if (!lacksCapSysResource(await readFile('/proc/self/status', 'utf8'))) {
    t.skip('this host grants CAP_SYS_RESOURCE');
    return;
  }
  const bundle = await writeBundle(bundleDir(oomId), buildInfraSpec(specOptions({ oomScoreAdj: -998 })));
  await assert.rejects(
    runc.create(oomId, bundle, join(bundle, 'init.pid')),
    /oom_score_adj: Permission denied/,
  );
  assert.equal(await runc.state(oomId), null);
});
