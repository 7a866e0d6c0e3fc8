import type { CniResult } from '../cni/index.js';
import type { PodResources, Sandbox, SandboxSpec, StoredNetworking } from '../model/sandbox.js';
import { NETWORK_STATES, SANDBOX_STATES } from '../model/sandbox-lifecycle.js';
import { AlreadyExistsError } from '../errors.js';
import {
  decodeJson,
  encodeNullableJson,
  isObject,
  isStringArray,
  parseEnum,
  parseJson,
  corrupt,
  type ColumnOf,
} from './columns.js';
import type { WrittenOnce } from './kept.js';
import { currentVersion, decodeSpec, SANDBOX_SPEC } from './spec-codec.js';
import type { Mapping, TableShape } from './table.js';

/** One `sandboxes` row exactly as better-sqlite3 reads it and binds it (see state/migrations.ts). */
export interface SandboxRecord {
  id: string;
  name: string;
  namespace: string;
  uid: string;
  attempt: number;
  state: string;
  step: string;
  config_json: string;
  runtime_handler: string;
  /** 0 or 1: SQLite has no boolean, and better-sqlite3 refuses to bind JS booleans. */
  host_network: number;
  netns_path: string | null;
  network_state: string;
  cni_config_json: string | null;
  cni_result_json: string | null;
  ip: string;
  /** JSON array of strings. */
  additional_ips: string;
  created_at: string;
  pid: number;
  cgroup_parent: string;
  sandbox_dir: string;
  /** 0 or 1, as host_network. */
  infra: number;
  /** The shape config_json was written in (src/store/spec-codec.ts). */
  spec_version: number;
  /** '' when berth made no pod cgroup. */
  pod_cgroup: string;
  /** JSON PodResources; NULL when the pod never asked. */
  resources_json: string | null;
  /** The infra's start time (clock ticks after boot); 0 without one, or not yet read. */
  infra_start_time: number;
  /** Why berth found the pod NOTREADY; '' when nothing was found gone. */
  reason: string;
}

/** Column list in declaration order, shared by every statement so SELECTs and INSERTs agree. */
export const SANDBOX_COLUMNS = [
  'id',
  'name',
  'namespace',
  'uid',
  'attempt',
  'state',
  'step',
  'config_json',
  'runtime_handler',
  'host_network',
  'netns_path',
  'network_state',
  'cni_config_json',
  'cni_result_json',
  'ip',
  'additional_ips',
  'created_at',
  'pid',
  'cgroup_parent',
  'sandbox_dir',
  'infra',
  'spec_version',
  'pod_cgroup',
  'resources_json',
  'infra_start_time',
  'reason',
] as const satisfies readonly (keyof SandboxRecord)[];

export const SANDBOX_TABLE: TableShape<SandboxRecord> = {
  name: 'sandboxes',
  noun: 'sandbox',
  columns: SANDBOX_COLUMNS,
  identity: ['name', 'namespace', 'uid', 'attempt'],
  conflict: (conflict, record) =>
    conflict === 'foreign key'
      ? undefined
      : new AlreadyExistsError(
          `sandbox ${record.id} (${record.namespace}/${record.name}, uid ${record.uid}, attempt ${record.attempt}) already exists`,
        ),
};

/**
 * The typed record: JSON columns parsed here, once, and nowhere else (the spec through its
 * versioned decoder, and once per row when the table keeps it); the states are re-checked so
 * a hand-edited row fails here rather than as a wrong CRI state later. Explicit fields on the way
 * in: a caller's object may carry extra properties, which better-sqlite3 would reject.
 */
