import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ContainerMount, ContainerSpec } from '../../src/model/container.js';
import {
  capabilitiesInMask,
  capabilitiesUpTo,
  containerCapabilities,
  effectiveCapabilities,
  heldCapabilities,
  KNOWN_CAPABILITIES,
  normalizeCapability,
} from '../../src/oci/capabilities.js';
import { buildContainerSpec, linuxResources, processArgs, processEnv } from '../../src/oci/container.js';
import type { ContainerSpecInput } from '../../src/oci/container-input.js';
import { deviceFromPath, hostDevices, splitDev } from '../../src/oci/devices.js';
import { resolveMounts } from '../../src/container/mount-sources.js';
import type { SourcePropagation } from '../../src/oci/mounts.js';
import {
  mountContaining,
  parseMountInfo,
  propagationOf,
  type MountInfoEntry,
} from '../../src/mounts/mountinfo.js';
import { DEFAULT_CAPABILITIES, DEFAULT_MASKED_PATHS, DEFAULT_READONLY_PATHS } from '../../src/oci/infra.js';
import type { Mount } from '../../src/oci/spec.js';
import { containerSecurity, containerSpec, sandboxSpec } from '../harness/container-spec.js';

const sandbox = sandboxSpec();

function input(spec: ContainerSpec, over: Partial<ContainerSpecInput> = {}): ContainerSpecInput {
  return {
    containerId: 'c1',
    sandboxId: 's1',
    spec,
    sandbox,
    image: { name: 'busybox', config: { Cmd: ['sh'] } },
    rootfsPath: '/var/lib/berth/containers/c1/rootfs',
    user: { uid: 0, gid: 0, additionalGids: [] },
    podNamespaces: {
      network: '/run/berth/netns/pod',
      ipc: '/proc/100/ns/ipc',
      uts: '/proc/100/ns/uts',
      pid: '/proc/100/ns/pid',
    },
    targetPid: null,
    sandboxFiles: { resolvConf: '/sb/resolv.conf', hostname: '/sb/hostname', hosts: '/sb/hosts' },
    cgroupsPath: '/kubepods/c1',
    oomScoreAdj: 5,
    seccomp: null,
    apparmorProfile: null,
    devices: [],
    deviceRules: [],
    cgroupNamespace: false,
    mounts: spec.mounts.map((m) => ({ ...m, sourcePropagation: 'shared' as const })),
    capabilities: containerCapabilities(spec.security, KNOWN_CAPABILITIES),
    ...over,
  };
}

function mount(containerPath: string, over: Partial<ContainerMount> = {}): ContainerMount {
  return {
    containerPath,
    hostPath: `/host${containerPath}`,
    readonly: false,
    recursiveReadOnly: false,
    selinuxRelabel: false,
    propagation: 'PRIVATE',
    idmap: null,
    image: null,
    ...over,
  };
}

function dest(mounts: Mount[] | undefined, d: string): Mount | undefined {
  return mounts?.find((m) => m.destination === d);
}

// ---- processArgs

test('processArgs: command replaces entrypoint and cmd, args follow the command', () => {
  const image = { Entrypoint: ['/entry'], Cmd: ['cmd-arg'] };
  assert.deepEqual(processArgs(containerSpec({ command: ['/bin/x'], args: ['-a'] }), image), [
    '/bin/x',
    '-a',
  ]);
  assert.deepEqual(processArgs(containerSpec({ command: ['/bin/x'] }), image), ['/bin/x']);
});

test('processArgs: only args keeps the entrypoint and replaces cmd', () => {
  const image = { Entrypoint: ['/entry', '-v'], Cmd: ['cmd-arg'] };
  assert.deepEqual(processArgs(containerSpec({ args: ['a', 'b'] }), image), ['/entry', '-v', 'a', 'b']);
});

test('processArgs: neither gives entrypoint + cmd, with null fields as empty', () => {
  assert.deepEqual(processArgs(containerSpec(), { Entrypoint: ['/entry'], Cmd: ['x'] }), ['/entry', 'x']);
  assert.deepEqual(processArgs(containerSpec(), { Entrypoint: null, Cmd: ['sh'] }), ['sh']);
});

test('processArgs: nothing at all is an InvalidArgumentError on config.command', () => {
  assert.throws(() => processArgs(containerSpec(), { Entrypoint: null, Cmd: null }), {
    name: 'InvalidArgumentError',
    field: 'config.command',
  });
});

// ---- processEnv

test('processEnv: image first, config overrides in place, new keys appended, defaults added', () => {
  const env = processEnv(
    containerSpec({
      envs: [
        { key: 'B', value: 'config-b' },
        { key: 'C', value: 'c=with=equals' },
      ],
    }),
    { Env: ['A=1', 'B=image-b', 'PATH=/img/bin'] },
    'pod-host',
  );
  assert.deepEqual(env, ['HOSTNAME=pod-host', 'A=1', 'B=config-b', 'PATH=/img/bin', 'C=c=with=equals']);
});

