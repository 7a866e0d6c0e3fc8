/**
 * Linux capability names and the set a container gets from its CRI security context. CRI names
 * come without the CAP_ prefix and in any case (kubelet passes them through as written); the OCI
 * spec wants CAP_-prefixed upper case.
 */
import { InvalidArgumentError } from '../errors.js';
import { DEFAULT_CAPABILITIES } from './infra.js';

/** What a CRI security context asks of capabilities: names without CAP_, in any case, or "ALL". */
export interface CapabilityRequest {
  privileged: boolean;
  addCapabilities: string[];
  dropCapabilities: string[];
  addAmbientCapabilities: string[];
}

/** Every capability up to CAP_CHECKPOINT_RESTORE (40), indexed by its number. */
export const KNOWN_CAPABILITIES: readonly string[] = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_DAC_READ_SEARCH',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETPCAP',
  'CAP_LINUX_IMMUTABLE',
  'CAP_NET_BIND_SERVICE',
  'CAP_NET_BROADCAST',
  'CAP_NET_ADMIN',
  'CAP_NET_RAW',
  'CAP_IPC_LOCK',
  'CAP_IPC_OWNER',
  'CAP_SYS_MODULE',
  'CAP_SYS_RAWIO',
  'CAP_SYS_CHROOT',
  'CAP_SYS_PTRACE',
  'CAP_SYS_PACCT',
  'CAP_SYS_ADMIN',
  'CAP_SYS_BOOT',
  'CAP_SYS_NICE',
  'CAP_SYS_RESOURCE',
  'CAP_SYS_TIME',
  'CAP_SYS_TTY_CONFIG',
  'CAP_MKNOD',
  'CAP_LEASE',
  'CAP_AUDIT_WRITE',
  'CAP_AUDIT_CONTROL',
  'CAP_SETFCAP',
  'CAP_MAC_OVERRIDE',
  'CAP_MAC_ADMIN',
  'CAP_SYSLOG',
  'CAP_WAKE_ALARM',
  'CAP_BLOCK_SUSPEND',
  'CAP_AUDIT_READ',
  'CAP_PERFMON',
  'CAP_BPF',
  'CAP_CHECKPOINT_RESTORE',
];

/** The capabilities a kernel whose highest capability number is `lastCap` knows. */
export function capabilitiesUpTo(lastCap: number): string[] {
  return KNOWN_CAPABILITIES.slice(0, Math.max(0, Math.trunc(lastCap) + 1));
}

/** The capabilities whose bits are set in `mask` (as in /proc/<pid>/status CapBnd). */
export function capabilitiesInMask(mask: bigint): string[] {
  return KNOWN_CAPABILITIES.filter((_c, i) => (mask >> BigInt(i)) & 1n);
}

/**
 * What "all capabilities" can mean here: those this kernel knows (`lastCapText`, the text of
 * /proc/sys/kernel/cap_last_cap) that are also in berth's own bounding set (`statusText`, its
 * /proc/self/status), which runc inherits. A capability withheld from the daemon (this VM
 * withholds CAP_SYS_RESOURCE) cannot be given to a container: asking for it fails the create with
 * "unable to apply caps". An empty or unreadable text does not narrow the list. The files are
 * read once at start-up (src/host/features.ts).
 */
export function heldCapabilities(lastCapText: string, statusText: string): string[] {
  const last = Number.parseInt(lastCapText.trim(), 10);
  const known = Number.isInteger(last) && last >= 0 ? capabilitiesUpTo(last) : [...KNOWN_CAPABILITIES];
  const bounding = /^CapBnd:\s*([0-9a-fA-F]+)\s*$/m.exec(statusText)?.[1];
  if (bounding === undefined) return known;
  const held = new Set(capabilitiesInMask(BigInt(`0x${bounding}`)));
  return known.filter((c) => held.has(c));
}

/** "net_admin", "NET_ADMIN" and "CAP_NET_ADMIN" all name CAP_NET_ADMIN; null when unknown. */
export function normalizeCapability(name: string): string | null {
  const upper = name.trim().toUpperCase();
  const full = upper.startsWith('CAP_') ? upper : `CAP_${upper}`;
  return KNOWN_CAPABILITIES.includes(full) ? full : null;
}

const FIELD = 'config.linux.security_context.capabilities';

/**
 * The capability set of a container: all of `all` when privileged, else the runtime default with
 * the CRI adds and drops applied. "ALL" in add starts from everything, "ALL" in drop from nothing,
 * then the named adds and the named drops apply in that order, so kubelet's `drop: [ALL], add:
 * [NET_BIND_SERVICE]` yields exactly that one and a capability both added and dropped is dropped.
 * Ambient capabilities are part of the set too: a process cannot hold one it is not permitted.
 * Sorted by capability number, so equal inputs give byte-identical specs.
 */
export function effectiveCapabilities(security: CapabilityRequest, all: readonly string[]): string[] {
  return containerCapabilities(security, all).set;
}

/** A container process's capabilities: its set (see effectiveCapabilities) and its ambient ones. */
export interface ContainerCapabilities {
  set: string[];
  /** Empty when privileged. */
  ambient: string[];
}

/**
 * Both sets of a container, worked out once per create: its seccomp profile and its spec both
 * follow them.
 */
export function containerCapabilities(
  security: CapabilityRequest,
  all: readonly string[],
): ContainerCapabilities {
  if (security.privileged) return { set: sortCapabilities(all), ambient: [] };
  const add = parseList(security.addCapabilities, `${FIELD}.add_capabilities`);
  const drop = parseList(security.dropCapabilities, `${FIELD}.drop_capabilities`);
  const ambient = ambientCapabilities(security, all);
  let set = new Set<string>(DEFAULT_CAPABILITIES);
  if (add.all) set = new Set(all);
  if (drop.all) set = new Set();
  for (const c of add.names) set.add(c);
  for (const c of drop.names) set.delete(c);
  for (const c of ambient) set.add(c);
  return { set: sortCapabilities([...set]), ambient };
}

/** The ambient set as asked for ("ALL" meaning every capability of `all`), validated and sorted. */
export function ambientCapabilities(
  security: Pick<CapabilityRequest, 'addAmbientCapabilities'>,
  all: readonly string[],
): string[] {
  const ambient = parseList(security.addAmbientCapabilities, `${FIELD}.add_ambient_capabilities`);
  return sortCapabilities(ambient.all ? [...all, ...ambient.names] : ambient.names);
}

function parseList(names: readonly string[], field: string): { all: boolean; names: string[] } {
  let all = false;
  const out: string[] = [];
  for (const name of names) {
    if (name.trim().toUpperCase() === 'ALL') {
      all = true;
      continue;
    }
    const cap = normalizeCapability(name);
    if (cap === null) throw new InvalidArgumentError(field, `unknown capability "${name}"`);
    out.push(cap);
  }
  return { all, names: out };
}

function sortCapabilities(caps: readonly string[]): string[] {
  const rank = (c: string): number => {
    const i = KNOWN_CAPABILITIES.indexOf(c);
    return i < 0 ? KNOWN_CAPABILITIES.length : i;
  };
  // Code-unit order for the names berth does not know: localeCompare would load ICU's collation
  // data, 3 MB of berthd's memory from the first container on, to order ASCII names.
  return [...new Set(caps)].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
}
