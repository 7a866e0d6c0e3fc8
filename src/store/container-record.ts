import type { Container, ContainerResources, ContainerSpec, ContainerUser } from '../model/container.js';
import { CONTAINER_STATES } from '../model/container-lifecycle.js';
import { AlreadyExistsError, NotFoundError } from '../errors.js';
import { corrupt, isNumberArray, isObject, parseEnum, parseJson, type ColumnOf } from './columns.js';
import type { WrittenOnce } from './kept.js';
import { CONTAINER_RESOURCES, CONTAINER_SPEC, currentVersion, decodeSpec } from './spec-codec.js';
import type { Mapping, TableShape } from './table.js';

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
  /** The shape config_json (and resources_json) was written in (src/store/spec-codec.ts). */
  spec_version: number;
  /** The limits UpdateContainerResources set, replacing the spec's; NULL until it runs. */
  resources_json: string | null;
  /** The shape resources_json was written in; NULL with it. */
  resources_version: number | null;
  /** 0 or 1: created from a checkpoint, its start restores the process. */
  restore: number;
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
  'spec_version',
  'resources_json',
  'resources_version',
  'restore',
] as const satisfies readonly (keyof ContainerRecord)[];

export const CONTAINER_TABLE: TableShape<ContainerRecord> = {
  name: 'containers',
  noun: 'container',
  columns: CONTAINER_COLUMNS,
  identity: ['sandbox_id', 'name', 'attempt'],
  conflict: (conflict, record, db) => {
    switch (conflict) {
      case 'primary key':
        return new AlreadyExistsError(`container ${record.id} already exists`);
      case 'foreign key':
        return new NotFoundError('sandbox', record.sandbox_id);
      case 'unique': {
        // Prepared here, on the error path only: a repeat is a caller's mistake, and rare.
        const holder = db
          .prepare<[string, string, number], { id: string }>(
            'SELECT id FROM containers WHERE sandbox_id = ? AND name = ? AND attempt = ?',
          )
          .get(record.sandbox_id, record.name, record.attempt)?.id;
        return new AlreadyExistsError(
          `container ${JSON.stringify(record.name)} (attempt ${record.attempt}) already exists in pod sandbox ` +
            `${record.sandbox_id}${holder === undefined ? '' : ` as ${holder}`}`,
        );
      }
    }
  },
};

/** What user_json holds before CreateContainer has resolved the user. */
const NO_USER = '{}';

/**
 * The typed record: JSON columns parsed here, once, and nowhere else (the spec through its
 * versioned decoder, with the resources changed since, once per row when the table keeps specs);
 * the state is re-checked so a hand-edited row fails here rather than as a wrong CRI state later.
 * Explicit fields on the way in: a caller's object may carry extra properties, which
 * better-sqlite3 would reject.
 */
export const containerMapping: Mapping<ContainerRecord, Container> = {
  toRecord: (container) => ({
    id: container.id,
    sandbox_id: container.sandboxId,
    name: container.name,
    attempt: container.attempt,
    state: container.state,
    step: container.step,
    config_json: JSON.stringify(container.spec),
    image_name: container.imageName,
    image_id: container.imageId,
    created_at: container.createdAt,
    started_at: container.startedAt,
    finished_at: container.finishedAt,
    exit_code: container.exitCode,
    reason: container.reason,
    message: container.message,
    pid: container.pid,
    monitor_pid: container.monitorPid,
    log_path: container.logPath,
    bundle_dir: container.bundleDir,
    cgroups_path: container.cgroupsPath,
    user_json: encodeUser(container.user),
    spec_version: currentVersion(CONTAINER_SPEC),
    // Written whole, the spec holds the resources.
    resources_json: null,
    resources_version: null,
    restore: container.restore ? 1 : 0,
  }),
  fromRecord: (record, specs) => ({
    id: record.id,
    sandboxId: record.sandbox_id,
    name: record.name,
    attempt: record.attempt,
    state: parseEnum(CONTAINER_STATES, record.state, columnOf(record, 'state')),
    step: record.step,
    spec: decodeContainerSpec(record, specs),
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
    user: decodeUser(record.user_json, columnOf(record, 'user_json')),
    restore: record.restore === 1,
  }),
};

function columnOf(record: ContainerRecord, column: string): ColumnOf {
  return { noun: 'container', id: record.id, column };
}

function decodeContainerSpec(record: ContainerRecord, specs?: WrittenOnce): ContainerSpec {
  const { spec_version: version, config_json: text, resources_json: resources } = record;
  const decode = (): ContainerSpec => {
    const spec = decodeSpec<ContainerSpec>(CONTAINER_SPEC, version, text, columnOf(record, 'config_json'));
    if (resources === null) return spec;
    const where = columnOf(record, 'resources_json');
    const changed = decodeSpec<ContainerResources>(
      CONTAINER_RESOURCES,
      record.resources_version ?? 0,
      resources,
      where,
    );
    return { ...spec, resources: changed };
  };
  return specs
    ? specs.value(record.id, [version, text, resources, record.resources_version], decode)
    : decode();
}

/** The columns of `resources` changed by UpdateContainerResources, in the shape a berth writes now. */
export function encodeResources(
  resources: ContainerResources,
): Pick<ContainerRecord, 'resources_json' | 'resources_version'> {
  return {
    resources_json: JSON.stringify(resources),
    resources_version: currentVersion(CONTAINER_RESOURCES),
  };
}

export function encodeUser(user: ContainerUser | null): string {
  if (user === null) return NO_USER;
  return JSON.stringify({ uid: user.uid, gid: user.gid, additionalGids: user.additionalGids });
}

function decodeUser(json: string, where: ColumnOf): ContainerUser | null {
  const value = parseJson(json, where);
  if (isObject(value) && Object.keys(value).length === 0) return null;
  if (isUser(value)) return value;
  throw corrupt(where, json);
}

function isUser(value: unknown): value is ContainerUser {
  return (
    isObject(value) &&
    typeof value.uid === 'number' &&
    typeof value.gid === 'number' &&
    isNumberArray(value.additionalGids)
  );
}
