/**
 * Seccomp profiles: berth's own RuntimeDefault, and Localhost profiles read from the host.
 *
 * RuntimeDefault is a deny-list: everything is allowed except the syscalls that reach outside the
 * container (kernel modules, clocks, mounts and namespaces, keyrings, tracing other processes...).
 * A syscall guarded by a capability is allowed when the container holds that capability, so adding
 * CAP_SYS_ADMIN to a pod really lets it mount, as it does under the Docker and containerd defaults.
 * The kernel still checks the capability itself; the filter narrows the attack surface further.
 *
 * runc reads the rules with two quirks this module depends on: a rule whose action equals the
 * default action is dropped, and conditions of one rule on the same argument are split into
 * separate rules (an OR, not an AND). So argument filters here are written as several rules with
 * one condition each, each of which denies a set of values.
 */
import { readFile } from 'node:fs/promises';
import { InvalidArgumentError } from '../errors.js';
import type { LinuxSeccompArg, LinuxSyscall, Seccomp } from './spec.js';

const EPERM = 1;
const ENOSYS = 38;

interface Group {
  names: string[];
  /** Allowed when the container holds any of these; denied to everyone when absent. */
  unlessAny?: string[];
}

const DENIED: readonly Group[] = [
  {
    names: [
      'init_module',
      'finit_module',
      'delete_module',
      'create_module',
      'query_module',
      'get_kernel_syms',
    ],
    unlessAny: ['CAP_SYS_MODULE'],
  },
  { names: ['kexec_load', 'kexec_file_load', 'reboot'], unlessAny: ['CAP_SYS_BOOT'] },
  // adjtimex stays: with modes 0 it only reads the clock state, and the kernel guards the rest.
  {
    names: ['settimeofday', 'stime', 'clock_settime', 'clock_settime64', 'clock_adjtime', 'clock_adjtime64'],
    unlessAny: ['CAP_SYS_TIME'],
  },
  {
    names: [
      'mount',
      'umount',
      'umount2',
      'pivot_root',
      'unshare',
      'setns',
      'name_to_handle_at',
      'fsopen',
      'fsconfig',
      'fsmount',
      'fspick',
      'move_mount',
      'open_tree',
      'mount_setattr',
      'swapon',
      'swapoff',
    ],
    unlessAny: ['CAP_SYS_ADMIN'],
  },
  // The "shocker" escape: opening host files by handle needs exactly this capability.
  { names: ['open_by_handle_at'], unlessAny: ['CAP_DAC_READ_SEARCH'] },
  { names: ['ptrace', 'process_vm_readv', 'process_vm_writev', 'kcmp'], unlessAny: ['CAP_SYS_PTRACE'] },
  { names: ['bpf'], unlessAny: ['CAP_BPF', 'CAP_SYS_ADMIN'] },
  { names: ['perf_event_open'], unlessAny: ['CAP_PERFMON', 'CAP_SYS_ADMIN'] },
  { names: ['acct'], unlessAny: ['CAP_SYS_PACCT'] },
  { names: ['iopl', 'ioperm'], unlessAny: ['CAP_SYS_RAWIO'] },
  { names: ['syslog'], unlessAny: ['CAP_SYSLOG'] },
  {
    names: [
      'keyctl',
      'add_key',
      'request_key',
      'userfaultfd',
      'quotactl',
      'quotactl_fd',
      'lookup_dcookie',
      'nfsservctl',
      'uselib',
      'ustat',
      'sysfs',
      '_sysctl',
      'vm86',
      'vm86old',
    ],
  },
];

/** CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET. */
export const CLONE_NAMESPACE_FLAGS: readonly number[] = [
  0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
];

/** personality(2) values a container may use: Linux, with READ_IMPLIES_EXEC / UNAME26, and query. */
export const ALLOWED_PERSONALITIES: readonly number[] = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff];

const ARCHITECTURES: Readonly<Record<string, string[]>> = {
  x64: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
  arm64: ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'],
  arm: ['SCMP_ARCH_ARM'],
};

/**
 * berth's RuntimeDefault profile for a container holding `capabilities` (CAP_ names). `arch` is
 * Node's process.arch; on an architecture not listed only the native one is filtered.
 */
