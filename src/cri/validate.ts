import { isIP } from 'node:net';
import { isAbsolute } from 'node:path';
import { InvalidArgumentError } from '../errors.js';
import type { NamespaceMode } from '../oci/container-input.js';
import type { SupplementalGroupsPolicy } from '../oci/user.js';

export function hasControlChar(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    if (code < 0x20 || code === 0x7f) return true;
  }
  return false;
}

/** Fields the kernel or the filesystem will see must not smuggle paths or control characters. */
export function requireString(field: string, value: string | undefined): string {
  if (!value) throw new InvalidArgumentError(field, 'is required');
  return value;
}

/**
 * Longest id accepted: berth's ids are 64 hex characters, and a prefix is shorter still. Anything
 * longer is refused before any lookup, and never quoted whole.
 */
const MAX_ID_LENGTH = 128;

/** A container or sandbox id, or a unique prefix of one. */
export function requireId(field: string, value: string | undefined): string {
  const v = requireString(field, value);
  if (v.length > MAX_ID_LENGTH) {
    throw new InvalidArgumentError(
      field,
      `is ${v.length} characters long; an id has at most ${MAX_ID_LENGTH}`,
    );
  }
  if (hasControlChar(v) || /[/\\\s]/.test(v)) {
    throw new InvalidArgumentError(field, `${quoted(v)} is not an id`);
  }
  return v;
}

export function requireSafeName(field: string, value: string | undefined, maxLength = 253): string {
  const v = requireString(field, value);
  if (v.length > maxLength) throw new InvalidArgumentError(field, `is longer than ${maxLength} characters`);
  if (hasControlChar(v) || /[/\\]/.test(v) || v === '.' || v === '..') {
    throw new InvalidArgumentError(field, `${quoted(v)} must not contain slashes or control characters`);
  }
  return v;
}

/** RFC 1123 host name, as the kernel and resolvers accept it. */
export function optionalHostname(field: string, value: string): string {
  if (!value) return '';
  if (
    value.length > 64 ||
    !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/i.test(value)
  ) {
    throw new InvalidArgumentError(field, `${quoted(value)} is not a valid host name`);
  }
  return value;
}

/** Linux's PATH_MAX (with the NUL) and NAME_MAX: a longer path or name could never be opened. */
export const PATH_MAX = 4096;
export const NAME_MAX = 255;

export function optionalAbsolutePath(field: string, value: string): string {
  if (!value) return '';
  pathLength(field, value);
  if (!isAbsolute(value) || value.split('/').includes('..') || hasControlChar(value)) {
    throw new InvalidArgumentError(
      field,
      `${quoted(value)} must be an absolute path without ".." or control characters`,
    );
  }
  return value;
}

/** A path the kernel resolves: shorter than PATH_MAX bytes. */
export function pathLength(field: string, value: string): string {
  const bytes = Buffer.byteLength(value);
  if (bytes >= PATH_MAX)
    throw new InvalidArgumentError(field, `is ${bytes} bytes long; a path has fewer than ${PATH_MAX}`);
  return value;
}

/**
 * A resolv.conf search domain: a DNS name, optionally ending in a dot, or "." alone, the root,
 * which kubelet sends when its own resolv.conf is disabled (containerd writes `search .`).
 */
export function dnsSearchDomain(field: string, value: string): string {
  if (value === '.') return value;
  const name = value.endsWith('.') ? value.slice(0, -1) : value;
  const label = /^[A-Za-z0-9_]([-A-Za-z0-9_]{0,61}[A-Za-z0-9_])?$/;
  if (name.length === 0 || name.length > 253 || !name.split('.').every((l) => label.test(l))) {
    throw new InvalidArgumentError(field, `${quoted(value)} is not a DNS domain name`);
  }
  return value;
}

/** A resolv.conf option such as "ndots:5" or "edns0": one word, nothing that could start a new line. */
export function dnsOption(field: string, value: string): string {
  if (!value || value.length > 255 || /\s/.test(value) || hasControlChar(value)) {
    throw new InvalidArgumentError(
      field,
      `${quoted(value)} is not a resolver option (one word, e.g. "ndots:5")`,
    );
  }
  return value;
}

/** A value written into a file or a config (sysctls): no newline or other control character. */
export function noControlChars(field: string, value: string): string {
  if (hasControlChar(value))
    throw new InvalidArgumentError(field, `${quoted(value)} contains control characters`);
  return value;
}

/**
 * Labels and annotations of one object: at most Kubernetes' own limit on an object's annotations
 * (256 KiB); every pod's and container's maps are returned by each List call, so an unbounded map
 * made the lists too big for clients' 16 MiB message limit.
 */
export const MAX_MAP_BYTES = 256 * 1024;
/** A label or annotation key: a DNS subdomain prefix, a slash and a 63-character name. */
const MAX_MAP_KEY = 317;

export function boundedMap(field: string, map: Record<string, string>): Record<string, string> {
  let bytes = 0;
  for (const [key, value] of Object.entries(map)) {
    if (key === '' || key.length > MAX_MAP_KEY || hasControlChar(key)) {
      throw new InvalidArgumentError(
        field,
        `key ${quoted(key)} is empty, longer than ${MAX_MAP_KEY} characters or has control characters`,
      );
    }
    bytes += Buffer.byteLength(key) + Buffer.byteLength(value);
    if (bytes > MAX_MAP_BYTES) {
      throw new InvalidArgumentError(field, `holds more than ${MAX_MAP_BYTES / 1024} KiB of keys and values`);
    }
  }
  return map;
}

