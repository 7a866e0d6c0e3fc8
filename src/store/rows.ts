/**
 * Legacy: the row API the services used before the typed repositories (SandboxRepo,
 * ContainerRepo): rows with their JSON columns as text, changed by free patches that no lifecycle
 * checks. It goes, with this file, once its last caller has moved.
 */
import type Database from 'better-sqlite3';

import {
  CONTAINER_TABLE,
  fromContainerRecord,
  toContainerRecord,
  type ContainerRecord,
} from './container-record.js';
import type { ContainerRepo } from './containers.js';
import { SANDBOX_TABLE, fromRecord, toRecord, type SandboxRecord } from './sandbox-record.js';
import { Table } from './table.js';
import type { ContainerPatch, ContainerRow, SandboxPatch, SandboxRow } from './types.js';

export class SandboxRowRepo {
  private readonly table: Table<SandboxRecord, SandboxRow>;
  private readonly byMetadata: (
    namespace: string,
    name: string,
    uid: string,
    attempt: number,
  ) => SandboxRow[];

  constructor(db: Database.Database) {
    this.table = new Table(db, SANDBOX_TABLE, { toRecord, fromRecord });
    this.byMetadata = this.table.where('namespace = ? AND name = ? AND uid = ? AND attempt = ?');
  }

  insert(row: SandboxRow): void {
    this.table.insert(row);
  }

  update(id: string, patch: SandboxPatch): void {
    this.table.update(id, (row) => mergePatch(row, patch, SANDBOX_PATCH_KEYS));
  }

  get(id: string): SandboxRow | undefined {
    return this.table.get(id);
  }

  findByMetadata(namespace: string, name: string, uid: string, attempt: number): SandboxRow | undefined {
    return this.byMetadata(namespace, name, uid, attempt)[0];
  }

  findByIdPrefix(prefix: string): SandboxRow[] {
    return this.table.findByIdPrefix(prefix);
  }

  list(): SandboxRow[] {
    return this.table.list();
  }
}

/** Reads and writes rows; delete and imageInUse are the typed repository's, which has no row in them. */
export class ContainerRowRepo {
  private readonly table: Table<ContainerRecord, ContainerRow>;
  private readonly bySandbox: (sandboxId: string) => ContainerRow[];

  constructor(
    db: Database.Database,
    private readonly typed: ContainerRepo,
  ) {
    this.table = new Table(db, CONTAINER_TABLE, {
      toRecord: toContainerRecord,
      fromRecord: fromContainerRecord,
    });
    this.bySandbox = this.table.where('sandbox_id = ?');
  }

  /**
   * Throws AlreadyExistsError if the id or the (sandbox, name, attempt) is taken, and
   * NotFoundError if the sandbox has no row.
   */
  insert(row: ContainerRow): void {
    this.table.insert(row);
  }

  /** Changes only the fields present (and not undefined) in `patch`. Throws NotFoundError for an unknown id. */
  update(id: string, patch: ContainerPatch): void {
    this.table.update(id, (row) => mergePatch(row, patch, CONTAINER_PATCH_KEYS));
  }

  get(id: string): ContainerRow | undefined {
    return this.table.get(id);
  }

  findByIdPrefix(prefix: string): ContainerRow[] {
    return this.table.findByIdPrefix(prefix);
  }

  listBySandbox(sandboxId: string): ContainerRow[] {
    return this.bySandbox(sandboxId);
  }

  list(): ContainerRow[] {
    return this.table.list();
  }

  delete(id: string): boolean {
    return this.typed.delete(id);
  }

  imageInUse(imageId: string): string[] {
    return this.typed.imageInUse(imageId);
  }
}

/** A Record rather than a list so that a field added to SandboxRow fails to compile until listed. */
const SANDBOX_PATCH_KEYS: Record<keyof SandboxPatch, true> = {
  name: true,
  namespace: true,
  uid: true,
  attempt: true,
  state: true,
  step: true,
  configJson: true,
  runtimeHandler: true,
  hostNetwork: true,
  netnsPath: true,
  networkState: true,
  cniConfigJson: true,
  cniResultJson: true,
  ip: true,
  additionalIps: true,
  createdAt: true,
  pid: true,
  cgroupParent: true,
  sandboxDir: true,
};

const CONTAINER_PATCH_KEYS: Record<keyof ContainerPatch, true> = {
  state: true,
  step: true,
  configJson: true,
  imageName: true,
  imageId: true,
  createdAt: true,
  startedAt: true,
  finishedAt: true,
  exitCode: true,
  reason: true,
  message: true,
  pid: true,
  monitorPid: true,
  logPath: true,
  bundleDir: true,
  cgroupsPath: true,
  userJson: true,
};

/**
 * Copies the defined fields of `patch` over `row`; an explicit undefined means "leave as is". Keys
 * outside `keys` (the identity, or strays a cast may have smuggled in) are dropped.
 */
function mergePatch<Row, K extends keyof Row>(
  row: Row,
  patch: Partial<Pick<Row, K>>,
  keys: Record<K, true>,
): Row {
  const next = { ...row };
  for (const key of Object.keys(patch)) {
    if (isKey(keys, key)) copyField(next, patch, key);
  }
  return next;
}

function copyField<Row, K extends keyof Row>(row: Row, patch: Partial<Pick<Row, K>>, key: K): void {
  const value = patch[key];
  if (value !== undefined) row[key] = value;
}

function isKey<K extends PropertyKey>(keys: Record<K, true>, key: PropertyKey): key is K {
  return Object.hasOwn(keys, key);
}