test('processEnv: default PATH when absent, HOSTNAME kept when given', () => {
  const env = processEnv(containerSpec({ envs: [{ key: 'HOSTNAME', value: 'mine' }] }), {}, 'pod-host');
  assert.deepEqual(env, [
    'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    'HOSTNAME=mine',
  ]);
});

// ---- process

test('process: cwd, terminal, user, oom score, no new privs', () => {
  const spec = containerSpec({ tty: true, workingDir: '' }, { noNewPrivs: true });
  const out = buildContainerSpec(
    input(spec, {
      image: { name: 'img', config: { Cmd: ['sh'], WorkingDir: '/srv' } },
      user: { uid: 1000, gid: 2000, additionalGids: [3000] },
    }),
  );
  assert.equal(out.process?.cwd, '/srv');
  assert.equal(out.process?.terminal, true);
  assert.deepEqual(out.process?.user, { uid: 1000, gid: 2000, additionalGids: [3000] });
  assert.equal(out.process?.oomScoreAdj, 5);
  assert.equal(out.process?.noNewPrivileges, true);
  const withDir = buildContainerSpec(input(containerSpec({ workingDir: '/work' })));
  assert.equal(withDir.process?.cwd, '/work');
  assert.equal(buildContainerSpec(input(containerSpec())).process?.cwd, '/');
});

// ---- capabilities

const ALL = KNOWN_CAPABILITIES;

test('capabilities: the runtime default set', () => {
  const caps = effectiveCapabilities(containerSecurity(), ALL);
  assert.deepEqual(new Set(caps), new Set(DEFAULT_CAPABILITIES));
  const out = buildContainerSpec(input(containerSpec()));
  assert.deepEqual(new Set(out.process?.capabilities?.bounding), new Set(DEFAULT_CAPABILITIES));
  assert.deepEqual(out.process?.capabilities?.effective, out.process?.capabilities?.bounding);
  assert.deepEqual(out.process?.capabilities?.permitted, out.process?.capabilities?.bounding);
  assert.deepEqual(out.process?.capabilities?.inheritable, []);
  assert.deepEqual(out.process?.capabilities?.ambient, []);
});

test('capabilities: add and drop, with or without CAP_ prefix, any case', () => {
  const caps = effectiveCapabilities(
    containerSecurity({
      addCapabilities: ['NET_ADMIN', 'CAP_SYS_TIME', 'sys_nice'],
      dropCapabilities: ['KILL', 'CAP_CHOWN'],
    }),
    ALL,
  );
  assert.ok(caps.includes('CAP_NET_ADMIN'));
  assert.ok(caps.includes('CAP_SYS_TIME'));
  assert.ok(caps.includes('CAP_SYS_NICE'));
  assert.ok(!caps.includes('CAP_KILL'));
  assert.ok(!caps.includes('CAP_CHOWN'));
  assert.equal(caps.length, DEFAULT_CAPABILITIES.length + 3 - 2);
});

test('capabilities: drop ALL then add gives exactly the adds', () => {
  const caps = effectiveCapabilities(
    containerSecurity({ dropCapabilities: ['ALL'], addCapabilities: ['NET_BIND_SERVICE'] }),
    ALL,
  );
  assert.deepEqual(caps, ['CAP_NET_BIND_SERVICE']);
  assert.deepEqual(effectiveCapabilities(containerSecurity({ dropCapabilities: ['ALL'] }), ALL), []);
});

test('capabilities: add ALL gives every capability, minus named drops', () => {
  assert.deepEqual(effectiveCapabilities(containerSecurity({ addCapabilities: ['ALL'] }), ALL), [...ALL]);
  const caps = effectiveCapabilities(
    containerSecurity({ addCapabilities: ['ALL'], dropCapabilities: ['SYS_ADMIN'] }),
    ALL,
  );
  assert.equal(caps.length, ALL.length - 1);
  assert.ok(!caps.includes('CAP_SYS_ADMIN'));
  // A capability both added and dropped is dropped.
  assert.ok(
    !effectiveCapabilities(
      containerSecurity({ addCapabilities: ['SYS_ADMIN'], dropCapabilities: ['SYS_ADMIN'] }),
      ALL,
    ).includes('CAP_SYS_ADMIN'),
  );
});

test('capabilities: an unknown name names its field', () => {
  assert.throws(() => effectiveCapabilities(containerSecurity({ addCapabilities: ['NOT_A_CAP'] }), ALL), {
    name: 'InvalidArgumentError',
    field: 'config.linux.security_context.capabilities.add_capabilities',
  });
  assert.throws(() => effectiveCapabilities(containerSecurity({ dropCapabilities: ['CAP_NOPE'] }), ALL), {
    name: 'InvalidArgumentError',
    field: 'config.linux.security_context.capabilities.drop_capabilities',
  });
  assert.throws(() => buildContainerSpec(input(containerSpec({}, { addAmbientCapabilities: ['BOGUS'] }))), {
    field: 'config.linux.security_context.capabilities.add_ambient_capabilities',
  });
});

