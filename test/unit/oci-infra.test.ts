import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  buildInfraSpec,
  DEFAULT_CAPABILITIES,
  ensureInfraRootfs,
  type InfraSpecOptions,
} from '../../src/oci/infra.js';
import { hasInterpreter } from '../../src/oci/elf.js';
import { clampOomScoreAdj, parseOomScoreAdj } from '../../src/oci/oom.js';
import { readLoggedErrors } from '../../src/runtime/runc.js';

function options(over: Partial<InfraSpecOptions> = {}): InfraSpecOptions {
  return {
    rootfsPath: '/var/lib/berth/infra/rootfs',
    hostname: 'pod-a',
    netnsPath: '/run/berth/netns/berth-abc',
    hostIpc: false,
    hostPid: false,
    sysctls: {},
    cgroupsPath: '/berth/abc',
    privileged: false,
    oomScoreAdj: 0,
    annotations: {},
    ...over,
  };
}

test('pod network: joins the pinned netns by path, with its own pid, ipc, uts, mount', () => {
  const spec = buildInfraSpec(options());
  assert.deepEqual(spec.linux?.namespaces, [
    { type: 'pid' },
    { type: 'ipc' },
    { type: 'uts' },
    { type: 'mount' },
    { type: 'network', path: '/run/berth/netns/berth-abc' },
  ]);
  assert.equal(spec.hostname, 'pod-a');
});

test('host network: no network and no uts namespace, no hostname', () => {
  const spec = buildInfraSpec(options({ netnsPath: null, hostname: '' }));
  const types = spec.linux?.namespaces?.map((n) => n.type);
  assert.deepEqual(types, ['pid', 'ipc', 'mount']);
  assert.equal(spec.hostname, undefined);
});

test('host pid and ipc drop those namespaces', () => {
  const spec = buildInfraSpec(options({ hostPid: true, hostIpc: true }));
  assert.deepEqual(
    spec.linux?.namespaces?.map((n) => n.type),
    ['uts', 'mount', 'network'],
  );
});

test('unprivileged: catatonit with no capabilities, masked paths, read-only root', () => {
  const spec = buildInfraSpec(options({ runAsUser: 65535, runAsGroup: 65535, supplementalGroups: [5] }));
  assert.deepEqual(spec.process?.args, ['/catatonit', '-P']);
  assert.deepEqual(spec.process?.user, { uid: 65535, gid: 65535, additionalGids: [5] });
  assert.deepEqual(spec.process?.capabilities?.bounding, []);
  assert.equal(spec.process?.noNewPrivileges, true);
  assert.equal(spec.root?.readonly, true);
  assert.ok(spec.linux?.maskedPaths?.includes('/proc/kcore'));
  assert.ok(spec.linux?.readonlyPaths?.includes('/proc/sys'));
  assert.deepEqual(
    spec.mounts?.map((m) => m.destination),
    ['/proc', '/dev', '/dev/pts', '/dev/shm', '/dev/mqueue', '/sys'],
  );
});

test('privileged: default capabilities, nothing masked', () => {
  const spec = buildInfraSpec(options({ privileged: true }));
  assert.deepEqual(spec.process?.capabilities?.bounding, [...DEFAULT_CAPABILITIES]);
  assert.equal(spec.linux?.maskedPaths, undefined);
  assert.equal(spec.linux?.readonlyPaths, undefined);
});

test('defaults, sysctls, cgroups path and annotations pass through', () => {
  const spec = buildInfraSpec(
    options({ sysctls: { 'net.ipv4.ip_forward': '1' }, annotations: { a: 'b' }, oomScoreAdj: -998 }),
  );
  assert.deepEqual(spec.process?.user, { uid: 0, gid: 0, additionalGids: [] });
  assert.deepEqual(spec.linux?.sysctl, { 'net.ipv4.ip_forward': '1' });
  assert.equal(spec.linux?.cgroupsPath, '/berth/abc');
  assert.equal(spec.process?.oomScoreAdj, -998);
  assert.deepEqual(spec.annotations, { a: 'b' });
});

test('clampOomScoreAdj never goes below our own value', () => {
  assert.equal(clampOomScoreAdj(-998, -500), -500);
  assert.equal(clampOomScoreAdj(-500, -500), -500);
  assert.equal(clampOomScoreAdj(100, -500), 100);
  assert.equal(clampOomScoreAdj(5000, -500), 1000);
  assert.equal(clampOomScoreAdj(-998, 0), 0);
  // Unknown floor: only the kernel's range applies.
  assert.equal(clampOomScoreAdj(-2000, null), -1000);
  assert.equal(parseOomScoreAdj('-500\n'), -500);
  assert.equal(parseOomScoreAdj(''), null);
});

test('readLoggedErrors keeps error and fatal messages of runc JSON logs', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'berth-runclog-'));
  try {
    const log = join(dir, 'log.json');
    await writeFile(
      log,
      [
        '{"level":"debug","msg":"noise","time":"t"}',
        '{"level":"fatal","msg":"nsexec[1]: failed to update /proc/self/oom_score_adj: Permission denied"}',
        'not json',
        '{"level":"error","msg":"runc create failed: unable to start container process"}',
        '',
      ].join('\n'),
    );
    assert.deepEqual(await readLoggedErrors(log), [
      'nsexec[1]: failed to update /proc/self/oom_score_adj: Permission denied',
      'runc create failed: unable to start container process',
    ]);
    assert.deepEqual(await readLoggedErrors(join(dir, 'missing')), []);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('ensureInfraRootfs: a clear error without a usable catatonit', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'berth-infra-'));
  try {
    await assert.rejects(ensureInfraRootfs(dir, ['/nonexistent/catatonit']), {
      name: 'FailedPreconditionError',
      message: /catatonit not found/,
    });
    // /bin/sh is dynamically linked on every distribution berth targets.
    await assert.rejects(ensureInfraRootfs(dir, ['/bin/sh']), /dynamically linked/);
    assert.equal(await hasInterpreter('/bin/sh'), true);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("an infra of a pod's own user namespace joins it, so that the namespaces it makes are owned by it", () => {
  const mapping = [{ containerId: 0, hostId: 65536, length: 65536 }];
  const spec = buildInfraSpec(options({ userns: { path: '/sb/ns/user', uids: mapping, gids: mapping } }));
  assert.ok(spec.linux?.namespaces?.some((n) => n.type === 'user' && n.path === '/sb/ns/user'));
  assert.deepEqual(spec.linux?.uidMappings, [{ containerID: 0, hostID: 65536, size: 65536 }]);
  assert.deepEqual(spec.linux?.gidMappings, [{ containerID: 0, hostID: 65536, size: 65536 }]);
  assert.equal(buildInfraSpec(options()).linux?.uidMappings, undefined);
});
