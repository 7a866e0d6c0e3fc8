/**
 * Seccomp profiles: berth's own RuntimeDefault, and Localhost profiles read from the host.
 *
 * RuntimeDefault is an allow-list: every syscall not named here fails with EPERM, so a syscall the
 * kernel adds tomorrow is denied until someone decides otherwise. What it allows follows the
 * default profiles Docker (moby) and containerd ship, as their public sources and documentation
 * describe them: the same unconditional set; the same syscalls granted only to a container whose
 * capabilities include a given one (CAP_SYS_ADMIN gives mount, unshare, setns...; CAP_SYS_PTRACE
 * gives ptrace...); the same argument filters (personality, clone without namespace flags, socket
 * outside AF_VSOCK); clone3 answering ENOSYS so that libc falls back to the filterable clone.
 * Where the two differ or where they have been loosened over time, berth keeps the stricter
 * choice: io_uring stays out (both dropped it after a run of kernel escapes through it), ptrace
 * and process_vm_* need CAP_SYS_PTRACE whatever the kernel version, name_to_handle_at needs
 * CAP_SYS_ADMIN, and the AF_VSOCK filter looks at the 32 bits the kernel reads (see socketRules).
 * The kernel still checks each capability itself; the filter narrows what it is asked at all.
 *
 * runc reads the rules with two quirks this module depends on: a rule whose action equals the
 * default action is dropped, and conditions of one rule on the same argument are split into
 * separate rules (an OR, not an AND). So every rule here allows (or, for clone3, fails with an
 * errno other than the default's), and argument filters are several rules of one condition each,
 * each allowing a set of values.
 */
import { readFile } from 'node:fs/promises';
import { InvalidArgumentError } from '../errors.js';
import type { LinuxSeccompArg, LinuxSyscall, Seccomp } from './spec.js';

const EPERM = 1;
const ENOSYS = 38;
const AF_VSOCK = 40;

/**
 * Allowed to every container. Names a given architecture lacks are resolved (or skipped) per
 * architecture by libseccomp, which is why 32-bit variants sit next to their 64-bit forms: the
 * filter also covers the compat ABIs a 64-bit kernel runs.
 */
