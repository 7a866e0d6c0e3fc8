/**
 * The CRI container layer as translation: wire requests to domain specs and filters, domain views to
 * wire responses, and (over a real gRPC server on a temp unix socket, with a fake ContainerService)
 * how codes and bytes cross the wire.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Server, ServerCredentials, status, type ServiceError } from '@grpc/grpc-js';
import { pino } from 'pino';
import { containerHandlers } from '../../src/cri/container.js';
import { toContainerSpec, toResources } from '../../src/cri/container-spec.js';
import {
  toListFilter,
  toStatsFilter,
  toWireContainer,
  toWireContainerStatus,
  toWireResources,
} from '../../src/cri/container-status.js';
import { toWireStats } from '../../src/cri/stats.js';
import { RpcEdge, type UnaryHandler } from '../../src/cri/handler.js';
import { loadCriServices } from '../../src/cri/loader.js';
import type { Received } from '../../src/cri/messages.js';
import { grpcCode } from '../../src/cri/status.js';
import { MAX_SELECTOR_ENTRIES } from '../../src/cri/validate.js';
import { MAX_ARGS } from '../../src/cri/validate-container.js';
import { DeadlineExceededError, InvalidArgumentError, NotFoundError } from '../../src/errors.js';
import type { ContainerService } from '../../src/container/service.js';
import type { ContainerFilter, ContainerStatsView, ContainerView } from '../../src/container/types.js';
import type { ContainerResources, ContainerSpec } from '../../src/model/container.js';
import type { ExecSyncResult } from '../../src/runtime/exec-sync.js';
import { CriClient } from '../harness/client.js';

type CreateContainerRequest = Received<'CreateContainerRequest'>;
type WireContainerConfig = Received<'ContainerConfig'>;
type WireLinuxContainerResources = Received<'LinuxContainerResources'>;
type WireLinuxContainerSecurityContext = Received<'LinuxContainerSecurityContext'>;
type WireMount = Received<'Mount'>;

const MiB = 1024 * 1024;
/** Linux's MAX_ARG_STRLEN: the longest one argument may be. */
const ARG_128K = 'a'.repeat(128 * 1024);

// --- Builders -------------------------------------------------------------------------------------

function wireResources(over: Partial<WireLinuxContainerResources> = {}): WireLinuxContainerResources {
  return {
    cpu_period: '100000',
    cpu_quota: '50000',
    cpu_shares: '512',
    memory_limit_in_bytes: '134217728',
    oom_score_adj: '-997',
    cpuset_cpus: '0-1,3',
    cpuset_mems: '0',
    hugepage_limits: [{ page_size: '2MB', limit: '4194304' }],
    unified: { 'memory.high': '100000000' },
    memory_swap_limit_in_bytes: '134217728',
    ...over,
  };
}

function wireSecurity(
  over: Partial<WireLinuxContainerSecurityContext> = {},
): WireLinuxContainerSecurityContext {
  return {
    capabilities: {
      add_capabilities: ['NET_ADMIN', 'cap_sys_time'],
      drop_capabilities: ['ALL'],
      add_ambient_capabilities: [],
    },
    privileged: false,
    namespace_options: { network: 'POD', pid: 'CONTAINER', ipc: 'POD', target_id: '', userns_options: null },
    selinux_options: null,
    run_as_user: { value: '1000' },
    run_as_group: { value: '3000' },
    run_as_username: '',
    readonly_rootfs: true,
    supplemental_groups: ['4000', '4001'],
    supplemental_groups_policy: 'Merge',
    no_new_privs: true,
    masked_paths: ['/proc/kcore'],
    readonly_paths: [],
    seccomp: { profile_type: 'RuntimeDefault', localhost_ref: '' },
    apparmor: null,
    apparmor_profile: '',
    seccomp_profile_path: '',
    ...over,
  };
}

/** An image volume as kubelet sends it: read-only, no host path. */
function imageMount(over: Partial<WireMount> = {}): WireMount {
  return wireMount({
    host_path: '',
    readonly: true,
    image: {
      image: 'sha256:abc',
      annotations: {},
      user_specified_image: '',
      runtime_handler: '',
      image_ref: '',
    },
    ...over,
  });
}

function wireMount(over: Partial<WireMount> = {}): WireMount {
  return {
    container_path: '/data',
    host_path: '/var/lib/kubelet/pods/u/volumes/data',
    readonly: false,
    selinux_relabel: false,
    propagation: 'PROPAGATION_PRIVATE',
    uidMappings: [],
    gidMappings: [],
    recursive_read_only: false,
    image: null,
    image_sub_path: '',
    ...over,
  };
}

function wireConfig(over: Partial<WireContainerConfig> = {}): WireContainerConfig {
  return {
    metadata: { name: 'app', attempt: 2 },
    image: {
      image: 'sha256:abc',
      annotations: {},
      user_specified_image: 'busybox:1.36',
      runtime_handler: '',
      image_ref: '',
    },
    command: ['/bin/sh'],
    args: ['-c', 'sleep 1'],
    working_dir: '/work',
    envs: [{ key: 'GREETING', value: Buffer.from('hello=world') }],
    mounts: [
      wireMount(),
      wireMount({
        container_path: '/ro',
        host_path: '/srv/ro',
        readonly: true,
        recursive_read_only: true,
      }),
      wireMount({
        container_path: '/shared',
        host_path: '/mnt/shared',
        propagation: 'PROPAGATION_BIDIRECTIONAL',
      }),
    ],
    devices: [{ container_path: '/dev/fuse', host_path: '/dev/fuse', permissions: 'rwm' }],
    labels: { 'io.kubernetes.container.name': 'app' },
    annotations: { 'io.kubernetes.container.hash': 'abcd' },
    log_path: 'app/2.log',
    stdin: false,
    stdin_once: false,
    tty: true,
    linux: { resources: wireResources(), security_context: wireSecurity() },
    windows: null,
    CDI_devices: [],
    stop_signal: 'RUNTIME_DEFAULT',
    ...over,
  };
}

function request(config: WireContainerConfig | null = wireConfig()): CreateContainerRequest {
  return { pod_sandbox_id: 'pod1', config, sandbox_config: null };
}

function withSecurity(over: Partial<WireLinuxContainerSecurityContext>): CreateContainerRequest {
  return request(wireConfig({ linux: { resources: null, security_context: wireSecurity(over) } }));
}

function withResources(over: Partial<WireLinuxContainerResources>): CreateContainerRequest {
  return request(wireConfig({ linux: { resources: wireResources(over), security_context: null } }));
}

function rejects(fn: () => unknown, field: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof InvalidArgumentError, `expected InvalidArgumentError, got ${String(err)}`);
    assert.equal(err.field, field);
    return true;
  });
}

const RESOURCES: ContainerResources = {
  cpuPeriod: 100000,
  cpuQuota: 50000,
  cpuShares: 512,
  memoryLimitBytes: 134217728,
  oomScoreAdj: -997,
  cpusetCpus: '0-1,3',
  cpusetMems: '0',
  hugepageLimits: [{ pageSize: '2MB', limit: 4194304 }],
  unified: { 'memory.high': '100000000' },
  memorySwapLimitBytes: 134217728,
};