test('capabilities: ambient ones are also inheritable and in the set', () => {
  const out = buildContainerSpec(
    input(containerSpec({}, { dropCapabilities: ['ALL'], addAmbientCapabilities: ['NET_BIND_SERVICE'] })),
  );
  const caps = out.process?.capabilities;
  assert.deepEqual(caps?.ambient, ['CAP_NET_BIND_SERVICE']);
  assert.deepEqual(caps?.inheritable, ['CAP_NET_BIND_SERVICE']);
  assert.deepEqual(caps?.bounding, ['CAP_NET_BIND_SERVICE']);
});

test('capabilities: the spec takes the sets its caller worked out once, and works out none itself', () => {
  const spec = containerSpec({}, { addCapabilities: ['NET_ADMIN'] });
  const capabilities = { set: ['CAP_KILL', 'CAP_NET_RAW'], ambient: ['CAP_NET_RAW'] };
  const out = buildContainerSpec(input(spec, { capabilities }));
  assert.deepEqual(out.process?.capabilities?.bounding, ['CAP_KILL', 'CAP_NET_RAW']);
  assert.deepEqual(out.process?.capabilities?.ambient, ['CAP_NET_RAW']);
});

test('capabilities: kernel list by cap_last_cap, names normalised', () => {
  assert.equal(capabilitiesUpTo(37).length, 38);
  assert.equal(capabilitiesUpTo(37).at(-1), 'CAP_AUDIT_READ');
  assert.equal(capabilitiesUpTo(99).length, KNOWN_CAPABILITIES.length);
  assert.equal(normalizeCapability('net_raw'), 'CAP_NET_RAW');
  assert.equal(normalizeCapability('CAP_BPF'), 'CAP_BPF');
  assert.equal(normalizeCapability('WHAT'), null);
  assert.equal(heldCapabilities('35\n', '').length, 36);
  assert.deepEqual(heldCapabilities('', ''), [...KNOWN_CAPABILITIES], 'unreadable files do not narrow');
  // Only what the daemon's own bounding set holds: here all but CAP_SYS_RESOURCE (24).
  const held = heldCapabilities('', 'Name:\tberthd\nCapBnd:\t000001fffeffffff\nCapAmb:\t0\n');
  assert.equal(held.length, KNOWN_CAPABILITIES.length - 1);
  assert.ok(!held.includes('CAP_SYS_RESOURCE'));
  assert.deepEqual(capabilitiesInMask(0b101n), ['CAP_CHOWN', 'CAP_DAC_READ_SEARCH']);
});

// ---- namespaces

test('namespaces: pid POD joins the infra, with ipc and uts, the netns pin, a new mount ns', () => {
  const spec = containerSpec({}, { namespaces: { network: 'POD', pid: 'POD', ipc: 'POD', targetId: '' } });
  assert.deepEqual(buildContainerSpec(input(spec)).linux?.namespaces, [
    { type: 'pid', path: '/proc/100/ns/pid' },
    { type: 'ipc', path: '/proc/100/ns/ipc' },
    { type: 'uts', path: '/proc/100/ns/uts' },
    { type: 'mount' },
    { type: 'network', path: '/run/berth/netns/pod' },
  ]);
});

test('namespaces: a pod without infra is joined through its pins; pid POD without a pod pid ns is a new one', () => {
  const spec = containerSpec({}, { namespaces: { network: 'POD', pid: 'POD', ipc: 'POD', targetId: '' } });
  const podNamespaces = { network: '/run/berth/netns/pod', ipc: '/sb/ns/ipc', uts: '/sb/ns/uts', pid: null };
  assert.deepEqual(buildContainerSpec(input(spec, { podNamespaces })).linux?.namespaces, [
    { type: 'pid' },
    { type: 'ipc', path: '/sb/ns/ipc' },
    { type: 'uts', path: '/sb/ns/uts' },
    { type: 'mount' },
    { type: 'network', path: '/run/berth/netns/pod' },
  ]);
  // A host-ipc pod without infra has no ipc pin: the container keeps the host's.
  const hostIpc = { ...podNamespaces, ipc: null };
  assert.deepEqual(
    buildContainerSpec(input(spec, { podNamespaces: hostIpc })).linux?.namespaces?.map((n) => n.type),
    ['pid', 'uts', 'mount', 'network'],
  );
});

test('namespaces: pid CONTAINER is a new pid ns', () => {
  const out = buildContainerSpec(input(containerSpec()));
  assert.deepEqual(out.linux?.namespaces?.[0], { type: 'pid' });
  assert.equal(out.hostname, undefined, 'the uts ns is joined, so no hostname');
});