/**
 * Entries of a label selector (ListPodSandbox, ListContainers and their stats): each is looked up
 * in the labels of every pod or container listed. kubelet selects by one label (a pod's uid),
 * crictl by one per --label flag given.
 */
export const MAX_SELECTOR_ENTRIES = 64;

/**
 * A filter's label selector, left out when empty (it selects everything then). It matches only
 * objects whose labels hold all of it, so it is bounded as labels are (keys of at most 317
 * characters, 256 KiB of keys and values): a bigger one would match nothing.
 */
export function selectorFilter(selector: Record<string, string>): { labelSelector?: Record<string, string> } {
  const field = 'filter.label_selector';
  // Counted before any entry is looked at.
  const entries = Object.keys(selector).length;
  if (entries === 0) return {};
  if (entries > MAX_SELECTOR_ENTRIES) {
    throw new InvalidArgumentError(field, `has ${entries} entries; at most ${MAX_SELECTOR_ENTRIES}`);
  }
  return { labelSelector: boundedMap(field, selector) };
}

/** A list of at most `max` entries, refused before any entry is looked at. */
export function boundedList<T>(field: string, list: readonly T[], max: number): readonly T[] {
  if (list.length > max) throw new InvalidArgumentError(field, `has ${list.length} entries; at most ${max}`);
  return list;
}

/** Long or strange values are cut when an error quotes them, so the error itself stays small. */
const QUOTE_MAX = 128;

export function quoted(value: string): string {
  const cut = value.length > QUOTE_MAX ? `${value.slice(0, QUOTE_MAX)}…` : value;
  return JSON.stringify(cut);
}

/** A cgroup parent is a path (cgroupfs) or a slice name (systemd); neither may climb with "..". */
export function optionalCgroupParent(field: string, value: string): string {
  if (!value) return '';
  // A path in the cgroup filesystem, so PATH_MAX and NAME_MAX hold.
  if (
    Buffer.byteLength(value) >= PATH_MAX ||
    value.split('/').some((part) => Buffer.byteLength(part) > NAME_MAX)
  ) {
    throw new InvalidArgumentError(
      field,
      `is longer than a cgroup path may be (${PATH_MAX} bytes, ${NAME_MAX} per name)`,
    );
  }
  if (value.split('/').includes('..') || hasControlChar(value)) {
    throw new InvalidArgumentError(field, `${quoted(value)} must not contain ".." or control characters`);
  }
  return value;
}

/** The largest uid or gid runc takes (it reads them as a Go int32 in places). */
const MAX_ID = 2_147_483_647;

/** Linux's NGROUPS_MAX: the most supplementary groups a process can have. */
const NGROUPS_MAX = 65_536;

export function supplementalGroups(field: string, groups: readonly string[]): number[] {
  return boundedList(field, groups, NGROUPS_MAX).map((g, i) => int64Id(`${field}[${i}]`, g));
}

const GROUPS_POLICIES: readonly SupplementalGroupsPolicy[] = ['Merge', 'Strict'];

/** Unset is Merge, the enum's zero value. */
export function supplementalGroupsPolicy(field: string, value: string | number): SupplementalGroupsPolicy {
  return oneOf(field, value || 'Merge', GROUPS_POLICIES, 'supplemental groups policy');
}

export function int64Id(field: string, value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0 || n > MAX_ID) {
    throw new InvalidArgumentError(field, `${quoted(value)} is not a valid id (0 to ${MAX_ID})`);
  }
  return n;
}

export function port(field: string, value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > 65535) {
    throw new InvalidArgumentError(field, `${value} is not a port number`);
  }
  return value;
}

export function ipAddress(field: string, value: string): string {
  if (isIP(value) === 0) throw new InvalidArgumentError(field, `"${value}" is not an IP address`);
  return value;
}

/** sysctl names as in /proc/sys, dotted or slashed; nothing that could leave /proc/sys. */
export function sysctlName(field: string, value: string): string {
  if (!/^[a-zA-Z0-9_]+([./][a-zA-Z0-9_*-]+)*$/.test(value)) {
    throw new InvalidArgumentError(field, `"${value}" is not a sysctl name`);
  }
  return value;
}

/** A wire enum's value, if it is one of those berth takes: grpc-js hands an unnamed one over as a number. */
export function oneOf<T extends string>(
  field: string,
  value: string | number,
  allowed: readonly T[],
  what: string,
): T {
  const found = allowed.find((a) => a === value);
  if (found === undefined) throw new InvalidArgumentError(field, `unknown ${what} "${value}"`);
  return found;
}

const NAMESPACE_MODES: readonly NamespaceMode[] = ['POD', 'CONTAINER', 'NODE', 'TARGET'];

/** Unset is POD, the enum's zero value. */
export function namespaceMode(field: string, value: string | number): NamespaceMode {
  return oneOf(field, value || 'POD', NAMESPACE_MODES, 'namespace mode');
}
