import type { ContainerRow, ContainerState } from './types.js';

/** One `containers` row exactly as better-sqlite3 reads it and binds it (see state/migrations.ts). */
export interface ContainerRecord {
  id: string;
  sandbox_id: string;
  name: string;
  attempt: number;
  state: string;
  step: string;
  config_json: string;
  image_name: string;
  image_id: string;
  created_at: string;
  started_at: string;
  finished_at: string;
  exit_code: number;
  reason: string;
  message: string;
  pid: number;
  monitor_pid: number;
  log_path: string;
  bundle_dir: string;
  cgroups_path: string;
  user_json: string;
}

/** Column list in declaration order, shared by every statement so SELECTs and INSERTs agree. */
export const CONTAINER_COLUMNS = [
  'id',
  'sandbox_id',
  'name',
  'attempt',
  'state',
  'step',
  'config_json',
  'image_name',
  'image_id',
  'created_at',
  'started_at',
  'finished_at',
  'exit_code',
  'reason',
  'message',
  'pid',
  'monitor_pid',
  'log_path',
  'bundle_dir',
  'cgroups_path',
  'user_json',
] as const satisfies readonly (keyof ContainerRecord)[];

/** Explicit fields: a caller's object may carry extra properties, which better-sqlite3 would reject. */
export function toContainerRecord(row: ContainerRow): ContainerRecord {
  return {
    id: row.id,
    sandbox_id: row.sandboxId,
    name: row.name,
    attempt: row.attempt,
    state: row.state,
    step: row.step,
    config_json: row.configJson,
    image_name: row.imageName,
    image_id: row.imageId,
    created_at: row.createdAt,
    started_at: row.startedAt,
    finished_at: row.finishedAt,
    exit_code: row.exitCode,
    reason: row.reason,
    message: row.message,
    pid: row.pid,
    monitor_pid: row.monitorPid,
    log_path: row.logPath,
    bundle_dir: row.bundleDir,
    cgroups_path: row.cgroupsPath,
    user_json: row.userJson,
  };
}

/** The state is re-checked so a hand-edited row fails here rather than as a wrong CRI state later. */
export function fromContainerRecord(record: ContainerRecord): ContainerRow {
  return {
    id: record.id,
    sandboxId: record.sandbox_id,
    name: record.name,
    attempt: record.attempt,
    state: parseContainerState(record.state, record.id),
    step: record.step,
    configJson: record.config_json,
    imageName: record.image_name,
    imageId: record.image_id,
    createdAt: record.created_at,
    startedAt: record.started_at,
    finishedAt: record.finished_at,
    exitCode: record.exit_code,
    reason: record.reason,
    message: record.message,
    pid: record.pid,
    monitorPid: record.monitor_pid,
    logPath: record.log_path,
    bundleDir: record.bundle_dir,
    cgroupsPath: record.cgroups_path,
    userJson: record.user_json,
  };
}

function parseContainerState(value: string, id: string): ContainerState {
  if (value === 'CREATING' || value === 'CREATED' || value === 'RUNNING' || value === 'EXITED') return value;
  throw new Error(`container ${id}: unexpected state ${JSON.stringify(value)} in the database`);
}