test('namespaces: a cgroup ns of its own where asked (cgroup v2), never for a privileged container', () => {
  const types = (spec: ReturnType<typeof containerSpec>, cgroupNamespace: boolean): string[] =>
    (buildContainerSpec(input(spec, { cgroupNamespace })).linux?.namespaces ?? []).map((n) => n.type);
  assert.ok(types(containerSpec(), true).includes('cgroup'));
  assert.ok(!types(containerSpec(), false).includes('cgroup'));
  assert.ok(!types(containerSpec({}, { privileged: true }), true).includes('cgroup'));
});

test('namespaces: NODE pid and ipc are left out (the host ones)', () => {
  const spec = containerSpec({}, { namespaces: { network: 'POD', pid: 'NODE', ipc: 'NODE', targetId: '' } });
  assert.deepEqual(buildContainerSpec(input(spec)).linux?.namespaces, [
    { type: 'uts', path: '/proc/100/ns/uts' },
    { type: 'mount' },
    { type: 'network', path: '/run/berth/netns/pod' },
  ]);
});

test('namespaces: TARGET joins the target container pid ns; without a pid it is an error', () => {
  const spec = containerSpec(
    {},
    { namespaces: { network: 'POD', pid: 'TARGET', ipc: 'POD', targetId: 'c0' } },
  );
  const ns = buildContainerSpec(input(spec, { targetPid: 4242 })).linux?.namespaces;
  assert.deepEqual(ns?.[0], { type: 'pid', path: '/proc/4242/ns/pid' });
  assert.throws(() => buildContainerSpec(input(spec)), {
    field: 'config.linux.security_context.namespace_options.target_id',
  });
});

test('namespaces: host network has neither network nor uts entries, and no hostname', () => {
  const spec = containerSpec({}, { namespaces: { network: 'NODE', pid: 'POD', ipc: 'POD', targetId: '' } });
  const podNamespaces = {
    network: null,
    ipc: '/proc/100/ns/ipc',
    uts: '/proc/100/ns/uts',
    pid: '/proc/100/ns/pid',
  };
  const out = buildContainerSpec(input(spec, { podNamespaces }));
  assert.deepEqual(out.linux?.namespaces, [
    { type: 'pid', path: '/proc/100/ns/pid' },
    { type: 'ipc', path: '/proc/100/ns/ipc' },
    { type: 'mount' },
  ]);
  assert.equal(out.hostname, undefined);
});

// ---- mounts

test('mounts: standard ones, cgroup ro, pod files, private /dev/shm for pod ipc', () => {
  const out = buildContainerSpec(input(containerSpec()));
  const dests = out.mounts?.map((m) => m.destination);
  assert.deepEqual(dests, [
    '/proc',
    '/dev',
    '/dev/pts',
    '/dev/mqueue',
    '/sys',
    '/sys/fs/cgroup',
    '/dev/shm',
    '/etc/hostname',
    '/etc/resolv.conf',
    '/etc/hosts',
  ]);
  assert.ok(dest(out.mounts, '/sys')?.options?.includes('ro'));
  assert.deepEqual(dest(out.mounts, '/sys/fs/cgroup'), {
    destination: '/sys/fs/cgroup',
    type: 'cgroup',
    source: 'cgroup',
    options: ['nosuid', 'noexec', 'nodev', 'relatime', 'ro'],
  });
  assert.equal(dest(out.mounts, '/dev/shm')?.type, 'tmpfs');
  assert.deepEqual(dest(out.mounts, '/etc/hosts'), {
    destination: '/etc/hosts',
    type: 'bind',
    source: '/sb/hosts',
    options: ['rbind', 'rprivate', 'rw'],
  });
  assert.equal(dest(out.mounts, '/etc/resolv.conf')?.source, '/sb/resolv.conf');
  assert.equal(dest(out.mounts, '/etc/hostname')?.source, '/sb/hostname');
});

test('mounts: /dev/shm is the pod shm when given, the host one for host ipc', () => {
  const files = { resolvConf: '/sb/r', hostname: '/sb/h', hosts: '/sb/hosts', shm: '/sb/shm' };
  const pod = buildContainerSpec(input(containerSpec(), { sandboxFiles: files }));
  assert.deepEqual(dest(pod.mounts, '/dev/shm'), {
    destination: '/dev/shm',
    type: 'bind',
    source: '/sb/shm',
    options: ['rbind', 'rprivate', 'nosuid', 'nodev', 'noexec', 'rw'],
  });
  const hostIpc = containerSpec(
    {},
    { namespaces: { network: 'POD', pid: 'POD', ipc: 'NODE', targetId: '' } },
  );
  const host = buildContainerSpec(input(hostIpc));
  assert.deepEqual(dest(host.mounts, '/dev/shm'), {
    destination: '/dev/shm',
    type: 'bind',
    source: '/dev/shm',
    options: ['rbind', 'rprivate', 'rw'],
  });
});

test('mounts: pod files are read-only with a read-only root', () => {
  const out = buildContainerSpec(input(containerSpec({}, { readonlyRootfs: true })));
  assert.equal(out.root?.readonly, true);
  for (const d of ['/etc/hosts', '/etc/hostname', '/etc/resolv.conf']) {
    assert.ok(dest(out.mounts, d)?.options?.includes('ro'), d);
  }
});

