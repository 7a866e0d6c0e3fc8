/** The spec of a restored container: the checkpointed process, placed in the new pod. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { restoredSpec } from '../../src/oci/restored-spec.js';
import type { Spec } from '../../src/oci/spec.js';

const checkpointed: Spec = {
  ociVersion: '1.0.2',
  process: {
    args: ['sh', '-c', 'count'],
    cwd: '/',
    env: ['A=1'],
    terminal: false,
    user: { uid: 0, gid: 0 },
    capabilities: { bounding: ['CAP_SYS_ADMIN'], effective: ['CAP_SYS_ADMIN'] },
    apparmorProfile: 'unconfined',
    noNewPrivileges: false,
  },
  hooks: { createRuntime: [{ path: '/bin/sh', args: ['sh', '-c', 'touch /host-owned'] }] },
  root: { path: '/var/lib/berth/containers/old/rootfs' },
  hostname: 'old-pod',
  mounts: [
    { destination: '/proc', type: 'proc', source: 'proc' },
    { destination: '/data', type: 'bind', source: '/old/data', options: ['rbind'] },
  ],
  annotations: { 'io.kubernetes.pod.name': 'old-pod' },
  linux: {
    namespaces: [{ type: 'network', path: '/var/run/netns/old' }, { type: 'pid' }],
    cgroupsPath: '/kubepods/podold/old',
    resources: { memory: { limit: 1 } },
    maskedPaths: ['/proc/kcore'],
    devices: [{ path: '/dev/fuse', type: 'c', major: 10, minor: 229 }],
  },
};

const fresh: Spec = {
  ociVersion: '1.0.2',
  process: {
    args: ['sleep', '1000'],
    cwd: '/',
    terminal: false,
    user: { uid: 0, gid: 0 },
    capabilities: { bounding: ['CAP_CHOWN'], effective: ['CAP_CHOWN'] },
    noNewPrivileges: true,
  },
  root: { path: '/var/lib/berth/containers/new/rootfs' },
  hostname: 'new-pod',
  mounts: [
    { destination: '/proc', type: 'proc', source: 'proc' },
    { destination: '/etc/hosts', type: 'bind', source: '/run/berth/new/hosts', options: ['rbind'] },
  ],
  annotations: { 'io.kubernetes.pod.name': 'new-pod' },
  linux: {
    namespaces: [{ type: 'network', path: '/var/run/netns/new' }, { type: 'pid' }],
    cgroupsPath: '/kubepods/podnew/new',
    resources: { memory: { limit: 2 } },
    maskedPaths: [],
  },
};

describe('restoredSpec', () => {
  it('keeps what the process was and takes where it now lives from the new pod', () => {
    const spec = restoredSpec(checkpointed, fresh);
    assert.deepEqual(spec.process?.args, ['sh', '-c', 'count']);
    assert.deepEqual(spec.process?.env, ['A=1']);
    assert.deepEqual(spec.root, fresh.root);
    assert.equal(spec.hostname, 'new-pod');
    assert.deepEqual(spec.mounts, fresh.mounts, "the new request's mounts replace the old request's");
    assert.deepEqual(spec.annotations, fresh.annotations);
    assert.deepEqual(spec.linux?.namespaces, fresh.linux?.namespaces);
    assert.equal(spec.linux?.cgroupsPath, '/kubepods/podnew/new');
    assert.deepEqual(spec.linux?.resources, { memory: { limit: 2 } });
    assert.equal(spec.linux?.uidMappings, undefined);
  });

  it("grants nothing the archive asks for: hooks, devices, masked paths and privileges are the new request's", () => {
    const spec = restoredSpec(checkpointed, fresh);
    assert.equal(spec.hooks, undefined, 'a hook of spec.dump would run on the host');
    assert.equal(spec.linux?.devices, undefined);
    assert.deepEqual(spec.linux?.maskedPaths, []);
    assert.deepEqual(spec.process?.capabilities, fresh.process?.capabilities);
    assert.equal(spec.process?.noNewPrivileges, true);
    assert.equal(spec.process?.apparmorProfile, undefined);
  });

  it('takes user, groups, umask and rlimits from the new request, never from spec.dump', () => {
    const was: Spec = {
      ...checkpointed,
      process: {
        ...(checkpointed.process as NonNullable<Spec['process']>),
        user: { uid: 0, gid: 0, additionalGids: [0, 6, 42], umask: 0 },
        rlimits: [{ type: 'RLIMIT_NOFILE', hard: 1048576, soft: 1048576 }],
      },
    };
    const now = fresh.process as NonNullable<Spec['process']>;
    const user = { uid: 1000, gid: 1000, additionalGids: [1000], umask: 0o22 };
    const spec = restoredSpec(was, { ...fresh, process: { ...now, user } });
    assert.deepEqual(spec.process?.user, user);
    assert.equal(
      spec.process?.rlimits,
      undefined,
      "the archive's rlimits stayed though the request set none",
    );
    const rlimits = [{ type: 'RLIMIT_NOFILE', hard: 1024, soft: 1024 }];
    assert.deepEqual(restoredSpec(was, { ...fresh, process: { ...now, rlimits } }).process?.rlimits, rlimits);
  });

  it('takes the new pod user namespace mappings, and drops the old ones when the new pod has none', () => {
    const mapping = [{ containerID: 0, hostID: 100000, size: 65536 }];
    const old = {
      ...checkpointed,
      linux: { ...checkpointed.linux, uidMappings: mapping, gidMappings: mapping },
    };
    const spec = restoredSpec(old, fresh);
    assert.equal(spec.linux?.uidMappings, undefined);
    assert.equal(spec.linux?.gidMappings, undefined);
    const mapped = restoredSpec(checkpointed, { ...fresh, linux: { ...fresh.linux, uidMappings: mapping } });
    assert.deepEqual(mapped.linux?.uidMappings, mapping);
  });
});
