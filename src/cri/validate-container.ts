/**
 * Field validators for container requests. Each names the request field it rejects, so a kubelet
 * log line points at the exact part of the pod spec that is wrong.
 */
import { InvalidArgumentError } from '../errors.js';
import { hasControlChar, NAME_MAX, PATH_MAX, pathLength } from './validate.js';

/** execve and the OCI spec cannot carry a NUL: reject it here rather than as an obscure runc error. */
export function noNul(field: string, value: string): string {
  if (value.includes('\0')) throw new InvalidArgumentError(field, 'must not contain a NUL character');
  return value;
}

/**
 * An int64 from the wire (a decimal string) as a JS number, within [min, max]. Compared as BigInt so
 * that a value beyond 2^53 is rejected instead of silently rounded.
 */
export function int64InRange(field: string, value: string, min: number, max: number): number {
  if (!/^-?\d+$/.test(value)) throw new InvalidArgumentError(field, `"${value}" is not an integer`);
  const n = BigInt(value);
  if (n < BigInt(min) || n > BigInt(max)) {
    throw new InvalidArgumentError(field, `${value} is out of range (${min} to ${max})`);
  }
  return Number(n);
}

/**
 * A duration in int64 seconds. Negative values are clamped to 0 rather than rejected: a stop or an
 * exec must not fail on a sign, and containerd reads them the same way (stop: kill now; exec: no
 * timeout).
 */
export function seconds(field: string, value: string): number {
  if (!/^-?\d+$/.test(value)) throw new InvalidArgumentError(field, `"${value}" is not an integer`);
  const n = BigInt(value);
  if (n < 0n) return 0;
  return n > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(n);
}

/**
 * An absolute path. Host paths (`allowDotDot` false) must also be clean of "..", as the Kubernetes
 * API requires of hostPath volumes; paths inside the container may keep it, since runc resolves them
 * within the rootfs.
 */
export function absolutePath(field: string, value: string, allowDotDot: boolean): string {
  if (!value) throw new InvalidArgumentError(field, 'is required');
  noNul(field, pathLength(field, value));
  if (!value.startsWith('/')) throw new InvalidArgumentError(field, `"${value}" must be an absolute path`);
  if (!allowDotDot && value.split('/').includes('..')) {
    throw new InvalidArgumentError(field, `"${value}" must not contain ".."`);
  }
  return value;
}

/**
 * A log path is joined to the sandbox's log directory, so it must not leave it; PATH_MAX and
 * NAME_MAX hold for it (a longer one also E2BIG'd conmon's argv).
 */
export function relativeLogPath(field: string, value: string): string {
  if (!value) return '';
  checkPathLength(field, value);
  const last = value.split('/').at(-1);
  if (value.startsWith('/') || value.split('/').includes('..') || hasControlChar(value)) {
    throw new InvalidArgumentError(
      field,
      `"${value}" must be relative to the pod's log directory, without ".." or control characters`,
    );
  }
  if (last === '' || last === '.') throw new InvalidArgumentError(field, `"${value}" does not name a file`);
  return value;
}

/** An image volume's sub path: relative, within the image, '' for all of it. */
export function imageSubPath(field: string, value: string): string {
  if (!value) return '';
  checkPathLength(field, value);
  if (value.startsWith('/') || value.split('/').includes('..') || hasControlChar(value)) {
    throw new InvalidArgumentError(
      field,
      `"${value}" must be a path in the image, relative, without ".." or control characters`,
    );
  }
  return value;
}

function checkPathLength(field: string, value: string): void {
  if (
    Buffer.byteLength(value) >= PATH_MAX ||
    value.split('/').some((part) => Buffer.byteLength(part) > NAME_MAX)
  ) {
    throw new InvalidArgumentError(
      field,
      `is longer than a path may be (${PATH_MAX} bytes, ${NAME_MAX} per name)`,
    );
  }
}

/** Linux builds for at most 8192 CPUs (NR_CPUS) and as many memory nodes; larger numbers are ERANGE. */
const MAX_CPUSET_INDEX = 8191;

/** cpuset list syntax as the kernel reads it: "0-3,8,10-11". */
export function cpuset(field: string, value: string): string {
  if (value && !/^\d+(-\d+)?(,\d+(-\d+)?)*$/.test(value)) {
    throw new InvalidArgumentError(field, `"${value}" is not a cpuset list (e.g. "0-3,8")`);
  }
  if (value && value.split(/[-,]/).some((n) => Number(n) > MAX_CPUSET_INDEX)) {
    throw new InvalidArgumentError(field, `"${value}" names a CPU or node above ${MAX_CPUSET_INDEX}`);
  }
  return value;
}

/** Becomes part of a cgroup file name (hugetlb.<size>.limit_in_bytes), so only "<n><unit>B". */
export function hugepageSize(field: string, value: string): string {
  if (!/^[1-9]\d*[KMGTP]B$/.test(value)) {
    throw new InvalidArgumentError(field, `"${value}" is not a huge page size (e.g. "2MB", "1GB")`);
  }
  return value;
}

/**
 * A cgroup v2 controller's interface file name ("memory.max", "hugetlb.2MB.max"): nothing that
 * walks a path, and none of the core `cgroup.*` files, which move processes (cgroup.procs would
 * take any host pid into the cgroup), kill, freeze or change the tree: those are the runtime's.
 */