test('mounts: a CRI mount replaces the default at its destination (kubelet /etc/hosts)', () => {
  const spec = containerSpec({
    mounts: [mount('/etc/hosts/', { hostPath: '/kubelet/etc-hosts' }), mount('/dev/shm')],
  });
  const out = buildContainerSpec(input(spec));
  const hosts = out.mounts?.filter((m) => m.destination === '/etc/hosts');
  assert.deepEqual(hosts, [
    {
      destination: '/etc/hosts',
      type: 'bind',
      source: '/kubelet/etc-hosts',
      options: ['rbind', 'rprivate', 'rw'],
    },
  ]);
  assert.equal(out.mounts?.filter((m) => m.destination === '/dev/shm').length, 1);
  assert.equal(dest(out.mounts, '/dev/shm')?.source, '/host/dev/shm');
});

test('mounts: CRI mounts come parents first, with propagation and ro/rro options', () => {
  const spec = containerSpec({
    mounts: [
      mount('/a/b/c', { readonly: true }),
      mount('/b', { propagation: 'HOST_TO_CONTAINER' }),
      mount('/a', { propagation: 'BIDIRECTIONAL' }),
      mount('/a/b', { readonly: true, recursiveReadOnly: true }),
    ],
  });
  const out = buildContainerSpec(input(spec));
  const cri = out.mounts?.slice(-4);
  assert.deepEqual(cri, [
    { destination: '/b', type: 'bind', source: '/host/b', options: ['rbind', 'rslave', 'rw'] },
    { destination: '/a', type: 'bind', source: '/host/a', options: ['rbind', 'rshared', 'rw'] },
    { destination: '/a/b', type: 'bind', source: '/host/a/b', options: ['rbind', 'rprivate', 'ro', 'rro'] },
    { destination: '/a/b/c', type: 'bind', source: '/host/a/b/c', options: ['rbind', 'rprivate', 'ro'] },
  ]);
  assert.equal(out.linux?.rootfsPropagation, 'rshared');
});

test('mounts: the sources are the resolved host paths, not the requested ones', () => {
  const spec = containerSpec({ mounts: [mount('/data', { hostPath: '/var/link-to-data' })] });
  const resolved = [
    {
      ...mount('/data', { hostPath: '/srv/real-data' }),
      requestedHostPath: '/var/link-to-data',
      sourcePropagation: 'private' as const,
    },
  ];
  const out = buildContainerSpec(input(spec, { mounts: resolved }));
  assert.equal(dest(out.mounts, '/data')?.source, '/srv/real-data');
});

test('mounts: rootfsPropagation rslave for HOST_TO_CONTAINER only, unset for private', () => {
  const slave = containerSpec({ mounts: [mount('/x', { propagation: 'HOST_TO_CONTAINER' })] });
  assert.equal(buildContainerSpec(input(slave)).linux?.rootfsPropagation, 'rslave');
  const priv = containerSpec({ mounts: [mount('/x')] });
  assert.equal(buildContainerSpec(input(priv)).linux?.rootfsPropagation, undefined);
});

test('mounts: rro needs readonly and PRIVATE', () => {
  for (const m of [
    mount('/x', { recursiveReadOnly: true }),
    mount('/x', { recursiveReadOnly: true, readonly: true, propagation: 'HOST_TO_CONTAINER' }),
  ]) {
    assert.throws(() => buildContainerSpec(input(containerSpec({ mounts: [m] }))), {
      name: 'InvalidArgumentError',
      field: 'config.mounts[0].recursive_read_only',
    });
  }
});

test('mounts: the spec refuses rro in the words of the edge: one rule for both', () => {
  const cases: [ContainerMount, RegExp][] = [
    [mount('/x', { recursiveReadOnly: true }), /requires readonly to be set/],
    [
      mount('/x', { recursiveReadOnly: true, readonly: true, propagation: 'BIDIRECTIONAL' }),
      /requires PROPAGATION_PRIVATE/,
    ],
  ];
  for (const [m, message] of cases) {
    assert.throws(() => buildContainerSpec(input(containerSpec({ mounts: [m] }))), { message });
  }
});

// ---- security

test('unprivileged: default masked and readonly paths, given ones when set, seccomp and apparmor', () => {
  const seccomp = { defaultAction: 'SCMP_ACT_ALLOW' };
  const out = buildContainerSpec(input(containerSpec(), { seccomp, apparmorProfile: 'berth-default' }));
  assert.deepEqual(out.linux?.maskedPaths, [...DEFAULT_MASKED_PATHS]);
  assert.deepEqual(out.linux?.readonlyPaths, [...DEFAULT_READONLY_PATHS]);
  assert.deepEqual(out.linux?.seccomp, seccomp);
  assert.equal(out.process?.apparmorProfile, 'berth-default');
  const given = buildContainerSpec(input(containerSpec({}, { maskedPaths: ['/bin/ls'], readonlyPaths: [] })));
  assert.deepEqual(given.linux?.maskedPaths, ['/bin/ls']);
  assert.deepEqual(given.linux?.readonlyPaths, []);
  assert.equal(given.linux?.seccomp, undefined);
  assert.equal(given.process?.apparmorProfile, undefined);
});