export function defaultSeccompProfile(capabilities: readonly string[], arch: string = process.arch): Seccomp {
  const held = new Set(capabilities);
  const syscalls: LinuxSyscall[] = [];
  for (const group of DENIED) {
    if (group.unlessAny?.some((c) => held.has(c))) continue;
    syscalls.push({ names: [...group.names], action: 'SCMP_ACT_ERRNO', errnoRet: EPERM });
  }
  syscalls.push(...personalityRules());
  if (!held.has('CAP_SYS_ADMIN')) {
    // clone's flags are its first argument on x86 and arm (s390 swaps them; not supported here).
    for (const flag of CLONE_NAMESPACE_FLAGS) {
      syscalls.push(
        errno(['clone'], EPERM, { index: 0, value: flag, valueTwo: flag, op: 'SCMP_CMP_MASKED_EQ' }),
      );
    }
    // clone3 passes its flags in memory, out of seccomp's reach; ENOSYS makes libc use clone.
    syscalls.push({ names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS });
  }
  const architectures = ARCHITECTURES[arch];
  return {
    defaultAction: 'SCMP_ACT_ALLOW',
    ...(architectures ? { architectures: [...architectures] } : {}),
    syscalls,
  };
}

/**
 * Rules denying personality(x) for every x outside ALLOWED_PERSONALITIES, each rule one condition
 * (see the module comment). Take x as a 32-bit ring of bits. If x is neither 0 nor all ones, some
 * set bit k is followed (cyclically) by a clear bit k+1: one rule per k catches it, except k = 3
 * and k = 17, whose lone bits are allowed. When every such run of set bits ends at bit 3 or 17,
 * x is allowed unless a run is longer than one bit, which two more rules catch (bits 2,3 set and
 * 4 clear; bits 16,17 set and 18 clear). Values above 32 bits are denied outright.
 */
export function personalityRules(): LinuxSyscall[] {
  const rules: LinuxSyscall[] = [];
  const bit = (n: number): number => 2 ** (n % 32);
  for (let k = 0; k < 32; k++) {
    if (k === 3 || k === 17) continue;
    rules.push(masked(bit(k) + bit(k + 1), bit(k)));
  }
  rules.push(masked(bit(2) + bit(3) + bit(4), bit(2) + bit(3)));
  rules.push(masked(bit(16) + bit(17) + bit(18), bit(16) + bit(17)));
  rules.push(errno(['personality'], EPERM, { index: 0, value: 0xffffffff, op: 'SCMP_CMP_GT' }));
  return rules;
}

function masked(mask: number, value: number): LinuxSyscall {
  return errno(['personality'], EPERM, { index: 0, value: mask, valueTwo: value, op: 'SCMP_CMP_MASKED_EQ' });
}

function errno(names: string[], errnoRet: number, arg: LinuxSeccompArg): LinuxSyscall {
  return { names, action: 'SCMP_ACT_ERRNO', errnoRet, args: [arg] };
}

const LOCALHOST_FIELD = 'config.linux.security_context.seccomp.localhost_ref';

const ACTIONS = new Set([
  'SCMP_ACT_KILL',
  'SCMP_ACT_KILL_PROCESS',
  'SCMP_ACT_KILL_THREAD',
  'SCMP_ACT_TRAP',
  'SCMP_ACT_ERRNO',
  'SCMP_ACT_TRACE',
  'SCMP_ACT_ALLOW',
  'SCMP_ACT_LOG',
  'SCMP_ACT_NOTIFY',
]);

const OPERATORS = new Set([
  'SCMP_CMP_NE',
  'SCMP_CMP_LT',
  'SCMP_CMP_LE',
  'SCMP_CMP_EQ',
  'SCMP_CMP_GE',
  'SCMP_CMP_GT',
  'SCMP_CMP_MASKED_EQ',
]);

/**
 * A Localhost profile: the OCI form, or the Docker/containerd form (archMap, "name" instead of
 * "names"), which is what seccomp profiles found in the wild are written in. Anything missing,
 * unreadable or malformed is the request's fault.
 */
export async function loadSeccompProfile(path: string): Promise<Seccomp> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new InvalidArgumentError(LOCALHOST_FIELD, `cannot read seccomp profile ${path}: ${code}`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new InvalidArgumentError(LOCALHOST_FIELD, `${path} is not JSON: ${(err as Error).message}`);
  }
  return parseSeccompProfile(raw, path);
}

