import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ALLOWED_PERSONALITIES,
  CLONE_NAMESPACE_FLAGS,
  defaultSeccompProfile,
  loadSeccompProfile,
  personalityRules,
  socketRules,
} from '../../src/oci/seccomp.js';
import type { LinuxSeccompArg, Seccomp } from '../../src/oci/spec.js';
import { buildInfraSpec, DEFAULT_CAPABILITIES } from '../../src/oci/infra.js';

/**
 * What runc makes of a profile, for one syscall and its arguments: the first matching rule's
 * action (runc splits a rule with several conditions on one argument into one rule per condition),
 * else the default. Rules here never conflict, so order does not matter. Arguments are 64-bit, as
 * the filter sees them on x86_64.
 */
function evaluate(profile: Seccomp, name: string, args: bigint[] = []): { action: string; errno?: number } {
  for (const rule of profile.syscalls ?? []) {
    if (!rule.names.includes(name)) continue;
    const conds = rule.args ?? [];
    const indexes = conds.map((c) => c.index);
    const split = new Set(indexes).size !== indexes.length;
    const match = split ? conds.some((c) => holds(c, args)) : conds.every((c) => holds(c, args));
    if (conds.length === 0 || match) return { action: rule.action, errno: rule.errnoRet };
  }
  return { action: profile.defaultAction, errno: profile.defaultErrnoRet };
}

function holds(c: LinuxSeccompArg, args: bigint[]): boolean {
  const x = args[c.index] ?? 0n;
  const v = BigInt(c.value);
  switch (c.op) {
    case 'SCMP_CMP_EQ':
      return x === v;
    case 'SCMP_CMP_NE':
      return x !== v;
    case 'SCMP_CMP_GT':
      return x > v;
    case 'SCMP_CMP_GE':
      return x >= v;
    case 'SCMP_CMP_LT':
      return x < v;
    case 'SCMP_CMP_LE':
      return x <= v;
    case 'SCMP_CMP_MASKED_EQ':
      return (x & v) === BigInt(c.valueTwo ?? 0);
    default:
      throw new Error(`unknown op ${c.op}`);
  }
}

const defaults = defaultSeccompProfile(DEFAULT_CAPABILITIES, 'x64');
const denied = (p: Seccomp, name: string, args?: bigint[]): boolean =>
  evaluate(p, name, args).action !== 'SCMP_ACT_ALLOW';
const EPERM = { action: 'SCMP_ACT_ERRNO', errno: 1 };

