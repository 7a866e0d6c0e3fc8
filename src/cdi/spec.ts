/**
 * A CDI spec file (Container Device Interface, github.com/cncf-tags/container-device-interface,
 * SPEC.md), read from JSON or YAML: a vendor's devices of one kind (`vendor.com/class`), each with
 * the container edits that expose it (device nodes, mounts, env, OCI hooks, extra groups), and
 * edits for every device of the file. A file is checked whole when it is read, so that what a
 * container gets never depends on a half-understood file; the error names the file and the field.
 */
import { parse as parseYaml } from 'yaml';
import { parseKind, checkDeviceName } from './names.js';

/** Versions of the spec this reader knows every field of. A newer one may mean what berth misses. */
export const CDI_VERSIONS = ['0.3.0', '0.4.0', '0.5.0', '0.6.0', '0.7.0', '0.8.0', '1.0.0'] as const;

export interface CdiDeviceNode {
  /** Where it appears in the container. */
  path: string;
  /** The host's node; `path` when unset. */
  hostPath: string;
  /** Unset ones are read from the host's node. */
  type?: 'b' | 'c' | 'u' | 'p';
  major?: number;
  minor?: number;
  fileMode?: number;
  /** cgroup access, some of "rwm"; "rwm" when unset. */
  permissions: string;
  uid?: number;
  gid?: number;
}

export interface CdiMount {
  hostPath: string;
  containerPath: string;
  type?: string;
  options: string[];
}

/** The OCI hook points, as the spec's `hookName` names them. */
export const HOOK_NAMES = [
  'prestart',
  'createRuntime',
  'createContainer',
  'startContainer',
  'poststart',
  'poststop',
] as const;
export type HookName = (typeof HOOK_NAMES)[number];

export interface CdiHook {
  hookName: HookName;
  path: string;
  args: string[];
  env: string[];
  timeout?: number;
}

export interface ContainerEdits {
  env: string[];
  deviceNodes: CdiDeviceNode[];
  mounts: CdiMount[];
  hooks: CdiHook[];
  additionalGids: number[];
  /** Edits berth cannot apply (intelRdt, netDevices): a device that has them is refused by name. */
  unsupported: string[];
}

export interface CdiSpec {
  file: string;
  /** `vendor.com/class`. */
  kind: string;
  edits: ContainerEdits;
  devices: Map<string, ContainerEdits>;
}

/**
 * A spec is a handful of levels deep (devices[i].containerEdits.hooks[j].args[k] is the deepest);
 * the YAML parser recurses per level and, past some thousands, spends seconds and gigabytes
 * failing: deeper text is refused before it is parsed.
 */
export const MAX_SPEC_DEPTH = 64;
/** Devices of one spec: a node's whole inventory of one kind is hundreds, a DRA claim's a few. */
export const MAX_SPEC_DEVICES = 8192;

export class CdiSpecError extends Error {
  override name = 'CdiSpecError';
  constructor(
    readonly file: string,
    readonly problem: string,
  ) {
    super(`CDI spec ${file}: ${problem}`);
  }
}

type Json = Record<string, unknown>;