function view(over: Partial<ContainerView> = {}): ContainerView {
  return {
    id: 'c0ffee',
    podSandboxId: 'pod1',
    metadata: { name: 'app', attempt: 2 },
    image: 'docker.io/library/busybox:1.36',
    userSpecifiedImage: '',
    imageRef: 'docker.io/library/busybox@sha256:def',
    imageId: 'sha256:abc',
    state: 'CONTAINER_EXITED',
    createdAt: '1700000000000000001',
    startedAt: '1700000000000000002',
    finishedAt: '1700000000000000003',
    exitCode: 137,
    reason: 'OOMKilled',
    message: 'killed',
    labels: { l: '1' },
    annotations: { a: '2' },
    mounts: [
      {
        containerPath: '/data',
        hostPath: '/srv/data',
        readonly: true,
        recursiveReadOnly: true,
        selinuxRelabel: false,
        propagation: 'PRIVATE',
        idmap: {
          uids: [{ containerId: 0, hostId: 100000, length: 65536 }],
          gids: [{ containerId: 0, hostId: 200000, length: 65536 }],
        },
        image: null,
      },
      {
        containerPath: '/shared',
        hostPath: '/mnt/shared',
        readonly: false,
        recursiveReadOnly: false,
        selinuxRelabel: true,
        propagation: 'BIDIRECTIONAL',
        idmap: null,
        image: null,
      },
      {
        containerPath: '/in',
        hostPath: '/mnt/in',
        readonly: false,
        recursiveReadOnly: false,
        selinuxRelabel: false,
        propagation: 'HOST_TO_CONTAINER',
        idmap: null,
        image: null,
      },
    ],
    logPath: '/var/log/pods/ns_pod_uid/app/2.log',
    resources: RESOURCES,
    user: { uid: 1000, gid: 3000, supplementalGroups: [4000, 4001] },
    pid: 4242,
    ...over,
  };
}

const STATS: ContainerStatsView = {
  id: 'c0ffee',
  podSandboxId: 'pod1',
  metadata: { name: 'app', attempt: 2 },
  labels: { l: '1' },
  annotations: { a: '2' },
  cpu: { timestamp: '1700000000000000010', usageCoreNanoSeconds: '123456789', psi: null },
  memory: {
    timestamp: '1700000000000000011',
    workingSetBytes: '1000',
    usageBytes: '2000',
    rssBytes: '500',
    pageFaults: '7',
    majorPageFaults: '1',
    psi: null,
  },
  swap: null,
  io: null,
  writableLayer: {
    timestamp: '1700000000000000012',
    mountpoint: '/var/lib/berth/containers/c0ffee/rootfs',
    usedBytes: '4096',
    inodesUsed: '3',
  },
};

// --- CreateContainer: the good path ---------------------------------------------------------------

test('a full config maps to the expected ContainerSpec', () => {
  const expected: ContainerSpec = {
    metadata: { name: 'app', attempt: 2 },
    image: 'sha256:abc',
    userSpecifiedImage: 'busybox:1.36',
    command: ['/bin/sh'],
    args: ['-c', 'sleep 1'],
    workingDir: '/work',
    envs: [{ key: 'GREETING', value: 'hello=world' }],
    mounts: [
      {
        containerPath: '/data',
        hostPath: '/var/lib/kubelet/pods/u/volumes/data',
        readonly: false,
        recursiveReadOnly: false,
        selinuxRelabel: false,
        propagation: 'PRIVATE',
        idmap: null,
        image: null,
      },
      {
        containerPath: '/ro',
        hostPath: '/srv/ro',
        readonly: true,
        recursiveReadOnly: true,
        selinuxRelabel: false,
        propagation: 'PRIVATE',
        idmap: null,
        image: null,
      },
      {
        containerPath: '/shared',
        hostPath: '/mnt/shared',
        readonly: false,
        recursiveReadOnly: false,
        selinuxRelabel: false,
        propagation: 'BIDIRECTIONAL',
        idmap: null,
        image: null,
      },
    ],
    devices: [{ containerPath: '/dev/fuse', hostPath: '/dev/fuse', permissions: 'rwm' }],
    cdiDevices: [],
    labels: { 'io.kubernetes.container.name': 'app' },
    annotations: { 'io.kubernetes.container.hash': 'abcd' },
    logPath: 'app/2.log',
    stdin: false,
    stdinOnce: false,
    tty: true,
    resources: RESOURCES,
    security: {
      addCapabilities: ['NET_ADMIN', 'SYS_TIME'],
      dropCapabilities: ['ALL'],
      addAmbientCapabilities: [],
      privileged: false,
      namespaces: { network: 'POD', pid: 'CONTAINER', ipc: 'POD', targetId: '' },
      runAsUser: 1000,
      runAsUsername: '',
      runAsGroup: 3000,
      readonlyRootfs: true,
      supplementalGroups: [4000, 4001],
      supplementalGroupsPolicy: 'Merge',
      noNewPrivs: true,
      maskedPaths: ['/proc/kcore'],
      readonlyPaths: null,
      seccomp: { kind: 'RuntimeDefault' },
      apparmor: { kind: 'RuntimeDefault' },
    },
  };
  assert.deepEqual(toContainerSpec(request()), expected);
});

test('an image volume keeps the image as named and its sub path, with no host path', () => {
  const spec = toContainerSpec(
    request(wireConfig({ mounts: [imageMount({ container_path: '/models', image_sub_path: 'data/v1' })] })),
  );
  assert.deepEqual(spec.mounts[0]?.image, { reference: 'sha256:abc', id: '', subPath: 'data/v1' });
  assert.equal(spec.mounts[0]?.hostPath, '');
  assert.equal(spec.mounts[0]?.readonly, true);
});

test('CDI devices come from the CRI field, then the cdi.k8s.io/ annotations, each once', () => {
  const spec = toContainerSpec(
    request(
      wireConfig({
        CDI_devices: [{ name: 'vendor.com/gpu=0' }, { name: 'vendor.com/gpu=1' }],
        annotations: {
          'cdi.k8s.io/plugin-b': 'example.org/net=eth, vendor.com/gpu=0',
          'cdi.k8s.io/plugin-a': 'example.org/fpga=all',
          'other.io/x': 'not=cdi',
        },
      }),
    ),
  );
  assert.deepEqual(spec.cdiDevices, [
    'vendor.com/gpu=0',
    'vendor.com/gpu=1',
    'example.org/fpga=all',
    'example.org/net=eth',
  ]);
});