test('default profile: deny by default with EPERM, host architectures', () => {
  assert.equal(defaults.defaultAction, 'SCMP_ACT_ERRNO');
  assert.equal(defaults.defaultErrnoRet, 1);
  assert.deepEqual(defaults.architectures, ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32']);
  assert.deepEqual(defaultSeccompProfile([], 'arm64').architectures, ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM']);
  assert.equal(defaultSeccompProfile([], 'riscv-unknown').architectures, undefined);
  // runc drops rules whose action is the default one: every rule must allow, or fail differently.
  for (const rule of defaults.syscalls ?? []) {
    assert.ok(
      rule.action === 'SCMP_ACT_ALLOW' || (rule.action === 'SCMP_ACT_ERRNO' && rule.errnoRet !== 1),
      JSON.stringify(rule),
    );
  }
});

test('default profile: everyday syscalls are allowed', () => {
  for (const name of [
    'read',
    'write',
    'openat',
    'execve',
    'mmap',
    'chmod',
    'adjtimex',
    'clock_adjtime',
    'fork',
    'wait4',
    'futex',
    'rseq',
    'bind',
    'listen',
    'accept4',
    'connect',
    'sendto',
    'recvfrom',
    'epoll_pwait',
    'nanosleep',
    'clock_nanosleep',
    'getrandom',
    'prctl',
    'setuid',
    'capset',
    'statx',
    'close_range',
    'faccessat2',
    'fchmodat2',
    'pidfd_open',
    'socketcall',
    // CAP_SYS_CHROOT is in the runtime default capability set.
    'chroot',
  ]) {
    assert.ok(!denied(defaults, name), name);
  }
  assert.ok(!denied(defaults, 'socket', [2n]), 'AF_INET');
  assert.ok(!denied(defaults, 'socket', [1n]), 'AF_UNIX');
  assert.ok(!denied(defaults, 'socket', [16n]), 'AF_NETLINK');
  assert.ok(!denied(defaults, 'personality', [0xffffffffn]), 'query');
});

test('default profile: architecture-specific syscalls follow the architecture', () => {
  for (const name of ['arch_prctl', 'modify_ldt']) {
    assert.ok(!denied(defaults, name), name);
    assert.ok(denied(defaultSeccompProfile([], 'arm64'), name), `${name} on arm64`);
  }
  for (const name of ['set_tls', 'cacheflush', 'arm_fadvise64_64']) {
    assert.ok(!denied(defaultSeccompProfile([], 'arm64'), name), name);
    assert.ok(!denied(defaultSeccompProfile([], 'arm'), name), name);
    assert.ok(denied(defaults, name), `${name} on x64`);
  }
  const unknown = defaultSeccompProfile([], 'riscv-unknown');
  assert.ok(!denied(unknown, 'read'));
  assert.ok(denied(unknown, 'arch_prctl'));
});

test('default profile: dangerous syscalls fail with EPERM', () => {
  for (const name of [
    'init_module',
    'finit_module',
    'kexec_load',
    'kexec_file_load',
    'reboot',
    'swapon',
    'swapoff',
    'settimeofday',
    'clock_settime',
    'mount',
    'umount2',
    'pivot_root',
    'unshare',
    'setns',
    'sethostname',
    'setdomainname',
    'open_by_handle_at',
    'name_to_handle_at',
    'fsopen',
    'move_mount',
    'open_tree',
    'ptrace',
    'process_vm_readv',
    'process_vm_writev',
    'pidfd_getfd',
    'bpf',
    'perf_event_open',
    'userfaultfd',
    'keyctl',
    'add_key',
    'request_key',
    'acct',
    'iopl',
    'ioperm',
    'syslog',
    'quotactl',
    'lookup_dcookie',
    'fanotify_init',
    'nfsservctl',
    'uselib',
    'ustat',
    'sysfs',
    '_sysctl',
    'vm86',
    'kcmp',
    'io_uring_setup',
    'io_uring_enter',
    'io_uring_register',
    'get_mempolicy',
    'mbind',
    'migrate_pages',
    'move_pages',
    'vhangup',
    // Not in any list: a syscall berth has never heard of is denied.
    'some_future_syscall',
  ]) {
    assert.deepEqual(evaluate(defaults, name), EPERM, name);
  }
});

test('default profile: capabilities lift the matching denials', () => {
  const admin = defaultSeccompProfile([...DEFAULT_CAPABILITIES, 'CAP_SYS_ADMIN'], 'x64');
  for (const name of [
    'mount',
    'umount2',
    'unshare',
    'setns',
    'sethostname',
    'bpf',
    'perf_event_open',
    'syslog',
    'clone3',
    'fsopen',
    'name_to_handle_at',
  ]) {
    assert.ok(!denied(admin, name), name);
  }
  assert.ok(!denied(admin, 'clone', [0x10000000n]));
  assert.ok(denied(admin, 'ptrace'), 'SYS_ADMIN does not give ptrace');
  // Neither Docker's nor containerd's profile lets SYS_ADMIN have these.
  for (const name of ['pivot_root', 'swapon', 'kexec_load', 'keyctl']) assert.ok(denied(admin, name), name);
  const more = defaultSeccompProfile(
    [
      'CAP_SYS_PTRACE',
      'CAP_SYS_MODULE',
      'CAP_SYS_BOOT',
      'CAP_SYS_TIME',
      'CAP_SYSLOG',
      'CAP_SYS_RAWIO',
      'CAP_SYS_PACCT',
      'CAP_SYS_TTY_CONFIG',
      'CAP_SYS_NICE',
    ],
    'x64',
  );
  for (const name of [
    'ptrace',
    'kcmp',
    'process_vm_readv',
    'init_module',
    'delete_module',
    'reboot',
    'clock_settime',
    'settimeofday',
    'syslog',
    'iopl',
    'acct',
    'vhangup',
    'mbind',
    'get_mempolicy',
  ]) {
    assert.ok(!denied(more, name), name);
  }
  assert.ok(denied(more, 'keyctl'), 'keyrings stay denied whatever the capabilities');
  assert.ok(denied(more, 'kexec_load'), 'no capability reaches kexec');
  assert.ok(denied(more, 'chroot'), 'chroot needs CAP_SYS_CHROOT, not in this set');
  assert.ok(!denied(defaultSeccompProfile(['CAP_BPF'], 'x64'), 'bpf'));
  assert.ok(!denied(defaultSeccompProfile(['CAP_PERFMON'], 'x64'), 'perf_event_open'));
  assert.ok(!denied(defaultSeccompProfile(['CAP_DAC_READ_SEARCH'], 'x64'), 'open_by_handle_at'));
});

test('default profile: clone with namespace flags is denied, plain clone and threads are not', () => {
  for (const flag of CLONE_NAMESPACE_FLAGS) {
    assert.deepEqual(evaluate(defaults, 'clone', [BigInt(flag) | 0x11n]), EPERM);
  }
  // fork (SIGCHLD), glibc's fork (CHILD_SETTID | CHILD_CLEARTID | SIGCHLD) and pthread_create's flags.
  assert.ok(!denied(defaults, 'clone', [0x11n]));
  assert.ok(!denied(defaults, 'clone', [0x01200011n]));
  assert.ok(!denied(defaults, 'clone', [0x3d0f00n]));
  assert.deepEqual(evaluate(defaults, 'clone3'), { action: 'SCMP_ACT_ERRNO', errno: 38 });
  // s390x passes the flags second.
  const s390 = defaultSeccompProfile([], 's390x');
  assert.ok(!denied(s390, 'clone', [0x7fff0000n, 0x11n]));
  assert.ok(denied(s390, 'clone', [0n, 0x10000011n]));
});

test('socket: every address family but AF_VSOCK, judged on the 32 bits the kernel reads', () => {
  const profile: Seccomp = { defaultAction: 'SCMP_ACT_ERRNO', syscalls: socketRules() };
  for (let family = 0n; family < 64n; family++) {
    assert.equal(denied(profile, 'socket', [family]), family === 40n, `family ${family}`);
  }
  assert.ok(denied(profile, 'socket', [0x100000028n]), 'AF_VSOCK with high bits set');
  assert.ok(denied(profile, 'socket', [0xffffffff00000028n]));
  assert.ok(!denied(profile, 'socket', [0x100000002n]));
  assert.ok(!denied(profile, 'socket', [0xffffffffn]));
  assert.deepEqual(evaluate(defaults, 'socket', [40n]), EPERM);
});

test('personality: exactly the allowed values pass', () => {
  const profile: Seccomp = { defaultAction: 'SCMP_ACT_ERRNO', syscalls: personalityRules() };
  for (const v of ALLOWED_PERSONALITIES)
    assert.ok(!denied(profile, 'personality', [BigInt(v)]), v.toString(16));
  const samples = new Set<bigint>([
    1n,
    7n,
    9n,
    0x10n,
    0x18n,
    0x0040000n, // ADDR_NO_RANDOMIZE
    0x0040008n,
    0x1ffffn,
    0x20001n,
    0x20007n,
    0x20009n,
    0x28000n,
    0x30000n,
    0x30008n,
    0x80000000n,
    0xfffffffen,
    0x7fffffffn,
    0xfffdfff7n,
    0x100000000n,
    0x100000008n,
    0xffffffffffffffffn,
  ]);
  // Every single bit and every pair of bits.
  for (let i = 0n; i < 32n; i++) {
    samples.add(1n << i);
    for (let j = 0n; j < 32n; j++) samples.add((1n << i) | (1n << j));
  }
  // And a deterministic spread of other values.
  let x = 0x12345678n;
  for (let k = 0; k < 20000; k++) {
    x = (x * 1103515245n + 12345n) & 0xffffffffn;
    samples.add(x);
  }
  const allowed = new Set(ALLOWED_PERSONALITIES.map((v) => BigInt(v)));
  for (const v of samples) {
    assert.equal(denied(profile, 'personality', [v]), !allowed.has(v), `personality(0x${v.toString(16)})`);
  }
});

test('argument rules have one condition each (runc ORs same-argument conditions)', () => {
  for (const rule of [...personalityRules(), ...socketRules(), ...(defaults.syscalls ?? [])]) {
    assert.ok((rule.args?.length ?? 0) <= 1);
  }
});

test('default profile: each syscall is named once, so no rule shadows another', () => {
  const admin = defaultSeccompProfile([...DEFAULT_CAPABILITIES, 'CAP_SYS_ADMIN', 'CAP_BPF', 'CAP_SYSLOG']);
  for (const profile of [defaults, admin]) {
    const unconditional = (profile.syscalls ?? []).filter((r) => !r.args?.length).flatMap((r) => r.names);
    assert.equal(new Set(unconditional).size, unconditional.length);
    for (const rule of (profile.syscalls ?? []).filter((r) => r.args?.length)) {
      for (const name of rule.names) assert.ok(!unconditional.includes(name), name);
    }
  }
});

test('the infra gets the default profile for its (empty) capability set, unless privileged', () => {
  const base = {
    rootfsPath: '/r',
    hostname: 'h',
    netnsPath: null,
    hostIpc: false,
    hostPid: false,
    sysctls: {},
    cgroupsPath: '/berth/x',
    oomScoreAdj: 0,
    annotations: {},
  };
  const infra = buildInfraSpec({ ...base, privileged: false });
  assert.deepEqual(infra.linux?.seccomp, defaultSeccompProfile([]));
  assert.ok(infra.linux?.seccomp && denied(infra.linux.seccomp, 'chroot'), 'no CAP_SYS_CHROOT');
  assert.equal(buildInfraSpec({ ...base, privileged: true }).linux?.seccomp, undefined);
});

let dir = '';
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'berth-seccomp-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

test('loadSeccompProfile: an OCI profile, as cri-tools writes them', async () => {
  const path = join(dir, 'block-chmod.json');
  await writeFile(
    path,
    JSON.stringify({
      defaultAction: 'SCMP_ACT_ALLOW',
      syscalls: [{ names: ['chmod'], action: 'SCMP_ACT_ERRNO' }],
    }),
  );
  assert.deepEqual(await loadSeccompProfile(path), {
    defaultAction: 'SCMP_ACT_ALLOW',
    syscalls: [{ names: ['chmod'], action: 'SCMP_ACT_ERRNO' }],
  });
});

test('loadSeccompProfile: the Docker form, archMap and name', async () => {
  const path = join(dir, 'docker.json');
  await writeFile(
    path,
    JSON.stringify({
      defaultAction: 'SCMP_ACT_ERRNO',
      defaultErrnoRet: 1,
      archMap: [{ architecture: 'SCMP_ARCH_X86_64', subArchitectures: ['SCMP_ARCH_X86', 'SCMP_ARCH_X32'] }],
      syscalls: [
        { name: 'read', action: 'SCMP_ACT_ALLOW', args: null, comment: 'x' },
        {
          names: ['personality'],
          action: 'SCMP_ACT_ALLOW',
          args: [{ index: 0, value: 8, valueTwo: 0, op: 'SCMP_CMP_EQ' }],
        },
      ],
    }),
  );
  assert.deepEqual(await loadSeccompProfile(path), {
    defaultAction: 'SCMP_ACT_ERRNO',
    defaultErrnoRet: 1,
    architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
    syscalls: [
      { names: ['read'], action: 'SCMP_ACT_ALLOW' },
      {
        names: ['personality'],
        action: 'SCMP_ACT_ALLOW',
        args: [{ index: 0, value: 8, valueTwo: 0, op: 'SCMP_CMP_EQ' }],
      },
    ],
  });
});

test('loadSeccompProfile: missing, not JSON, or malformed is InvalidArgument on localhost_ref', async () => {
  const field = 'config.linux.security_context.seccomp.localhost_ref';
  await assert.rejects(loadSeccompProfile(join(dir, 'nope.json')), { name: 'InvalidArgumentError', field });
  const cases: Array<[string, string]> = [
    ['notjson', '{'],
    ['array', '[]'],
    ['noaction', '{}'],
    ['badaction', '{"defaultAction":"SCMP_ACT_MAYBE"}'],
    ['badsyscalls', '{"defaultAction":"SCMP_ACT_ALLOW","syscalls":{}}'],
    ['nonames', '{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"action":"SCMP_ACT_ERRNO"}]}'],
    [
      'badop',
      '{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":1,"op":"LT"}]}]}',
    ],
    [
      'badindex',
      '{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["x"],"action":"SCMP_ACT_ERRNO","args":[{"index":6,"value":1,"op":"SCMP_CMP_EQ"}]}]}',
    ],
    ['badarch', '{"defaultAction":"SCMP_ACT_ALLOW","architectures":"SCMP_ARCH_X86_64"}'],
  ];
  for (const [name, text] of cases) {
    const path = join(dir, `${name}.json`);
    await writeFile(path, text);
    await assert.rejects(loadSeccompProfile(path), { name: 'InvalidArgumentError', field }, name);
  }
});