test('unprivileged: devices cgroup denies all but the standard and configured devices', () => {
  const device = { path: '/dev/fuse', type: 'c', major: 10, minor: 229, fileMode: 0o666, uid: 0, gid: 0 };
  const rule = { allow: true, type: 'c', major: 10, minor: 229, access: 'rw' };
  const out = buildContainerSpec(input(containerSpec(), { devices: [device], deviceRules: [rule] }));
  const rules = out.linux?.resources?.devices ?? [];
  assert.deepEqual(rules[0], { allow: false, access: 'rwm' });
  const allowed = rules.slice(1).map((r) => `${r.type} ${r.major}:${r.minor ?? '*'} ${r.access}`);
  assert.deepEqual(allowed, [
    'c 1:3 rwm',
    'c 1:5 rwm',
    'c 1:7 rwm',
    'c 1:8 rwm',
    'c 1:9 rwm',
    'c 5:0 rwm',
    'c 5:1 rwm',
    'c 5:2 rwm',
    'c 136:* rwm',
    'c 10:229 rw',
  ]);
  assert.deepEqual(out.linux?.devices, [device]);
});

test('privileged: all capabilities, no masks, rw sys and cgroup, all devices, no seccomp or apparmor', () => {
  const device = { path: '/dev/sda', type: 'b', major: 8, minor: 0 };
  const spec = containerSpec({}, { privileged: true, maskedPaths: ['/x'] });
  const out = buildContainerSpec(
    input(spec, {
      devices: [device],
      seccomp: { defaultAction: 'SCMP_ACT_ERRNO' },
      apparmorProfile: 'p',
      capabilities: containerCapabilities(spec.security, capabilitiesUpTo(40)),
    }),
  );
  assert.deepEqual(out.process?.capabilities?.bounding, [...KNOWN_CAPABILITIES]);
  assert.equal(out.linux?.maskedPaths, undefined);
  assert.equal(out.linux?.readonlyPaths, undefined);
  assert.ok(!dest(out.mounts, '/sys')?.options?.includes('ro'));
  assert.ok(dest(out.mounts, '/sys/fs/cgroup')?.options?.includes('rw'));
  assert.deepEqual(out.linux?.resources?.devices, [{ allow: true, access: 'rwm' }]);
  assert.deepEqual(out.linux?.devices, [device]);
  assert.equal(out.linux?.seccomp, undefined);
  assert.equal(out.process?.apparmorProfile, undefined);
});

// ---- resources

test('resources: zeros are left out', () => {
  assert.deepEqual(linuxResources(containerSpec().resources), {});
  const out = buildContainerSpec(input(containerSpec()));
  assert.deepEqual(Object.keys(out.linux?.resources ?? {}), ['devices']);
  assert.equal(out.linux?.cgroupsPath, '/kubepods/c1');
});

test('resources: cpu, memory with swap = limit by default, hugepages, unified', () => {
  const r = {
    ...containerSpec().resources,
    cpuShares: 512,
    cpuQuota: 50_000,
    cpuPeriod: 100_000,
    cpusetCpus: '0-1',
    cpusetMems: '0',
    memoryLimitBytes: 64 << 20,
    hugepageLimits: [{ pageSize: '2MB', limit: 0 }],
    unified: { 'memory.high': '1000000' },
  };
  assert.deepEqual(linuxResources(r), {
    cpu: { shares: 512, quota: 50_000, period: 100_000, cpus: '0-1', mems: '0' },
    memory: { limit: 64 << 20, swap: 64 << 20 },
    hugepageLimits: [{ pageSize: '2MB', limit: 0 }],
    unified: { 'memory.high': '1000000' },
  });
  assert.deepEqual(linuxResources({ ...r, memorySwapLimitBytes: 128 << 20 }).memory, {
    limit: 64 << 20,
    swap: 128 << 20,
  });
  assert.equal(
    linuxResources({ ...containerSpec().resources, memorySwapLimitBytes: 1 << 20 }).memory,
    undefined,
  );
});

// ---- annotations

test('annotations: the config ones plus the CRI ones, which win', () => {
  const spec = containerSpec({
    annotations: { 'x/y': 'z', 'io.kubernetes.cri.container-type': 'sandbox' },
  });
  const out = buildContainerSpec(input(spec, { image: { name: 'busybox:1', config: { Cmd: ['sh'] } } }));
  assert.deepEqual(out.annotations, {
    'x/y': 'z',
    'io.kubernetes.cri.container-type': 'container',
    'io.kubernetes.cri.container-name': 'app',
    'io.kubernetes.cri.image-name': 'busybox:1',
    'io.kubernetes.cri.sandbox-id': 's1',
    'io.kubernetes.cri.sandbox-name': 'pod-a',
    'io.kubernetes.cri.sandbox-namespace': 'ns-1',
    'io.kubernetes.cri.sandbox-uid': 'uid-1',
  });
});