test('a minimal config (no linux section) gets zero resources and the default profiles', () => {
  const spec = toContainerSpec(request(wireConfig({ linux: null, mounts: [], devices: [], envs: [] })));
  assert.deepEqual(spec.resources, toResources('x', null));
  assert.equal(spec.resources.memoryLimitBytes, 0);
  assert.deepEqual(spec.security.namespaces, { network: 'POD', pid: 'POD', ipc: 'POD', targetId: '' });
  assert.deepEqual(spec.security.seccomp, { kind: 'Unconfined' });
  assert.deepEqual(spec.security.apparmor, { kind: 'RuntimeDefault' });
  assert.equal(spec.security.runAsUser, null);
  assert.equal(spec.security.maskedPaths, null);
});

test('environment, labels and annotations are bounded, and refused naming the field', () => {
  const envs = (n: number, value = 'v') =>
    Array.from({ length: n }, (_, i) => ({ key: `K${i}`, value: Buffer.from(value) }));
  assert.equal(toContainerSpec(request(wireConfig({ envs: envs(16_384) }))).envs.length, 16_384);
  // Counted, not timed: each entry counts the reads of its key, which a busy machine cannot skew.
  let keysRead = 0;
  const watched = Array.from({ length: 100_000 }, (_, i) => ({
    get key(): string {
      keysRead++;
      return `K${i}`;
    },
    value: Buffer.from('v'),
  }));
  rejects(() => toContainerSpec(request(wireConfig({ envs: watched }))), 'config.envs');
  assert.equal(keysRead, 0, 'refused before looking at each entry');
  rejects(
    () => toContainerSpec(request(wireConfig({ envs: envs(2, 'x'.repeat(600 * 1024)) }))),
    'config.envs',
  );
  rejects(
    () => toContainerSpec(request(wireConfig({ annotations: { a: 'x'.repeat(5 * 1024 * 1024) } }))),
    'config.annotations',
  );
  rejects(() => toContainerSpec(request(wireConfig({ labels: { '': 'v' } }))), 'config.labels');
});

test('a memory limit below 6 MiB and a log path no file could have are refused, naming the field', () => {
  rejects(
    () => toContainerSpec(withResources({ memory_limit_in_bytes: '1' })),
    'config.linux.resources.memory_limit_in_bytes',
  );
  assert.equal(
    toContainerSpec(withResources({ memory_limit_in_bytes: String(6 * 1024 * 1024) })).resources
      .memoryLimitBytes,
    6 * 1024 * 1024,
  );
  rejects(
    () => toContainerSpec(request(wireConfig({ log_path: `c/${'x'.repeat(1024 * 1024)}` }))),
    'config.log_path',
  );
  rejects(
    () => toContainerSpec(request(wireConfig({ log_path: `${'x'.repeat(256)}/0.log` }))),
    'config.log_path',
  );
});

test('run_as_group is accepted with run_as_username, and rejected alone', () => {
  const ok = toContainerSpec(withSecurity({ run_as_user: null, run_as_username: 'nobody' }));
  assert.equal(ok.security.runAsUsername, 'nobody');
  assert.equal(ok.security.runAsGroup, 3000);
  rejects(
    () => toContainerSpec(withSecurity({ run_as_user: null, run_as_username: '' })),
    'config.linux.security_context.run_as_group',
  );
});

test('pid TARGET carries the target container id; other modes drop it', () => {
  const target = toContainerSpec(
    withSecurity({
      namespace_options: {
        network: 'POD',
        pid: 'TARGET',
        ipc: 'POD',
        target_id: 'abc',
        userns_options: null,
      },
    }),
  );
  assert.deepEqual(target.security.namespaces, {
    network: 'POD',
    pid: 'TARGET',
    ipc: 'POD',
    targetId: 'abc',
  });
  const node = toContainerSpec(
    withSecurity({
      namespace_options: {
        network: 'NODE',
        pid: 'NODE',
        ipc: 'NODE',
        target_id: 'stale',
        userns_options: { mode: 'NODE', uids: [], gids: [] },
      },
    }),
  );
  assert.deepEqual(node.security.namespaces, { network: 'NODE', pid: 'NODE', ipc: 'NODE', targetId: '' });
});

test('seccomp: the deprecated strings and the SecurityProfile message', () => {
  const seccomp = (over: Partial<WireLinuxContainerSecurityContext>) =>
    toContainerSpec(withSecurity({ seccomp: null, ...over })).security.seccomp;
  assert.deepEqual(seccomp({ seccomp_profile_path: '' }), { kind: 'Unconfined' });
  assert.deepEqual(seccomp({ seccomp_profile_path: 'unconfined' }), { kind: 'Unconfined' });
  assert.deepEqual(seccomp({ seccomp_profile_path: 'runtime/default' }), { kind: 'RuntimeDefault' });
  assert.deepEqual(seccomp({ seccomp_profile_path: 'docker/default' }), { kind: 'RuntimeDefault' });
  assert.deepEqual(seccomp({ seccomp_profile_path: 'localhost//var/lib/kubelet/seccomp/audit.json' }), {
    kind: 'Localhost',
    path: '/var/lib/kubelet/seccomp/audit.json',
  });
  rejects(
    () => seccomp({ seccomp_profile_path: 'bogus' }),
    'config.linux.security_context.seccomp_profile_path',
  );
  rejects(
    () => seccomp({ seccomp_profile_path: 'localhost/relative.json' }),
    'config.linux.security_context.seccomp_profile_path',
  );
  // The message wins over the deprecated string.
  assert.deepEqual(
    seccomp({
      seccomp: { profile_type: 'Unconfined', localhost_ref: '' },
      seccomp_profile_path: 'runtime/default',
    }),
    { kind: 'Unconfined' },
  );
  assert.deepEqual(seccomp({ seccomp: { profile_type: 'Localhost', localhost_ref: '/etc/p.json' } }), {
    kind: 'Localhost',
    path: '/etc/p.json',
  });
  rejects(
    () => seccomp({ seccomp: { profile_type: 'Localhost', localhost_ref: '' } }),
    'config.linux.security_context.seccomp.localhost_ref',
  );
  rejects(
    () => seccomp({ seccomp: { profile_type: 'RuntimeDefault', localhost_ref: '/etc/p.json' } }),
    'config.linux.security_context.seccomp.localhost_ref',
  );
  rejects(
    () => seccomp({ seccomp: { profile_type: 9, localhost_ref: '' } }),
    'config.linux.security_context.seccomp.profile_type',
  );
});

test('apparmor: unset is RuntimeDefault; deprecated strings and profile names', () => {
  const apparmor = (over: Partial<WireLinuxContainerSecurityContext>) =>
    toContainerSpec(withSecurity({ apparmor: null, ...over })).security.apparmor;
  assert.deepEqual(apparmor({}), { kind: 'RuntimeDefault' });
  assert.deepEqual(apparmor({ apparmor_profile: 'unconfined' }), { kind: 'Unconfined' });
  assert.deepEqual(apparmor({ apparmor_profile: 'runtime/default' }), { kind: 'RuntimeDefault' });
  assert.deepEqual(apparmor({ apparmor_profile: 'localhost/k8s-deny-write' }), {
    kind: 'Localhost',
    path: 'k8s-deny-write',
  });
  assert.deepEqual(apparmor({ apparmor: { profile_type: 'Localhost', localhost_ref: 'k8s-deny-write' } }), {
    kind: 'Localhost',
    path: 'k8s-deny-write',
  });
  rejects(() => apparmor({ apparmor_profile: 'nope' }), 'config.linux.security_context.apparmor_profile');
});