const ALWAYS: readonly string[] = [
  // Processes, threads and their exit. clone and clone3 are not here: see cloneRules.
  'execve',
  'execveat',
  'exit',
  'exit_group',
  'fork',
  'vfork',
  'wait4',
  'waitid',
  'waitpid',
  'set_tid_address',
  'set_robust_list',
  'get_robust_list',
  'rseq',
  'set_thread_area',
  'get_thread_area',
  'membarrier',
  'futex',
  'futex_time64',
  'futex_waitv',
  'futex_wake',
  'futex_wait',
  'futex_requeue',
  'restart_syscall',
  'prctl',
  'capget',
  'capset',
  'seccomp',
  'landlock_create_ruleset',
  'landlock_add_rule',
  'landlock_restrict_self',
  'getpid',
  'getppid',
  'gettid',
  'getpgid',
  'getpgrp',
  'getsid',
  'setpgid',
  'setsid',
  'pidfd_open',
  'pidfd_send_signal',
  'process_mrelease',
  // Credentials: the kernel decides what a process may become.
  'getuid',
  'getuid32',
  'geteuid',
  'geteuid32',
  'getgid',
  'getgid32',
  'getegid',
  'getegid32',
  'getresuid',
  'getresuid32',
  'getresgid',
  'getresgid32',
  'getgroups',
  'getgroups32',
  'setuid',
  'setuid32',
  'setgid',
  'setgid32',
  'setreuid',
  'setreuid32',
  'setregid',
  'setregid32',
  'setresuid',
  'setresuid32',
  'setresgid',
  'setresgid32',
  'setgroups',
  'setgroups32',
  'setfsuid',
  'setfsuid32',
  'setfsgid',
  'setfsgid32',
  // Signals.
  'kill',
  'tkill',
  'tgkill',
  'rt_sigaction',
  'rt_sigpending',
  'rt_sigprocmask',
  'rt_sigqueueinfo',
  'rt_tgsigqueueinfo',
  'rt_sigreturn',
  'rt_sigsuspend',
  'rt_sigtimedwait',
  'rt_sigtimedwait_time64',
  'sigaltstack',
  'sigprocmask',
  'sigreturn',
  'signalfd',
  'signalfd4',
  'pause',
  // Memory.
  'brk',
  'mmap',
  'mmap2',
  'munmap',
  'mremap',
  'mprotect',
  'madvise',
  'mincore',
  'msync',
  'mlock',
  'mlock2',
  'mlockall',
  'munlock',
  'munlockall',
  'remap_file_pages',
  'memfd_create',
  'memfd_secret',
  'pkey_alloc',
  'pkey_free',
  'pkey_mprotect',
  'map_shadow_stack',
  // Files and directories.
  'open',
  'openat',
  'openat2',
  'creat',
  'close',
  'close_range',
  'read',
  'readv',
  'pread64',
  'preadv',
  'preadv2',
  'write',
  'writev',
  'pwrite64',
  'pwritev',
  'pwritev2',
  'lseek',
  '_llseek',
  'sendfile',
  'sendfile64',
  'splice',
  'tee',
  'vmsplice',
  'copy_file_range',
  'dup',
  'dup2',
  'dup3',
  'fcntl',
  'fcntl64',
  'flock',
  'ioctl',
  'fsync',
  'fdatasync',
  'sync',
  'syncfs',
  'sync_file_range',
  'fallocate',
  'fadvise64',
  'fadvise64_64',
  'readahead',
  'cachestat',
  'truncate',
  'truncate64',
  'ftruncate',
  'ftruncate64',
  'stat',
  'stat64',
  'lstat',
  'lstat64',
  'fstat',
  'fstat64',
  'fstatat64',
  'newfstatat',
  'statx',
  'statfs',
  'statfs64',
  'fstatfs',
  'fstatfs64',
  'access',
  'faccessat',
  'faccessat2',
  'getcwd',
  'chdir',
  'fchdir',
  'getdents',
  'getdents64',
  'mkdir',
  'mkdirat',
  'mknod',
  'mknodat',
  'rmdir',
  'link',
  'linkat',
  'symlink',
  'symlinkat',
  'unlink',
  'unlinkat',
  'rename',
  'renameat',
  'renameat2',
  'readlink',
  'readlinkat',
  'umask',
  'chmod',
  'fchmod',
  'fchmodat',
  'fchmodat2',
  'chown',
  'chown32',
  'fchown',
  'fchown32',
  'fchownat',
  'lchown',
  'lchown32',
  'utime',
  'utimes',
  'utimensat',
  'utimensat_time64',
  'futimesat',
  'getxattr',
  'lgetxattr',
  'fgetxattr',
  'setxattr',
  'lsetxattr',
  'fsetxattr',
  'listxattr',
  'llistxattr',
  'flistxattr',
  'removexattr',
  'lremovexattr',
  'fremovexattr',
  'inotify_init',
  'inotify_init1',
  'inotify_add_watch',
  'inotify_rm_watch',
  'fanotify_mark',
  // Asynchronous I/O (the aio family; io_uring is left out on purpose).
  'io_setup',
  'io_destroy',
  'io_submit',
  'io_cancel',
  'io_getevents',
  'io_pgetevents',
  'io_pgetevents_time64',
  // Waiting and polling.
  'pipe',
  'pipe2',
  'eventfd',
  'eventfd2',
  'select',
  '_newselect',
  'pselect6',
  'pselect6_time64',
  'poll',
  'ppoll',
  'ppoll_time64',
  'epoll_create',
  'epoll_create1',
  'epoll_ctl',
  'epoll_ctl_old',
  'epoll_wait',
  'epoll_wait_old',
  'epoll_pwait',
  'epoll_pwait2',
  // Sockets; socket itself is filtered (socketRules). socketcall is the 32-bit x86 multiplexer,
  // whose arguments sit in memory where no filter can read them.
  'socketcall',
  'socketpair',
  'bind',
  'listen',
  'accept',
  'accept4',
  'connect',
  'getsockname',
  'getpeername',
  'getsockopt',
  'setsockopt',
  'shutdown',
  'send',
  'sendto',
  'sendmsg',
  'sendmmsg',
  'recv',
  'recvfrom',
  'recvmsg',
  'recvmmsg',
  'recvmmsg_time64',
  // System V and POSIX IPC, namespaced with the pod's ipc namespace.
  'ipc',
  'msgget',
  'msgsnd',
  'msgrcv',
  'msgctl',
  'semget',
  'semop',
  'semtimedop',
  'semtimedop_time64',
  'semctl',
  'shmget',
  'shmat',
  'shmdt',
  'shmctl',
  'mq_open',
  'mq_unlink',
  'mq_notify',
  'mq_getsetattr',
  'mq_timedsend',
  'mq_timedsend_time64',
  'mq_timedreceive',
  'mq_timedreceive_time64',
  // Time: reading clocks and timers. adjtimex and clock_adjtime stay because with modes 0 they only
  // read (glibc implements adjtimex with clock_adjtime); changing the clock needs CAP_SYS_TIME in
  // the kernel as well as here (settimeofday and friends below).
  'time',
  'gettimeofday',
  'clock_gettime',
  'clock_gettime64',
  'clock_getres',
  'clock_getres_time64',
  'clock_nanosleep',
  'clock_nanosleep_time64',
  'nanosleep',
  'adjtimex',
  'clock_adjtime',
  'clock_adjtime64',
  'alarm',
  'getitimer',
  'setitimer',
  'times',
  'timer_create',
  'timer_delete',
  'timer_getoverrun',
  'timer_gettime',
  'timer_gettime64',
  'timer_settime',
  'timer_settime64',
  'timerfd_create',
  'timerfd_gettime',
  'timerfd_gettime64',
  'timerfd_settime',
  'timerfd_settime64',
  // Scheduling and limits, bounded by the kernel's own checks and the pod's cgroup.
  'sched_yield',
  'sched_getaffinity',
  'sched_setaffinity',
  'sched_getattr',
  'sched_setattr',
  'sched_getparam',
  'sched_setparam',
  'sched_getscheduler',
  'sched_setscheduler',
  'sched_get_priority_max',
  'sched_get_priority_min',
  'sched_rr_get_interval',
  'sched_rr_get_interval_time64',
  'getpriority',
  'setpriority',
  'ioprio_get',
  'ioprio_set',
  'getrlimit',
  'ugetrlimit',
  'setrlimit',
  'prlimit64',
  'getrusage',
  // Information about the machine.
  'uname',
  'sysinfo',
  'getcpu',
  'getrandom',
];