test('the spec is plain JSON', () => {
  const out = buildContainerSpec(input(containerSpec({ mounts: [mount('/data')] })));
  assert.deepEqual(JSON.parse(JSON.stringify(out)), out);
  assert.equal(out.ociVersion, '1.0.2');
  assert.equal(out.root?.path, '/var/lib/berth/containers/c1/rootfs');
});

test('devices: dev_t split as glibc does', () => {
  assert.deepEqual(splitDev(0x0103n), { major: 1, minor: 3 });
  // major 259, minor 1 (nvme partitions): (259 << 8 | 1) with the high minor bits empty.
  assert.deepEqual(splitDev((259n << 8n) | 1n), { major: 259, minor: 1 });
  // A minor above 255 goes to bits 20 and up.
  assert.deepEqual(splitDev((8n << 8n) | (0x123n << 20n) | 0x45n), { major: 8, minor: 0x12345 });
});

test('deviceFromPath: a char device, with permissions normalised', async () => {
  const field = 'config.devices[0].host_path';
  const found = await deviceFromPath('/dev/null', '/dev/mynull', 'wr', field);
  assert.equal(found.devices.length, 1);
  assert.deepEqual(
    { ...found.devices[0], fileMode: undefined, uid: undefined, gid: undefined },
    {
      path: '/dev/mynull',
      type: 'c',
      major: 1,
      minor: 3,
      fileMode: undefined,
      uid: undefined,
      gid: undefined,
    },
  );
  assert.deepEqual(found.rules, [{ allow: true, type: 'c', major: 1, minor: 3, access: 'rw' }]);
  const all = await deviceFromPath('/dev/zero', '/dev/zero', '', field);
  assert.equal(all.rules[0]?.access, 'rwm');
});

test('deviceFromPath: not a device, missing, or bad permissions are InvalidArgument', async () => {
  const field = 'config.devices[2].host_path';
  await assert.rejects(deviceFromPath('/proc/self/status', '/x', '', field), {
    name: 'InvalidArgumentError',
    field,
  });
  await assert.rejects(deviceFromPath('/dev/berth-no-such-device', '/x', '', field), { field });
  await assert.rejects(deviceFromPath('/dev/null', '/x', 'rx', field), {
    field: 'config.devices[2].permissions',
  });
});