test('int64 limits at the edges of their ranges are accepted', () => {
  const r = toContainerSpec(
    withResources({
      oom_score_adj: '1000',
      cpu_quota: '-1',
      memory_swap_limit_in_bytes: '-1',
      cpu_period: '0',
      cpu_shares: '262144',
      memory_limit_in_bytes: String(Number.MAX_SAFE_INTEGER),
    }),
  ).resources;
  assert.equal(r.oomScoreAdj, 1000);
  assert.equal(r.cpuQuota, -1);
  assert.equal(r.memorySwapLimitBytes, -1);
  assert.equal(r.cpuShares, 262144);
  assert.equal(r.memoryLimitBytes, Number.MAX_SAFE_INTEGER);
});

// --- CreateContainer: each invalid input names its field ------------------------------------------

describe('invalid CreateContainer requests name the field', () => {
  const SC = 'config.linux.security_context';
  const R = 'config.linux.resources';
  const cases: [string, CreateContainerRequest][] = [
    ['pod_sandbox_id', { pod_sandbox_id: '', config: wireConfig(), sandbox_config: null }],
    ['config', request(null)],
    ['config.metadata', request(wireConfig({ metadata: null }))],
    ['config.metadata.name', request(wireConfig({ metadata: { name: '', attempt: 0 } }))],
    ['config.metadata.name', request(wireConfig({ metadata: { name: '../x', attempt: 0 } }))],
    ['config.image.image', request(wireConfig({ image: null }))],
    ['config.command[1]', request(wireConfig({ command: ['/bin/sh', 'a\0b'] }))],
    ['config.working_dir', request(wireConfig({ working_dir: 'relative' }))],
    ['config.envs[0].key', request(wireConfig({ envs: [{ key: '', value: Buffer.from('v') }] }))],
    ['config.envs[0].key', request(wireConfig({ envs: [{ key: 'A=B', value: Buffer.from('v') }] }))],
    ['config.envs[0].value', request(wireConfig({ envs: [{ key: 'A', value: Buffer.from('a\0') }] }))],
    ['config.mounts[0].container_path', request(wireConfig({ mounts: [wireMount({ container_path: '' })] }))],
    [
      'config.mounts[0].container_path',
      request(wireConfig({ mounts: [wireMount({ container_path: 'data' })] })),
    ],
    ['config.mounts[0].host_path', request(wireConfig({ mounts: [wireMount({ host_path: '' })] }))],
    ['config.mounts[0].host_path', request(wireConfig({ mounts: [wireMount({ host_path: 'rel/dir' })] }))],
    ['config.mounts[0].host_path', request(wireConfig({ mounts: [wireMount({ host_path: '/a/../etc' })] }))],
    ['config.mounts[0].propagation', request(wireConfig({ mounts: [wireMount({ propagation: 7 })] }))],
    [
      'config.mounts[0].recursive_read_only',
      request(wireConfig({ mounts: [wireMount({ recursive_read_only: true, readonly: false })] })),
    ],
    [
      'config.mounts[0].recursive_read_only',
      request(
        wireConfig({
          mounts: [
            wireMount({
              recursive_read_only: true,
              readonly: true,
              propagation: 'PROPAGATION_HOST_TO_CONTAINER',
            }),
          ],
        }),
      ),
    ],
    [
      'config.mounts[0].uidMappings',
      request(
        wireConfig({ mounts: [wireMount({ uidMappings: [{ host_id: 1, container_id: 0, length: 1 }] })] }),
      ),
    ],
    ['config.mounts[0].readonly', request(wireConfig({ mounts: [imageMount({ readonly: false })] }))],
    ['config.mounts[0].host_path', request(wireConfig({ mounts: [imageMount({ host_path: '/srv/x' })] }))],
    [
      'config.mounts[0].image_sub_path',
      request(wireConfig({ mounts: [imageMount({ image_sub_path: 'a/../../etc' })] })),
    ],
    [
      'config.mounts[0].image_sub_path',
      request(wireConfig({ mounts: [imageMount({ image_sub_path: '/etc' })] })),
    ],
    [
      'config.mounts[0].propagation',
      request(wireConfig({ mounts: [imageMount({ propagation: 'PROPAGATION_HOST_TO_CONTAINER' })] })),
    ],
    [
      'config.devices[0].permissions',
      request(
        wireConfig({ devices: [{ container_path: '/dev/x', host_path: '/dev/x', permissions: 'rwx' }] }),
      ),
    ],
    [
      'config.devices[0].host_path',
      request(wireConfig({ devices: [{ container_path: '/dev/x', host_path: '', permissions: '' }] })),
    ],
    ['config.log_path', request(wireConfig({ log_path: '/var/log/x.log' }))],
    ['config.log_path', request(wireConfig({ log_path: 'app/../../x.log' }))],
    ['config.CDI_devices[0].name', request(wireConfig({ CDI_devices: [{ name: 'gpu0' }] }))],
    [
      'config.CDI_devices[1].name',
      request(wireConfig({ CDI_devices: [{ name: 'a.com/b=c' }, { name: 'a.com/b c=d' }] })),
    ],
    [
      'config.annotations["cdi.k8s.io/plugin"]',
      request(wireConfig({ annotations: { 'cdi.k8s.io/plugin': 'a.com/b=c,nonsense' } })),
    ],
    [`${R}.oom_score_adj`, withResources({ oom_score_adj: '1001' })],
    [`${R}.oom_score_adj`, withResources({ oom_score_adj: '-1001' })],
    [`${R}.cpu_shares`, withResources({ cpu_shares: '-1' })],
    [`${R}.cpu_period`, withResources({ cpu_period: '999' })],
    [`${R}.cpu_quota`, withResources({ cpu_quota: '-2' })],
    [`${R}.cpu_quota`, withResources({ cpu_quota: '10' })],
    [`${R}.memory_limit_in_bytes`, withResources({ memory_limit_in_bytes: '-5' })],
    [`${R}.memory_limit_in_bytes`, withResources({ memory_limit_in_bytes: '9223372036854775807' })],
    [`${R}.memory_swap_limit_in_bytes`, withResources({ memory_swap_limit_in_bytes: '-2' })],
    [`${R}.cpuset_cpus`, withResources({ cpuset_cpus: '0-a' })],
    [
      `${R}.hugepage_limits[0].page_size`,
      withResources({ hugepage_limits: [{ page_size: '../2MB', limit: '1' }] }),
    ],
    [`${R}.unified["../memory.max"]`, withResources({ unified: { '../memory.max': '1' } })],
    [`${R}.unified["cgroup.procs"]`, withResources({ unified: { 'cgroup.procs': '1' } })],
    [`${SC}.run_as_group`, withSecurity({ run_as_user: null })],
    [`${SC}.run_as_username`, withSecurity({ run_as_username: 'alice' })],
    [`${SC}.run_as_username`, withSecurity({ run_as_user: null, run_as_username: 'a:b' })],
    [`${SC}.run_as_user.value`, withSecurity({ run_as_user: { value: '-1' } })],
    [`${SC}.supplemental_groups[1]`, withSecurity({ supplemental_groups: ['1', '99999999999'] })],
    // An enum value the proto does not name arrives as its number.
    [`${SC}.supplemental_groups_policy`, withSecurity({ supplemental_groups_policy: 7 })],
    [
      `${SC}.capabilities.add_capabilities[0]`,
      withSecurity({
        capabilities: {
          add_capabilities: ['NET ADMIN'],
          drop_capabilities: [],
          add_ambient_capabilities: [],
        },
      }),
    ],
    [
      `${SC}.namespace_options.target_id`,
      withSecurity({
        namespace_options: { network: 'POD', pid: 'TARGET', ipc: 'POD', target_id: '', userns_options: null },
      }),
    ],
    [
      `${SC}.namespace_options.network`,
      withSecurity({
        namespace_options: {
          network: 'TARGET',
          pid: 'POD',
          ipc: 'POD',
          target_id: 'x',
          userns_options: null,
        },
      }),
    ],
    [
      `${SC}.namespace_options.ipc`,
      withSecurity({
        namespace_options: { network: 'POD', pid: 'POD', ipc: 12, target_id: '', userns_options: null },
      }),
    ],
    [
      `${SC}.namespace_options.userns_options.mode`,
      withSecurity({
        namespace_options: {
          network: 'POD',
          pid: 'POD',
          ipc: 'POD',
          target_id: '',
          userns_options: { mode: 'CONTAINER', uids: [], gids: [] },
        },
      }),
    ],
    // Mode POD is read as a pod's is: one mapping of each kind (whether they are the pod's is the
    // domain's check, at create).
    [
      `${SC}.namespace_options.userns_options.uids`,
      withSecurity({
        namespace_options: {
          network: 'POD',
          pid: 'POD',
          ipc: 'POD',
          target_id: '',
          userns_options: { mode: 'POD', uids: [], gids: [] },
        },
      }),
    ],
    // Lists, maps and strings berth keeps with the container, each bounded.
    ['config.command', request(wireConfig({ command: Array<string>(MAX_ARGS + 1).fill('a'), args: [] }))],
    [
      'config.command',
      request(wireConfig({ command: ['/bin/sh'], args: Array<string>(MAX_ARGS).fill('a') })),
    ],
    ['config.args[0]', request(wireConfig({ command: ['/bin/sh'], args: ['x'.repeat(10 * MiB)] }))],
    ['config.command', request(wireConfig({ command: ['/bin/sh'], args: Array<string>(9).fill(ARG_128K) }))],
    ['config.mounts', request(wireConfig({ mounts: Array<WireMount>(1025).fill(wireMount()) }))],
    [
      'config.devices',
      request(
        wireConfig({
          devices: Array<Received<'Device'>>(1025).fill({
            container_path: '/dev/x',
            host_path: '/dev/x',
            permissions: 'r',
          }),
        }),
      ),
    ],
    ['config.working_dir', request(wireConfig({ working_dir: `/${'x'.repeat(5000)}` }))],
    [
      'config.mounts[0].host_path',
      request(wireConfig({ mounts: [wireMount({ host_path: `/${'d/'.repeat(3000)}` })] })),
    ],
    [
      'config.image.user_specified_image',
      request(
        wireConfig({
          image: {
            image: 'sha256:abc',
            annotations: {},
            user_specified_image: `busybox:${'x'.repeat(10 * MiB)}`,
            runtime_handler: '',
            image_ref: '',
          },
        }),
      ),
    ],
    [
      `${R}.hugepage_limits`,
      withResources({ hugepage_limits: Array(65).fill({ page_size: '2MB', limit: '1' }) }),
    ],
    [`${R}.unified`, withResources({ unified: { 'memory.high': 'x'.repeat(300 * 1024) } })],
    [`${SC}.supplemental_groups`, withSecurity({ supplemental_groups: Array<string>(65_537).fill('1') })],
    [
      `${SC}.capabilities.drop_capabilities`,
      withSecurity({
        capabilities: {
          add_capabilities: [],
          drop_capabilities: Array<string>(65).fill('NET_RAW'),
          add_ambient_capabilities: [],
        },
      }),
    ],
    [`${SC}.masked_paths`, withSecurity({ masked_paths: Array<string>(1025).fill('/proc/kcore') })],
    [`${SC}.readonly_paths`, withSecurity({ readonly_paths: Array<string>(1025).fill('/proc/sys') })],
    [`${SC}.run_as_username`, withSecurity({ run_as_user: null, run_as_username: 'u'.repeat(256) })],
    [
      `${SC}.apparmor.localhost_ref`,
      withSecurity({ apparmor: { profile_type: 'Localhost', localhost_ref: 'p'.repeat(5000) } }),
    ],
    [`${SC}.masked_paths[0]`, withSecurity({ masked_paths: ['proc/kcore'] })],
    [`${SC}.readonly_paths[1]`, withSecurity({ readonly_paths: ['/proc/sys', ''] })],
  ];
  for (const [field, req] of cases) {
    test(field, () => rejects(() => toContainerSpec(req), field));
  }
});