interface Grant {
  names: readonly string[];
  /** Allowed when the container holds any of these. */
  anyOf: readonly string[];
}

/** Syscalls for containers given a capability that the kernel checks for them anyway. */
const GRANTS: readonly Grant[] = [
  {
    names: [
      'mount',
      'umount',
      'umount2',
      'fsopen',
      'fsconfig',
      'fsmount',
      'fspick',
      'move_mount',
      'open_tree',
      'mount_setattr',
      'unshare',
      'setns',
      'clone',
      'clone3',
      'sethostname',
      'setdomainname',
      'name_to_handle_at',
      'quotactl',
      'quotactl_fd',
      'fanotify_init',
      'lookup_dcookie',
    ],
    anyOf: ['CAP_SYS_ADMIN'],
  },
  // The "shocker" escape: opening host files by handle needs exactly this capability.
  { names: ['open_by_handle_at'], anyOf: ['CAP_DAC_READ_SEARCH'] },
  { names: ['bpf'], anyOf: ['CAP_BPF', 'CAP_SYS_ADMIN'] },
  { names: ['perf_event_open'], anyOf: ['CAP_PERFMON', 'CAP_SYS_ADMIN'] },
  { names: ['syslog'], anyOf: ['CAP_SYSLOG', 'CAP_SYS_ADMIN'] },
  { names: ['reboot'], anyOf: ['CAP_SYS_BOOT'] },
  { names: ['chroot'], anyOf: ['CAP_SYS_CHROOT'] },
  { names: ['init_module', 'finit_module', 'delete_module'], anyOf: ['CAP_SYS_MODULE'] },
  { names: ['acct'], anyOf: ['CAP_SYS_PACCT'] },
  {
    names: ['ptrace', 'process_vm_readv', 'process_vm_writev', 'kcmp', 'pidfd_getfd', 'process_madvise'],
    anyOf: ['CAP_SYS_PTRACE'],
  },
  { names: ['iopl', 'ioperm'], anyOf: ['CAP_SYS_RAWIO'] },
  {
    names: ['settimeofday', 'stime', 'clock_settime', 'clock_settime64'],
    anyOf: ['CAP_SYS_TIME'],
  },
  { names: ['vhangup'], anyOf: ['CAP_SYS_TTY_CONFIG'] },
  {
    names: ['get_mempolicy', 'set_mempolicy', 'mbind', 'set_mempolicy_home_node'],
    anyOf: ['CAP_SYS_NICE'],
  },
];

interface ArchTable {
  /** The native architecture first, then the compat ABIs its kernel also runs. */
  architectures: readonly string[];
  /** Syscalls only this architecture has that ordinary programs need. */
  syscalls: readonly string[];
  /** Which argument of clone holds the flags. */
  cloneFlagsArg: number;
}

const ARM_SYSCALLS = [
  'arm_fadvise64_64',
  'arm_sync_file_range',
  'sync_file_range2',
  'breakpoint',
  'cacheflush',
  'set_tls',
];