export function parseSeccompProfile(raw: unknown, where: string): Seccomp {
  const bad = (problem: string): InvalidArgumentError =>
    new InvalidArgumentError(LOCALHOST_FIELD, `seccomp profile ${where}: ${problem}`);
  if (!isObject(raw)) throw bad('not a JSON object');
  const defaultAction = raw.defaultAction;
  if (typeof defaultAction !== 'string' || !ACTIONS.has(defaultAction)) {
    throw bad(`defaultAction ${JSON.stringify(defaultAction)} is not a seccomp action`);
  }
  const profile: Seccomp = { defaultAction };
  if (raw.defaultErrnoRet !== undefined)
    profile.defaultErrnoRet = uint(raw.defaultErrnoRet, 'defaultErrnoRet', bad);
  const architectures = [
    ...stringList(raw.architectures, 'architectures', bad),
    ...archMapArchitectures(raw.archMap, bad),
  ];
  if (architectures.length > 0) profile.architectures = [...new Set(architectures)];
  const flags = stringList(raw.flags, 'flags', bad);
  if (flags.length > 0) profile.flags = flags;
  if (raw.syscalls !== undefined && raw.syscalls !== null) {
    if (!Array.isArray(raw.syscalls)) throw bad('syscalls is not an array');
    profile.syscalls = raw.syscalls.map((s: unknown, i: number) => parseSyscall(s, `syscalls[${i}]`, bad));
  }
  return profile;
}

type Bad = (problem: string) => InvalidArgumentError;

function parseSyscall(raw: unknown, at: string, bad: Bad): LinuxSyscall {
  if (!isObject(raw)) throw bad(`${at} is not an object`);
  const names = stringList(raw.names, `${at}.names`, bad);
  if (typeof raw.name === 'string' && raw.name !== '') names.push(raw.name);
  if (names.length === 0) throw bad(`${at} names no syscall`);
  if (typeof raw.action !== 'string' || !ACTIONS.has(raw.action)) {
    throw bad(`${at}.action ${JSON.stringify(raw.action)} is not a seccomp action`);
  }
  const rule: LinuxSyscall = { names, action: raw.action };
  if (raw.errnoRet !== undefined && raw.errnoRet !== null)
    rule.errnoRet = uint(raw.errnoRet, `${at}.errnoRet`, bad);
  if (raw.args !== undefined && raw.args !== null) {
    if (!Array.isArray(raw.args)) throw bad(`${at}.args is not an array`);
    rule.args = raw.args.map((a: unknown, j: number) => parseArg(a, `${at}.args[${j}]`, bad));
  }
  return rule;
}

function parseArg(raw: unknown, at: string, bad: Bad): LinuxSeccompArg {
  if (!isObject(raw)) throw bad(`${at} is not an object`);
  const index = uint(raw.index, `${at}.index`, bad);
  if (index > 5) throw bad(`${at}.index ${index}: syscalls have 6 arguments`);
  if (typeof raw.op !== 'string' || !OPERATORS.has(raw.op)) {
    throw bad(`${at}.op ${JSON.stringify(raw.op)} is not a seccomp operator`);
  }
  const arg: LinuxSeccompArg = { index, value: uint(raw.value, `${at}.value`, bad), op: raw.op };
  if (raw.valueTwo !== undefined && raw.valueTwo !== null)
    arg.valueTwo = uint(raw.valueTwo, `${at}.valueTwo`, bad);
  return arg;
}

/** Docker's form: [{architecture, subArchitectures}]. */
function archMapArchitectures(raw: unknown, bad: Bad): string[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw bad('archMap is not an array');
  const out: string[] = [];
  for (const [i, entry] of raw.entries()) {
    if (!isObject(entry) || typeof entry.architecture !== 'string')
      throw bad(`archMap[${i}] has no architecture`);
    out.push(
      entry.architecture,
      ...stringList(entry.subArchitectures, `archMap[${i}].subArchitectures`, bad),
    );
  }
  return out;
}

function stringList(raw: unknown, at: string, bad: Bad): string[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw) || !raw.every((x): x is string => typeof x === 'string')) {
    throw bad(`${at} is not a list of strings`);
  }
  return [...raw];
}

function uint(raw: unknown, at: string, bad: Bad): number {
  if (typeof raw !== 'number' || !Number.isInteger(raw) || raw < 0)
    throw bad(`${at} is not a non-negative integer`);
  return raw;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