// --- Filters --------------------------------------------------------------------------------------

test('ListContainers filter: empty fields are omitted, state is checked', () => {
  assert.deepEqual(toListFilter({ filter: null }), {});
  assert.deepEqual(
    toListFilter({ filter: { id: '', state: null, pod_sandbox_id: '', label_selector: {} } }),
    {} satisfies ContainerFilter,
  );
  assert.deepEqual(
    toListFilter({
      filter: {
        id: 'c0',
        state: { state: 'CONTAINER_RUNNING' },
        pod_sandbox_id: 'pod1',
        label_selector: { app: 'x' },
      },
    }),
    { id: 'c0', state: 'CONTAINER_RUNNING', podSandboxId: 'pod1', labelSelector: { app: 'x' } },
  );
  // CONTAINER_CREATED is the enum's zero value: a set state message with it still filters.
  assert.deepEqual(
    toListFilter({
      filter: { id: '', state: { state: 'CONTAINER_CREATED' }, pod_sandbox_id: '', label_selector: {} },
    }),
    { state: 'CONTAINER_CREATED' },
  );
  rejects(
    () => toListFilter({ filter: { id: '', state: { state: 9 }, pod_sandbox_id: '', label_selector: {} } }),
    'filter.state.state',
  );
  assert.deepEqual(toStatsFilter({ filter: { id: '', pod_sandbox_id: 'pod1', label_selector: {} } }), {
    podSandboxId: 'pod1',
  });
  assert.deepEqual(toStatsFilter({ filter: null }), {});
});