test('hostDevices: the host /dev without pts, shm, mqueue or the console', async () => {
  const devices = await hostDevices();
  const paths = devices.map((d) => d.path);
  assert.ok(paths.includes('/dev/null'));
  assert.ok(!paths.some((p) => /^\/dev\/(pts|shm|mqueue)\//.test(p) || p === '/dev/console'));
  assert.ok(devices.every((d) => d.type === 'c' || d.type === 'b'));
});

test('mountContaining picks the longest, topmost mount point; propagation needs shared or slave', () => {
  const table = parseMountInfo(
    [
      '27 1 254:0 / / rw,relatime - ext4 /dev/vda rw',
      '42 27 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw',
      '50 27 0:50 / /data rw,relatime master:3 - tmpfs tmpfs rw',
      '51 50 0:51 / /data rw,relatime - tmpfs tmpfs rw',
      '52 27 0:52 / /data\\040two rw,relatime shared:7 master:3 - tmpfs tmpfs rw',
    ].join('\n'),
  );
  assert.equal(mountContaining(table, '/data/x')?.mountId, 51);
  assert.equal(mountContaining(table, '/data')?.mountId, 51);
  assert.equal(mountContaining(table, '/datax')?.mountId, 27);
  assert.equal(mountContaining(table, '/run/netns/a')?.mountId, 42);
  assert.equal(mountContaining(table, '/data two/y')?.mountId, 52);
  const byId = (id: number): MountInfoEntry => table.find((e) => e.mountId === id) as MountInfoEntry;
  assert.equal(propagationOf(byId(27)), 'private');
  assert.equal(propagationOf(byId(42)), 'shared');
  assert.equal(propagationOf(byId(50)), 'slave');
  assert.equal(propagationOf(byId(52)), 'shared', 'shared and slave: it sends, so shared');
});

test('mounts: propagation needs a source on a shared (or, for HOST_TO_CONTAINER, slave) host mount', () => {
  const built = (propagation: ContainerMount['propagation'], sourcePropagation: SourcePropagation): void => {
    const m = { ...mount('/x', { propagation }), sourcePropagation };
    buildContainerSpec(input(containerSpec({ mounts: [m] }), { mounts: [m] }));
  };
  for (const [propagation, source] of [
    ['BIDIRECTIONAL', 'private'],
    ['BIDIRECTIONAL', 'slave'],
    ['HOST_TO_CONTAINER', 'private'],
  ] as const) {
    assert.throws(
      () => built(propagation, source),
      (err: Error) => {
        assert.equal(err.name, 'FailedPreconditionError');
        assert.match(err.message, /config\.mounts\[0\]/);
        assert.match(err.message, new RegExp(`${propagation} of /x \\(host path /host/x\\)`));
        assert.match(err.message, new RegExp(`is ${source}$`));
        return true;
      },
      `${propagation} on ${source}`,
    );
  }
  built('BIDIRECTIONAL', 'shared');
  built('HOST_TO_CONTAINER', 'shared');
  built('HOST_TO_CONTAINER', 'slave');
  built('PRIVATE', 'private');
});

test('resolveMounts: symlinks resolved, missing sources created, private mounts left alone', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'berth-mounts-'));
  try {
    await mkdir(join(dir, 'real'));
    await symlink(join(dir, 'real'), join(dir, 'link'));
    await symlink(join(dir, 'nowhere'), join(dir, 'dangling'));
    const got = await resolveMounts([
      mount('/a', { hostPath: join(dir, 'link') }),
      mount('/b', { hostPath: join(dir, 'new', 'dir') }),
    ]);
    assert.deepEqual(
      got.map((m) => [m.hostPath, m.requestedHostPath]),
      [
        [join(dir, 'real'), join(dir, 'link')],
        [join(dir, 'new', 'dir'), join(dir, 'new', 'dir')],
      ],
    );
    assert.equal(((await stat(join(dir, 'new', 'dir'))).mode & 0o777).toString(8), '755');
    assert.deepEqual(
      got.map((m) => m.sourcePropagation),
      ['private', 'private'],
      'no table read for private mounts',
    );
    await assert.rejects(
      resolveMounts([mount('/c'), mount('/d', { hostPath: join(dir, 'dangling', 'x') })]),
      {
        name: 'InvalidArgumentError',
      },
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("resolveMounts: never creates a source in berth's own dirs, never mounts its database or socket", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'berth-mounts-'));
  try {
    const root = join(dir, 'lib-berth');
    await mkdir(root);
    await writeFile(join(root, 'berth.db'), '');
    await symlink(root, join(dir, 'sneaky'));
    const guard = { noCreateUnder: [root], forbiddenSources: [join(root, 'berth.db')] };
    for (const hostPath of [join(root, 'new'), join(dir, 'sneaky', 'new', 'deeper')]) {
      await assert.rejects(resolveMounts([mount('/x', { hostPath })], guard), (err: Error) => {
        assert.equal(err.name, 'FailedPreconditionError');
        assert.match(err.message, /container runtime's own/);
        return true;
      });
    }
    assert.deepEqual(await readdir(root), ['berth.db'], 'nothing was created');
    await assert.rejects(
      resolveMounts([mount('/db', { hostPath: join(dir, 'sneaky', 'berth.db') })], guard),
      {
        name: 'FailedPreconditionError',
      },
    );
    // An existing dir of berth's own may still be mounted (a node agent mounting / sees it anyway).
    const got = await resolveMounts([mount('/lib', { hostPath: root })], guard);
    assert.equal(got[0]?.hostPath, root);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('deviceFromPath: a directory maps every device beneath it', async (t) => {
  const tun = await stat('/dev/net/tun').catch(() => null);
  if (!tun?.isCharacterDevice()) {
    t.skip('no /dev/net/tun on this host');
    return;
  }
  const found = await deviceFromPath('/dev/net', '/dev/vnet', 'rw', 'config.devices[0].host_path');
  assert.deepEqual(
    found.devices.map((d) => [d.path, d.type, d.major, d.minor]),
    [['/dev/vnet/tun', 'c', 10, 200]],
  );
});

test("namespaces: a pod's own user namespace is joined by its pin, with its mappings", () => {
  const spec = containerSpec(
    {},
    { namespaces: { network: 'POD', pid: 'CONTAINER', ipc: 'POD', targetId: '' } },
  );
  const mapping = (hostId: number) => [{ containerId: 0, hostId, length: 65536 }];
  const user = { path: '/sb/ns/user', uids: mapping(65536), gids: mapping(131072) };
  const podNamespaces = {
    network: '/run/berth/netns/pod',
    ipc: '/sb/ns/ipc',
    uts: '/sb/ns/uts',
    pid: null,
    user,
  };
  const linux = buildContainerSpec(input(spec, { podNamespaces })).linux;
  assert.deepEqual(linux?.namespaces?.at(-1), { type: 'user', path: '/sb/ns/user' });
  assert.deepEqual(linux?.uidMappings, [{ containerID: 0, hostID: 65536, size: 65536 }]);
  assert.deepEqual(linux?.gidMappings, [{ containerID: 0, hostID: 131072, size: 65536 }]);
  // The host's: none of it.
  const host = buildContainerSpec(input(spec, { podNamespaces: { ...podNamespaces, user: null } })).linux;
  assert.ok(!host?.namespaces?.some((n) => n.type === 'user'));
  assert.equal(host?.uidMappings, undefined);
});
