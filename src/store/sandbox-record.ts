import type { NetworkState, SandboxRow, SandboxState } from './types.js';

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
] as const satisfies readonly (keyof SandboxRecord)[];

export function toRecord(row: SandboxRow): SandboxRecord {
  return {
    id: row.id,
    name: row.name,
    namespace: row.namespace,
    uid: row.uid,
    attempt: row.attempt,
    state: row.state,
    step: row.step,
    config_json: row.configJson,
    runtime_handler: row.runtimeHandler,
    host_network: row.hostNetwork ? 1 : 0,
    netns_path: row.netnsPath,
    network_state: row.networkState,
    cni_config_json: row.cniConfigJson,
    cni_result_json: row.cniResultJson,
    ip: row.ip,
    additional_ips: JSON.stringify(row.additionalIps),
    created_at: row.createdAt,
    pid: row.pid,
    cgroup_parent: row.cgroupParent,
    sandbox_dir: row.sandboxDir,
  };
}

/**
 * The table's CHECK constraints already hold these invariants; re-checking here costs little
 * and turns a hand-edited or corrupted row into a clear error instead of a wrong type downstream.
 */
export function fromRecord(record: SandboxRecord): SandboxRow {
  return {
    id: record.id,
    name: record.name,
    namespace: record.namespace,
    uid: record.uid,
    attempt: record.attempt,
    state: parseSandboxState(record.state, record.id),
    step: record.step,
    configJson: record.config_json,
    runtimeHandler: record.runtime_handler,
    hostNetwork: record.host_network === 1,
    netnsPath: record.netns_path,
    networkState: parseNetworkState(record.network_state, record.id),
    cniConfigJson: record.cni_config_json,
    cniResultJson: record.cni_result_json,
    ip: record.ip,
    additionalIps: parseStringArray(record.additional_ips, record.id),
    createdAt: record.created_at,
    pid: record.pid,
    cgroupParent: record.cgroup_parent,
    sandboxDir: record.sandbox_dir,
  };
}

function parseSandboxState(value: string, id: string): SandboxState {
  if (value === 'CREATING' || value === 'READY' || value === 'NOTREADY') return value;
  throw corrupt(id, 'state', value);
}

function parseNetworkState(value: string, id: string): NetworkState {
  if (value === 'NONE' || value === 'ADDING' || value === 'READY' || value === 'TORN_DOWN') return value;
  throw corrupt(id, 'network_state', value);
}

function parseStringArray(json: string, id: string): string[] {
  const value: unknown = JSON.parse(json);
  if (Array.isArray(value) && value.every((item): item is string => typeof item === 'string')) return value;
  throw corrupt(id, 'additional_ips', json);
}

function corrupt(id: string, column: string, value: string): Error {
  return new Error(`sandbox ${id}: unexpected ${column} ${JSON.stringify(value)} in the database`);
}