export const sandboxMapping: Mapping<SandboxRecord, Sandbox> = {
  toRecord: (sandbox) => ({
    id: sandbox.id,
    name: sandbox.name,
    namespace: sandbox.namespace,
    uid: sandbox.uid,
    attempt: sandbox.attempt,
    state: sandbox.state,
    step: sandbox.step,
    config_json: JSON.stringify(sandbox.spec),
    runtime_handler: sandbox.runtimeHandler,
    host_network: sandbox.hostNetwork ? 1 : 0,
    netns_path: sandbox.netnsPath,
    network_state: sandbox.networkState,
    cni_config_json: encodeNullableJson(sandbox.cniConfig),
    cni_result_json: encodeNullableJson(sandbox.cniResults),
    ip: sandbox.ip,
    additional_ips: JSON.stringify(sandbox.additionalIps),
    created_at: sandbox.createdAt,
    pid: sandbox.pid,
    cgroup_parent: sandbox.cgroupParent,
    sandbox_dir: sandbox.sandboxDir,
    infra: sandbox.infra ? 1 : 0,
    spec_version: currentVersion(SANDBOX_SPEC),
    pod_cgroup: sandbox.podCgroup,
    resources_json: encodeNullableJson(sandbox.resources),
    infra_start_time: sandbox.infraStartTime,
    reason: sandbox.reason,
  }),
  fromRecord: (record, specs) => {
    const where = columnOf(record);
    return {
      id: record.id,
      name: record.name,
      namespace: record.namespace,
      uid: record.uid,
      attempt: record.attempt,
      state: parseEnum(SANDBOX_STATES, record.state, where('state')),
      step: record.step,
      spec: decodeSandboxSpec(record, where('config_json'), specs),
      runtimeHandler: record.runtime_handler,
      hostNetwork: record.host_network === 1,
      netnsPath: record.netns_path,
      networkState: parseEnum(NETWORK_STATES, record.network_state, where('network_state')),
      cniConfig:
        record.cni_config_json === null
          ? null
          : decodeNetworking(record.cni_config_json, where('cni_config_json')),
      cniResults:
        record.cni_result_json === null
          ? null
          : decodeJson<CniResult[]>(record.cni_result_json, isResultList, where('cni_result_json')),
      ip: record.ip,
      additionalIps: parseStringArray(record.additional_ips, where('additional_ips')),
      createdAt: record.created_at,
      pid: record.pid,
      cgroupParent: record.cgroup_parent,
      podCgroup: record.pod_cgroup,
      resources:
        record.resources_json === null
          ? null
          : decodeJson<PodResources>(record.resources_json, isPodResources, where('resources_json')),
      sandboxDir: record.sandbox_dir,
      infra: record.infra === 1,
      infraStartTime: record.infra_start_time,
      reason: record.reason,
    };
  },
};

function columnOf(record: SandboxRecord): (column: string) => ColumnOf {
  return (column) => ({ noun: 'sandbox', id: record.id, column });
}

function parseStringArray(json: string, where: ColumnOf): string[] {
  const value = parseJson(json, where);
  if (isStringArray(value)) return value;
  throw corrupt(where, json);
}

function decodeSandboxSpec(record: SandboxRecord, where: ColumnOf, specs?: WrittenOnce): SandboxSpec {
  const decode = (): SandboxSpec => decodeSpec(SANDBOX_SPEC, record.spec_version, record.config_json, where);
  return specs ? specs.value(record.id, [record.spec_version, record.config_json], decode) : decode();
}

export function decodeNetworking(json: string, where: ColumnOf): StoredNetworking {
  return decodeJson<StoredNetworking>(json, isNetworking, where);
}

function isNetworking(value: unknown): boolean {
  return (
    isObject(value) &&
    isObject(value.attachment) &&
    Array.isArray(value.networks) &&
    value.networks.every(isObject) &&
    (value.addsStarted === undefined ||
      (Array.isArray(value.addsStarted) && value.addsStarted.every((n) => typeof n === 'number')))
  );
}

function isPodResources(value: unknown): boolean {
  return (
    isObject(value) &&
    (value.resources === null || isObject(value.resources)) &&
    (value.overhead === null || isObject(value.overhead))
  );
}

function isResultList(value: unknown): boolean {
  return Array.isArray(value) && value.every((item) => isObject(item) && typeof item.cniVersion === 'string');
}