test('label selectors of ListContainers and ListContainerStats are bounded, naming the field', () => {
  const selector = (n: number, value = 'v'): Record<string, string> =>
    Object.fromEntries(Array.from({ length: n }, (_, i) => [`example.com/k${i}`, value]));
  const list = (label_selector: Record<string, string>) =>
    toListFilter({ filter: { id: '', state: null, pod_sandbox_id: '', label_selector } });
  const stats = (label_selector: Record<string, string>) =>
    toStatsFilter({ filter: { id: '', pod_sandbox_id: '', label_selector } });
  assert.equal(Object.keys(list(selector(MAX_SELECTOR_ENTRIES)).labelSelector ?? {}).length, 64);
  for (const filter of [list, stats]) {
    rejects(() => filter(selector(MAX_SELECTOR_ENTRIES + 1)), 'filter.label_selector');
    // The probe's selector: refused by counting, before any entry is looked at.
    rejects(() => filter(selector(500_000)), 'filter.label_selector');
    rejects(() => filter({ [`a/${'k'.repeat(400)}`]: 'v' }), 'filter.label_selector');
    rejects(() => filter(selector(2, 'x'.repeat(200 * 1024))), 'filter.label_selector');
    rejects(() => filter({ 'bad\nkey': 'v' }), 'filter.label_selector');
  }
});

// --- Views to the wire ----------------------------------------------------------------------------

test('ContainerStatus: every field, enum names and int64 strings', () => {
  const wire = toWireContainerStatus(view());
  assert.deepEqual(wire, {
    id: 'c0ffee',
    metadata: { name: 'app', attempt: 2 },
    state: 'CONTAINER_EXITED',
    created_at: '1700000000000000001',
    started_at: '1700000000000000002',
    finished_at: '1700000000000000003',
    exit_code: 137,
    image: { image: 'docker.io/library/busybox:1.36', user_specified_image: '' },
    image_ref: 'docker.io/library/busybox@sha256:def',
    reason: 'OOMKilled',
    message: 'killed',
    labels: { l: '1' },
    annotations: { a: '2' },
    mounts: [
      {
        container_path: '/data',
        host_path: '/srv/data',
        readonly: true,
        selinux_relabel: false,
        propagation: 'PROPAGATION_PRIVATE',
        recursive_read_only: true,
        uidMappings: [{ container_id: 0, host_id: 100000, length: 65536 }],
        gidMappings: [{ container_id: 0, host_id: 200000, length: 65536 }],
        image: null,
        image_sub_path: '',
      },
      {
        container_path: '/shared',
        host_path: '/mnt/shared',
        readonly: false,
        selinux_relabel: true,
        propagation: 'PROPAGATION_BIDIRECTIONAL',
        recursive_read_only: false,
        uidMappings: [],
        gidMappings: [],
        image: null,
        image_sub_path: '',
      },
      {
        container_path: '/in',
        host_path: '/mnt/in',
        readonly: false,
        selinux_relabel: false,
        propagation: 'PROPAGATION_HOST_TO_CONTAINER',
        recursive_read_only: false,
        uidMappings: [],
        gidMappings: [],
        image: null,
        image_sub_path: '',
      },
    ],
    log_path: '/var/log/pods/ns_pod_uid/app/2.log',
    resources: { linux: wireResources() },
    image_id: 'sha256:abc',
    user: { linux: { uid: '1000', gid: '3000', supplemental_groups: ['4000', '4001'] } },
  });
});

test('status mounts and resources round-trip through the request translation', () => {
  const v = view();
  const wire = toWireContainerStatus(v);
  const spec = toContainerSpec(
    request(
      wireConfig({
        mounts: wire.mounts.map((m) => wireMount({ ...m, image: null })),
        linux: { resources: wire.resources.linux, security_context: null },
      }),
    ),
  );
  assert.deepEqual(spec.mounts, v.mounts);
  assert.deepEqual(spec.resources, v.resources);
  assert.deepEqual(toResources('r', toWireResources(RESOURCES)), RESOURCES);
});

test('ListContainers item: image_ref is the image id (kubelet < 1.30 matches it to ListImages)', () => {
  assert.deepEqual(toWireContainer(view({ state: 'CONTAINER_RUNNING' })), {
    id: 'c0ffee',
    pod_sandbox_id: 'pod1',
    metadata: { name: 'app', attempt: 2 },
    image: { image: 'docker.io/library/busybox:1.36', user_specified_image: '' },
    image_ref: 'sha256:abc',
    state: 'CONTAINER_RUNNING',
    created_at: '1700000000000000001',
    labels: { l: '1' },
    annotations: { a: '2' },
    image_id: 'sha256:abc',
  });
});

test('ContainerStats: attributes and usage; missing parts stay null', () => {
  assert.deepEqual(toWireStats(STATS), {
    attributes: {
      id: 'c0ffee',
      metadata: { name: 'app', attempt: 2 },
      labels: { l: '1' },
      annotations: { a: '2' },
    },
    cpu: { timestamp: '1700000000000000010', usage_core_nano_seconds: { value: '123456789' }, psi: null },
    memory: {
      timestamp: '1700000000000000011',
      working_set_bytes: { value: '1000' },
      usage_bytes: { value: '2000' },
      rss_bytes: { value: '500' },
      page_faults: { value: '7' },
      major_page_faults: { value: '1' },
      psi: null,
    },
    swap: null,
    io: null,
    writable_layer: {
      timestamp: '1700000000000000012',
      fs_id: { mountpoint: '/var/lib/berth/containers/c0ffee/rootfs' },
      used_bytes: { value: '4096' },
      inodes_used: { value: '3' },
    },
  });
  const bare = toWireStats({ ...STATS, cpu: null, memory: null, writableLayer: null });
  assert.equal(bare.cpu, null);
  assert.equal(bare.memory, null);
  assert.equal(bare.writable_layer, null);
});

test('ContainerStats: PSI and swap in the kernel units CRI documents; an unlimited swap has no available', () => {
  const line = (total: string, avg10: number) => ({ total, avg10, avg60: 0.5, avg300: 0.25 });
  const wire = toWireStats({
    ...STATS,
    cpu: { ...STATS.cpu!, psi: { some: line('3647', 12.5), full: line('1200', 1.5) } },
    memory: { ...STATS.memory!, psi: { some: line('11166', 0), full: null } },
    swap: { timestamp: '1700000000000000013', usageBytes: '4096', availableBytes: null },
    io: { timestamp: '1700000000000000014', psi: { some: line('390', 0), full: line('390', 0) } },
  });
  assert.deepEqual(wire.cpu?.psi, {
    Some: { Total: '3647', Avg10: 12.5, Avg60: 0.5, Avg300: 0.25 },
    Full: { Total: '1200', Avg10: 1.5, Avg60: 0.5, Avg300: 0.25 },
  });
  assert.deepEqual(wire.memory?.psi, {
    Some: { Total: '11166', Avg10: 0, Avg60: 0.5, Avg300: 0.25 },
    Full: null,
  });
  assert.deepEqual(wire.swap, {
    timestamp: '1700000000000000013',
    swap_usage_bytes: { value: '4096' },
    swap_available_bytes: null,
  });
  assert.deepEqual(wire.io, {
    timestamp: '1700000000000000014',
    psi: {
      Some: { Total: '390', Avg10: 0, Avg60: 0.5, Avg300: 0.25 },
      Full: { Total: '390', Avg10: 0, Avg60: 0.5, Avg300: 0.25 },
    },
  });
  const limited = toWireStats({
    ...STATS,
    swap: { timestamp: '1', usageBytes: '0', availableBytes: '1048576' },
  });
  assert.deepEqual(limited.swap?.swap_available_bytes, { value: '1048576' });
});