/** Keyed by Node's process.arch. */
const ARCHES: Readonly<Record<string, ArchTable>> = {
  x64: {
    architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32'],
    syscalls: ['arch_prctl', 'modify_ldt'],
    cloneFlagsArg: 0,
  },
  arm64: {
    architectures: ['SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'],
    syscalls: ARM_SYSCALLS,
    cloneFlagsArg: 0,
  },
  arm: { architectures: ['SCMP_ARCH_ARM'], syscalls: ARM_SYSCALLS, cloneFlagsArg: 0 },
  // s390's clone takes the new stack first and the flags second.
  s390x: {
    architectures: ['SCMP_ARCH_S390X', 'SCMP_ARCH_S390'],
    syscalls: ['s390_pci_mmio_read', 's390_pci_mmio_write', 's390_runtime_instr'],
    cloneFlagsArg: 1,
  },
  ppc64: {
    architectures: ['SCMP_ARCH_PPC64LE'],
    syscalls: ['sync_file_range2', 'swapcontext'],
    cloneFlagsArg: 0,
  },
  riscv64: { architectures: ['SCMP_ARCH_RISCV64'], syscalls: ['riscv_flush_icache'], cloneFlagsArg: 0 },
};

/** CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET. */
export const CLONE_NAMESPACE_FLAGS: readonly number[] = [
  0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
];

/** personality(2) values a container may use: Linux, with READ_IMPLIES_EXEC / UNAME26, and query. */
export const ALLOWED_PERSONALITIES: readonly number[] = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff];

/**
 * berth's RuntimeDefault profile for a container holding `capabilities` (CAP_ names). `arch` is
 * Node's process.arch; on an architecture not listed only the native ABI is filtered, with the
 * portable syscalls alone.
 */
export function defaultSeccompProfile(capabilities: readonly string[], arch: string = process.arch): Seccomp {
  const held = new Set(capabilities);
  const table = ARCHES[arch];
  const allowed = new Set<string>([...ALWAYS, ...(table?.syscalls ?? [])]);
  for (const grant of GRANTS) {
    if (grant.anyOf.some((c) => held.has(c))) for (const name of grant.names) allowed.add(name);
  }
  const syscalls: LinuxSyscall[] = [
    { names: [...allowed], action: 'SCMP_ACT_ALLOW' },
    ...socketRules(),
    ...personalityRules(),
  ];
  if (!held.has('CAP_SYS_ADMIN')) syscalls.push(...cloneRules(table?.cloneFlagsArg ?? 0));
  return {
    defaultAction: 'SCMP_ACT_ERRNO',
    defaultErrnoRet: EPERM,
    ...(table ? { architectures: [...table.architectures] } : {}),
    syscalls,
  };
}

/**
 * clone without any namespace flag (fork and pthread_create pass none). clone3 passes its flags in
 * memory, out of seccomp's reach, so it answers ENOSYS, on which libc falls back to clone.
 */
export function cloneRules(flagsArg = 0): LinuxSyscall[] {
  const mask = CLONE_NAMESPACE_FLAGS.reduce((a, b) => a + b, 0);
  return [
    allow(['clone'], { index: flagsArg, value: mask, valueTwo: 0, op: 'SCMP_CMP_MASKED_EQ' }),
    { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
  ];
}

/**
 * socket(2) for every address family but AF_VSOCK, whose sockets reach the hypervisor and the host
 * past the pod's network namespace. The kernel reads the family as a 32-bit int while seccomp sees
 * the whole register, so "not equal to 40" would let 0x1_00000028 through as AF_VSOCK. Instead:
 * one rule per low bit, each allowing the values whose bit k differs from AF_VSOCK's; a value is
 * allowed iff its low 32 bits differ from AF_VSOCK somewhere.
 */
export function socketRules(): LinuxSyscall[] {
  const rules: LinuxSyscall[] = [];
  for (let k = 0; k < 32; k++) {
    const bit = 2 ** k;
    const vsockBit = Math.floor(AF_VSOCK / bit) % 2 === 1 ? bit : 0;
    rules.push(
      allow(['socket'], { index: 0, value: bit, valueTwo: bit - vsockBit, op: 'SCMP_CMP_MASKED_EQ' }),
    );
  }
  return rules;
}

/**
 * personality(x) for x in ALLOWED_PERSONALITIES only, one rule per value (see the module comment).
 * Each compares all 64 bits, so no value with high bits set passes for an allowed one.
 */
export function personalityRules(): LinuxSyscall[] {
  return ALLOWED_PERSONALITIES.map((value) => allow(['personality'], { index: 0, value, op: 'SCMP_CMP_EQ' }));
}

function allow(names: string[], arg: LinuxSeccompArg): LinuxSyscall {
  return { names, action: 'SCMP_ACT_ALLOW', args: [arg] };
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