export function unifiedKey(field: string, value: string): string {
  if (!/^[a-z][a-z0-9_]*(\.[A-Za-z0-9_]+)+$/.test(value)) {
    throw new InvalidArgumentError(field, `"${value}" is not a cgroup v2 file name`);
  }
  if (value.startsWith('cgroup.')) {
    throw new InvalidArgumentError(field, `"${value}" is a core cgroup file, which the runtime alone writes`);
  }
  return value;
}

/** Upper case without the CAP_ prefix, as kubelet usually sends them; "ALL" stays "ALL". */
export function capabilityName(field: string, value: string): string {
  const name = value.toUpperCase().replace(/^CAP_/, '');
  if (!/^[A-Z][A-Z0-9_]*$/.test(name)) {
    throw new InvalidArgumentError(field, `"${value}" is not a capability name`);
  }
  return name;
}

export function devicePermissions(field: string, value: string): string {
  if (!/^[rwm]*$/.test(value)) {
    throw new InvalidArgumentError(field, `"${value}" must be made of "r", "w" and "m"`);
  }
  return value;
}

/**
 * Longer than any image reference: a name of at most 255 characters (distribution's limit), a tag
 * of at most 128 and a digest.
 */
const MAX_REFERENCE_BYTES = 1024;

/** An image as the pod spec names it, kept to show in statuses: only its length is checked. */
export function imageReference(field: string, value: string): string {
  const bytes = Buffer.byteLength(value);
  if (bytes > MAX_REFERENCE_BYTES) {
    throw new InvalidArgumentError(
      field,
      `is ${bytes} bytes long; an image reference has at most ${MAX_REFERENCE_BYTES}`,
    );
  }
  return value;
}

/** Linux's LOGIN_NAME_MAX, with the NUL. */
const LOGIN_NAME_MAX = 256;

/** Looked up in the image's /etc/passwd; a ":" would be read as user:group. */
export function userName(field: string, value: string): string {
  if (Buffer.byteLength(value) >= LOGIN_NAME_MAX) {
    throw new InvalidArgumentError(field, `is longer than a user name may be (${LOGIN_NAME_MAX - 1} bytes)`);
  }
  if (value && (value.includes(':') || value.includes('/') || hasControlChar(value))) {
    throw new InvalidArgumentError(field, `"${value}" is not a user name`);
  }
  return value;
}

/**
 * Names something the host already has (an AppArmor profile): any text, but no control characters,
 * and short enough for the one page the kernel reads a profile change from (/proc/<pid>/attr).
 */
export function profileName(field: string, value: string): string {
  if (!value) throw new InvalidArgumentError(field, 'is required');
  if (Buffer.byteLength(value) >= PATH_MAX) {
    throw new InvalidArgumentError(field, `is longer than a profile name may be (${PATH_MAX - 1} bytes)`);
  }
  if (hasControlChar(value)) throw new InvalidArgumentError(field, 'must not contain control characters');
  return value;
}

/**
 * Arguments of a process berth starts (CreateContainer's command and args, Exec's and ExecSync's
 * cmd), bounded as execve bounds them: one argument by MAX_ARG_STRLEN (128 KiB), the program by
 * PATH_MAX, and the whole argv by half of ARG_MAX (2 MiB with the default stack limit: argv and
 * the environment share it, and MAX_ENV_BYTES takes the other half).
 */
const MAX_ARG_BYTES = 128 * 1024;
const MAX_ARGV_BYTES = 1024 * 1024;
/**
 * Arguments in all: each also costs the kernel a pointer and a NUL, and berth a string it holds
 * until the process starts (a streaming Exec's until its URL is used or expires).
 */
export const MAX_ARGS = 16_384;

/**
 * `lists` together make one argv, named by their request fields ("config.command", "config.args"):
 * its first argument is the program. Refuses, naming the field, what execve would not take.
 */
export function argv(lists: readonly (readonly [field: string, args: readonly string[]])[]): void {
  const first = lists[0]?.[0] ?? 'argv';
  const others = lists.slice(1).map(([field]) => field);
  const withOthers = others.length > 0 ? ` together with ${others.join(', ')}` : '';
  const count = lists.reduce((n, [, args]) => n + args.length, 0);
  if (count > MAX_ARGS) {
    throw new InvalidArgumentError(first, `has ${count} arguments${withOthers}; at most ${MAX_ARGS}`);
  }
  let total = 0;
  let index = 0;
  for (const [field, args] of lists) {
    for (const [i, arg] of args.entries()) {
      const max = index++ === 0 ? PATH_MAX - 1 : MAX_ARG_BYTES;
      const bytes = Buffer.byteLength(arg);
      if (bytes > max)
        throw new InvalidArgumentError(`${field}[${i}]`, `is ${bytes} bytes long; at most ${max}`);
      total += bytes;
      if (total > MAX_ARGV_BYTES) {
        throw new InvalidArgumentError(first, `holds more than ${MAX_ARGV_BYTES} bytes${withOthers}`);
      }
      noNul(`${field}[${i}]`, arg);
    }
  }
}