// --- Handlers against a fake service --------------------------------------------------------------

interface Calls {
  create: { podSandboxId: string; spec: ContainerSpec }[];
  stop: { id: string; timeout: number }[];
  exec: { id: string; cmd: string[]; timeout: number }[];
  update: { id: string; resources: ContainerResources }[];
  list: ContainerFilter[];
}

/** A plain object with the public methods of ContainerService's parts; only the translation is under test. */
function fakeService(exec: Partial<ExecSyncResult> = {}) {
  const calls: Calls = { create: [], stop: [], exec: [], update: [], list: [] };
  const known = (id: string) => {
    if (!'c0ffee'.startsWith(id)) throw new NotFoundError('container', id);
  };
  const fake = {
    async create(podSandboxId: string, spec: ContainerSpec) {
      calls.create.push({ podSandboxId, spec });
      return 'c0ffee';
    },
    async start(id: string) {
      known(id);
    },
    async stop(id: string, timeout: number) {
      calls.stop.push({ id, timeout });
    },
    async remove() {},
    async status(id: string, verbose: boolean) {
      known(id);
      return verbose
        ? {
            view: view(),
            info: { pid: 4242, sandboxId: 'pod1', bundleDir: '/b', rootfs: '/r', runtimeSpec: {} },
          }
        : { view: view() };
    },
    list(filter: ContainerFilter) {
      calls.list.push(filter);
      return [view()];
    },
    async updateResources(id: string, resources: ContainerResources) {
      calls.update.push({ id, resources });
    },
    async reopenLog(id: string) {
      known(id);
    },
    async execSync(id: string, cmd: string[], timeout: number): Promise<ExecSyncResult> {
      known(id);
      calls.exec.push({ id, cmd, timeout });
      return {
        stdout: Buffer.from('out\n'),
        stderr: Buffer.from([0xff, 0x00]),
        exitCode: 3,
        timedOut: false,
        ...exec,
      };
    },
    async stats(id: string) {
      known(id);
      return STATS;
    },
    async listStats() {
      return [STATS];
    },
  };
  const parts = { lifecycle: fake, exec: fake, stats: fake, views: fake };
  return { calls, service: parts as unknown as ContainerService };
}

/** Calls a handler as the edge would, outside gRPC, so the typed error itself is seen. */
function invoke<Req, Res>(handler: UnaryHandler<Req, Res>, req: Req): Promise<Res> {
  return handler(req, { signal: new AbortController().signal });
}

test('StopContainer: the int64 timeout becomes seconds; negative means now', async () => {
  const { calls, service } = fakeService();
  const stop = containerHandlers(service).StopContainer;
  await invoke(stop, { container_id: 'c0', timeout: '30' });
  await invoke(stop, { container_id: 'c0', timeout: '-5' });
  assert.deepEqual(calls.stop, [
    { id: 'c0', timeout: 30 },
    { id: 'c0', timeout: 0 },
  ]);
  await assert.rejects(invoke(stop, { container_id: '', timeout: '1' }), InvalidArgumentError);
});

test('ExecSync: cmd is required; a timed-out command is DEADLINE_EXCEEDED', async () => {
  const { service } = fakeService({ timedOut: true });
  const exec = containerHandlers(service).ExecSync;
  await assert.rejects(invoke(exec, { container_id: 'c0', cmd: [], timeout: '0' }), (err: unknown) => {
    assert.ok(err instanceof InvalidArgumentError);
    assert.equal(err.field, 'cmd');
    return true;
  });
  await assert.rejects(
    invoke(exec, { container_id: 'c0', cmd: ['sleep', '9'], timeout: '1' }),
    (err: unknown) => {
      assert.ok(err instanceof DeadlineExceededError);
      assert.equal(grpcCode(err), status.DEADLINE_EXCEEDED);
      assert.match(err.message, /timeout 1s exceeded/);
      return true;
    },
  );
});

test("ExecSync's cmd is bounded as execve bounds it, naming the field", async () => {
  const { calls, service } = fakeService();
  const exec = containerHandlers(service).ExecSync;
  const refused = async (cmd: string[], field: string): Promise<void> => {
    await assert.rejects(invoke(exec, { container_id: 'c0', cmd, timeout: '0' }), (err: unknown) => {
      assert.ok(err instanceof InvalidArgumentError, String(err));
      assert.equal(err.field, field);
      return true;
    });
  };
  // The probe's 10 MB command; more arguments than MAX_ARGS; more than 1 MiB in all.
  await refused(['sh', 'x'.repeat(10 * MiB)], 'cmd[1]');
  await refused(Array<string>(MAX_ARGS + 1).fill('a'), 'cmd');
  await refused(['sh', ...Array<string>(9).fill(ARG_128K)], 'cmd');
  await refused([`/${'p'.repeat(4095)}`], 'cmd[0]');
  const before = calls.exec.length;
  await invoke(exec, { container_id: 'c0', cmd: ['sh', ...Array<string>(7).fill(ARG_128K)], timeout: '0' });
  await invoke(exec, { container_id: 'c0', cmd: Array<string>(MAX_ARGS).fill('a'), timeout: '0' });
  assert.equal(calls.exec.length, before + 2);
});

test('UpdateContainerResources: linux resources are validated like CreateContainer', async () => {
  const { calls, service } = fakeService();
  const update = containerHandlers(service).UpdateContainerResources;
  const request = (linux: WireLinuxContainerResources | null) => ({
    container_id: 'c0',
    linux,
    windows: null,
    annotations: {},
  });
  await invoke(update, request(wireResources()));
  assert.deepEqual(calls.update, [{ id: 'c0', resources: RESOURCES }]);
  await assert.rejects(invoke(update, request(wireResources({ oom_score_adj: '2000' }))), (err) => {
    assert.ok(err instanceof InvalidArgumentError);
    assert.equal(err.field, 'linux.oom_score_adj');
    return true;
  });
  await assert.rejects(invoke(update, request(null)), InvalidArgumentError);
});

// --- Over gRPC ------------------------------------------------------------------------------------