/** The spec in `text`, from the file `file` (.json or .yaml/.yml). */
export function parseCdiSpec(file: string, text: string): CdiSpec {
  const deep = flowDepthOver(text, MAX_SPEC_DEPTH);
  if (deep !== null)
    throw new CdiSpecError(file, `nests deeper than ${MAX_SPEC_DEPTH} levels (at offset ${deep})`);
  let raw: unknown;
  try {
    // YAML 1.2 is a superset of JSON: one parser reads both, with the same numbers and strings.
    // JSON's own parser first, where the text may be JSON: it reads megabytes in milliseconds,
    // where the YAML parser takes seconds.
    raw = jsonOrUndefined(text) ?? parseYaml(text, { maxAliasCount: 100 });
  } catch (err) {
    throw new CdiSpecError(file, `is neither JSON nor YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const bad = (field: string, problem: string): never => {
    throw new CdiSpecError(file, `${field} ${problem}`);
  };
  const spec = object(raw, '', bad);
  const version = string(spec.cdiVersion, 'cdiVersion', bad);
  if (!(CDI_VERSIONS as readonly string[]).includes(version)) {
    bad('cdiVersion', `${JSON.stringify(version)} is not one berth reads (${CDI_VERSIONS.join(', ')})`);
  }
  const kind = string(spec.kind, 'kind', bad);
  const kindProblem = parseKind(kind);
  if (typeof kindProblem === 'string') bad('kind', kindProblem);
  const devices = new Map<string, ContainerEdits>();
  const list = array(spec.devices, 'devices', bad);
  if (list.length === 0) bad('devices', 'is empty: a spec names at least one device');
  if (list.length > MAX_SPEC_DEVICES)
    bad('devices', `lists ${list.length} devices, more than ${MAX_SPEC_DEVICES}`);
  for (const [i, item] of list.entries()) {
    const field = `devices[${i}]`;
    const device = object(item, field, bad);
    const name = string(device.name, `${field}.name`, bad);
    const nameProblem = checkDeviceName(name);
    if (nameProblem) bad(`${field}.name`, nameProblem);
    if (devices.has(name)) bad(`${field}.name`, `${JSON.stringify(name)} is defined twice`);
    if (device.containerEdits === undefined) bad(`${field}.containerEdits`, 'is missing');
    devices.set(name, edits(device.containerEdits, `${field}.containerEdits`, bad));
  }
  const common =
    spec.containerEdits === undefined ? noEdits() : edits(spec.containerEdits, 'containerEdits', bad);
  return { file, kind, edits: common, devices };
}

export function noEdits(): ContainerEdits {
  return { env: [], deviceNodes: [], mounts: [], hooks: [], additionalGids: [], unsupported: [] };
}

type Bad = (field: string, problem: string) => never;

/** `text` as JSON when it is JSON (an object), else undefined, for the YAML parser to read. */
function jsonOrUndefined(text: string): unknown {
  if (!text.trimStart().startsWith('{')) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/**
 * The offset at which the flow collections (`[`, `{`) of `text` nest deeper than `max`, or null.
 * Brackets in quoted strings do not count. A quote opens a string only where YAML's would (at the
 * line's start or after one of `[{,:-?`), and a string ends at its line's end: so a quote the scan
 * misreads leaves real brackets uncounted only in the rest of a plain scalar or comment, where
 * they nest nothing, and every other misreading counts too many. Block YAML nests by indentation,
 * bounded by the file's size and the parse's own limits.
 */
export function flowDepthOver(text: string, max: number): number | null {
  let depth = 0;
  let quote = 0;
  let previous = 0x0a;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (quote !== 0) {
      if (c === 0x0a) quote = 0;
      else if (quote === 0x22 && c === 0x5c) i++;
      else if (c === quote && quote === 0x27 && text.charCodeAt(i + 1) === 0x27) i++;
      else if (c === quote) quote = 0;
    } else if ((c === 0x22 || c === 0x27) && QUOTE_MAY_FOLLOW.has(previous)) {
      quote = c;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return i;
    } else if ((c === 0x5d || c === 0x7d) && depth > 0) depth--;
    if (c === 0x0a || (c !== 0x20 && c !== 0x09 && c !== 0x0d)) previous = quote !== 0 ? 0x22 : c;
  }
  return null;
}

/** Newline and `[{,:-?`: where a YAML (or JSON) quoted string may begin. */
const QUOTE_MAY_FOLLOW = new Set([0x0a, 0x5b, 0x7b, 0x2c, 0x3a, 0x2d, 0x3f]);

function edits(value: unknown, field: string, bad: Bad): ContainerEdits {
  const e = object(value, field, bad);
  const env = strings(e.env, `${field}.env`, bad);
  for (const [i, entry] of env.entries()) {
    if (!/^[^=\0]+=/.test(entry) || entry.includes('\0')) bad(`${field}.env[${i}]`, 'is not NAME=value');
  }
  return {
    env,
    deviceNodes: array(e.deviceNodes, `${field}.deviceNodes`, bad).map((d, i) =>
      deviceNode(d, `${field}.deviceNodes[${i}]`, bad),
    ),
    mounts: array(e.mounts, `${field}.mounts`, bad).map((m, i) => mount(m, `${field}.mounts[${i}]`, bad)),
    hooks: array(e.hooks, `${field}.hooks`, bad).map((h, i) => hook(h, `${field}.hooks[${i}]`, bad)),
    additionalGids: array(e.additionalGIDs, `${field}.additionalGIDs`, bad).map((g, i) =>
      id(g, `${field}.additionalGIDs[${i}]`, bad),
    ),
    unsupported: ['intelRdt', 'netDevices'].filter((key) => e[key] !== undefined && e[key] !== null),
  };
}

/** Linux's MINORBITS is 20, leaving 12 bits of a 32-bit dev_t for the major. */
const MAX_MAJOR = 0xfff;
const MAX_MINOR = 0xf_ffff;

function deviceNode(value: unknown, field: string, bad: Bad): CdiDeviceNode {
  const d = object(value, field, bad);
  const path = absolute(d.path, `${field}.path`, bad);
  const node: CdiDeviceNode = {
    path,
    hostPath: d.hostPath === undefined ? path : absolute(d.hostPath, `${field}.hostPath`, bad),
    permissions: d.permissions === undefined ? 'rwm' : string(d.permissions, `${field}.permissions`, bad),
  };
  if (!/^[rwm]{1,3}$/.test(node.permissions) || new Set(node.permissions).size !== node.permissions.length) {
    bad(`${field}.permissions`, `${JSON.stringify(node.permissions)} is not some of "rwm"`);
  }
  if (d.type !== undefined) {
    const type = string(d.type, `${field}.type`, bad);
    if (type !== 'b' && type !== 'c' && type !== 'u' && type !== 'p')
      bad(`${field}.type`, 'is not b, c, u or p');
    node.type = type as CdiDeviceNode['type'];
  }
  for (const key of ['major', 'minor', 'fileMode', 'uid', 'gid'] as const) {
    if (d[key] !== undefined) node[key] = id(d[key], `${field}.${key}`, bad);
  }
  // The kernel's device numbers are 12 bits of major and 20 of minor: a larger one names no
  // device, and runc's mknod and device rule would fail the create with no field to name.
  if (node.major !== undefined && node.major > MAX_MAJOR) bad(`${field}.major`, `is past ${MAX_MAJOR}`);
  if (node.minor !== undefined && node.minor > MAX_MINOR) bad(`${field}.minor`, `is past ${MAX_MINOR}`);
  return node;
}

function mount(value: unknown, field: string, bad: Bad): CdiMount {
  const m = object(value, field, bad);
  return {
    hostPath: string(m.hostPath, `${field}.hostPath`, bad),
    containerPath: absolute(m.containerPath, `${field}.containerPath`, bad),
    ...(m.type === undefined ? {} : { type: string(m.type, `${field}.type`, bad) }),
    options: strings(m.options, `${field}.options`, bad),
  };
}

function hook(value: unknown, field: string, bad: Bad): CdiHook {
  const h = object(value, field, bad);
  const hookName = string(h.hookName, `${field}.hookName`, bad);
  if (!(HOOK_NAMES as readonly string[]).includes(hookName)) {
    bad(`${field}.hookName`, `${JSON.stringify(hookName)} is not one of ${HOOK_NAMES.join(', ')}`);
  }
  return {
    hookName: hookName as HookName,
    path: absolute(h.path, `${field}.path`, bad),
    args: strings(h.args, `${field}.args`, bad),
    env: strings(h.env, `${field}.env`, bad),
    ...(h.timeout === undefined || h.timeout === null
      ? {}
      : { timeout: id(h.timeout, `${field}.timeout`, bad) }),
  };
}

function object(value: unknown, field: string, bad: Bad): Json {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return bad(field || 'the file', 'is not an object');
  }
  return value as Json;
}

/** A list; missing or null is an empty one, as Go's decoder reads it. */
function array(value: unknown, field: string, bad: Bad): unknown[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) return bad(field, 'is not a list');
  return value;
}

function string(value: unknown, field: string, bad: Bad): string {
  if (typeof value !== 'string') return bad(field, 'is not a string');
  if (value.includes('\0')) return bad(field, 'holds a NUL byte');
  return value;
}

function strings(value: unknown, field: string, bad: Bad): string[] {
  return array(value, field, bad).map((item, i) => string(item, `${field}[${i}]`, bad));
}

function absolute(value: unknown, field: string, bad: Bad): string {
  const path = string(value, field, bad);
  if (!path.startsWith('/')) bad(field, `${JSON.stringify(path)} is not an absolute path`);
  return path;
}

/** A non-negative 32-bit number: ids, device numbers, modes, seconds. */
function id(value: unknown, field: string, bad: Bad): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 0xffff_ffff) {
    return bad(field, 'is not a whole number between 0 and 4294967295');
  }
  return value;
}