describe('over gRPC on a unix socket', () => {
  let dir = '';
  let server: Server | undefined;
  let client: CriClient | undefined;
  const fake = fakeService();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-cri-container-'));
    const socket = join(dir, 'cri.sock');
    const edge = new RpcEdge(pino({ level: 'silent' }));
    const rpcs = containerHandlers(fake.service);
    server = new Server();
    server.addService(loadCriServices().runtime, {
      CreateContainer: edge.unary(rpcs.CreateContainer),
      ExecSync: edge.unary(rpcs.ExecSync),
      ContainerStatus: edge.unary(rpcs.ContainerStatus),
      ListContainers: edge.unary(rpcs.ListContainers),
      ListContainerStats: edge.unary(rpcs.ListContainerStats),
      ContainerStats: edge.unary(rpcs.ContainerStats),
      CheckpointContainer: edge.unimplemented(),
      Exec: edge.unimplemented(),
    });
    await new Promise<void>((resolve, reject) =>
      server?.bindAsync(`unix://${socket}`, ServerCredentials.createInsecure(), (err) =>
        err ? reject(err) : resolve(),
      ),
    );
    client = new CriClient(socket);
  });

  after(async () => {
    client?.close();
    server?.forceShutdown();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const call = <T = Record<string, unknown>>(rpc: string, req: object) => {
    assert.ok(client);
    return client.call<T>(rpc, req);
  };

  const grpcError = (code: status, detail: RegExp) => (err: unknown) => {
    const e = err as ServiceError;
    assert.equal(e.code, code, `expected ${status[code]}, got ${status[e.code]}: ${e.details}`);
    assert.match(e.details, detail);
    return true;
  };

  test('CreateContainer decodes the wire form into the same spec as the pure translation', async () => {
    const config = wireConfig();
    const res = await call<{ container_id: string }>('CreateContainer', { pod_sandbox_id: 'pod1', config });
    assert.equal(res.container_id, 'c0ffee');
    const created = fake.calls.create.at(-1);
    assert.deepEqual(created?.podSandboxId, 'pod1');
    assert.deepEqual(created?.spec, toContainerSpec(request(config)));
  });

  test('CreateContainer with a bad config is INVALID_ARGUMENT naming the field', async () => {
    const config = wireConfig({ mounts: [wireMount({ container_path: 'relative' })] });
    await assert.rejects(
      call('CreateContainer', { pod_sandbox_id: 'pod1', config }),
      grpcError(status.INVALID_ARGUMENT, /^config\.mounts\[0\]\.container_path: /),
    );
    await assert.rejects(
      call('CreateContainer', {
        pod_sandbox_id: 'pod1',
        config: wireConfig({
          linux: { resources: null, security_context: wireSecurity({ run_as_user: null }) },
        }),
      }),
      grpcError(status.INVALID_ARGUMENT, /^config\.linux\.security_context\.run_as_group: /),
    );
  });

  test('a request holding more values than berth decodes is INVALID_ARGUMENT naming the field', async () => {
    const lists = fake.calls.list.length;
    const label_selector = Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`k${i}`, 'v']));
    await assert.rejects(
      call('ListContainers', { filter: { label_selector } }),
      grpcError(status.INVALID_ARGUMENT, /^filter\.label_selector: too many values/),
    );
    await assert.rejects(
      call('ExecSync', { container_id: 'c0', cmd: Array<string>(200_000).fill('a') }),
      grpcError(status.INVALID_ARGUMENT, /^cmd: too many values/),
    );
    // Refused before it was decoded: the handler never saw it.
    assert.equal(fake.calls.list.length, lists);
  });

  test('ExecSync returns stdout and stderr as Buffers, bytes intact', async () => {
    const res = await call<{ stdout: unknown; stderr: unknown; exit_code: number }>('ExecSync', {
      container_id: 'c0',
      cmd: ['cat', '/etc/hostname'],
      timeout: '5',
    });
    assert.ok(Buffer.isBuffer(res.stdout));
    assert.ok(Buffer.isBuffer(res.stderr));
    assert.equal(res.stdout.toString(), 'out\n');
    assert.deepEqual([...res.stderr], [0xff, 0x00]);
    assert.equal(res.exit_code, 3);
    assert.deepEqual(fake.calls.exec.at(-1), { id: 'c0', cmd: ['cat', '/etc/hostname'], timeout: 5 });
  });

  test('a NotFoundError from the service is NOT_FOUND', async () => {
    await assert.rejects(
      call('ContainerStatus', { container_id: 'deadbeef' }),
      grpcError(status.NOT_FOUND, /container "deadbeef" not found/),
    );
    await assert.rejects(
      call('ExecSync', { container_id: 'deadbeef', cmd: ['true'] }),
      grpcError(status.NOT_FOUND, /not found/),
    );
  });

  test('ContainerStatus survives encoding: enum names, int64 strings, verbose info', async () => {
    const res = await call<{ status: Record<string, unknown>; info: Record<string, string> }>(
      'ContainerStatus',
      {
        container_id: 'c0',
        verbose: true,
      },
    );
    const st = res.status;
    assert.equal(st.state, 'CONTAINER_EXITED');
    assert.equal(st.finished_at, '1700000000000000003');
    assert.equal(st.exit_code, 137);
    const mounts = st.mounts as { propagation: string; recursive_read_only: boolean }[];
    assert.deepEqual(
      mounts.map((m) => m.propagation),
      ['PROPAGATION_PRIVATE', 'PROPAGATION_BIDIRECTIONAL', 'PROPAGATION_HOST_TO_CONTAINER'],
    );
    assert.equal((st.resources as { linux: { oom_score_adj: string } }).linux.oom_score_adj, '-997');
    assert.deepEqual((st.user as { linux: unknown }).linux, {
      uid: '1000',
      gid: '3000',
      supplemental_groups: ['4000', '4001'],
    });
    assert.equal(JSON.parse(res.info.info ?? '{}').pid, 4242);
  });

  test('ListContainers, ListContainerStats and ContainerStats encode', async () => {
    const list = await call<{ containers: { id: string; state: string }[] }>('ListContainers', {
      filter: { state: { state: 'CONTAINER_CREATED' }, label_selector: { a: 'b' } },
    });
    assert.deepEqual(
      list.containers.map((c) => [c.id, c.state]),
      [['c0ffee', 'CONTAINER_EXITED']],
    );
    assert.deepEqual(fake.calls.list.at(-1), { state: 'CONTAINER_CREATED', labelSelector: { a: 'b' } });
    const stats = await call<{ stats: { memory: { working_set_bytes: { value: string } } }[] }>(
      'ListContainerStats',
      {},
    );
    assert.equal(stats.stats[0]?.memory.working_set_bytes.value, '1000');
    const one = await call<{ stats: { cpu: { usage_core_nano_seconds: { value: string } } } }>(
      'ContainerStats',
      {
        container_id: 'c0',
      },
    );
    assert.equal(one.stats.cpu.usage_core_nano_seconds.value, '123456789');
  });

  test('rpcs without a handler in the table answer UNIMPLEMENTED', async () => {
    await assert.rejects(
      call('CheckpointContainer', { container_id: 'c0' }),
      grpcError(status.UNIMPLEMENTED, /CheckpointContainer/),
    );
    await assert.rejects(
      call('Exec', { container_id: 'c0', cmd: ['sh'] }),
      grpcError(status.UNIMPLEMENTED, /Exec/),
    );
  });
});
