import type Database from 'better-sqlite3';

import { NotFoundError } from '../errors.js';
import type { Container, ContainerExit, ContainerResources, ContainerUser } from '../model/container.js';
import {
  CONTAINER_STATES,
  CONTAINER_TRANSITIONS,
  nextContainerState,
  type ContainerTransition,
} from '../model/container-lifecycle.js';
import { parseEnum } from './columns.js';
import {
  CONTAINER_TABLE,
  containerMapping,
  encodeResources,
  encodeUser,
  type ContainerRecord,
} from './container-record.js';
import { NEW_STEP, startsFrom } from './guard.js';
import { Table, creationOrder, type Change } from './table.js';

/** What a transition writes besides the state, which only the lifecycle table sets. */
type ContainerColumn = keyof ContainerRecord &
  (
    | 'step'
    | 'user_json'
    | 'pid'
    | 'monitor_pid'
    | 'started_at'
    | 'finished_at'
    | 'exit_code'
    | 'reason'
    | 'message'
    | 'resources_json'
    | 'resources_version'
  );

const EXIT_COLUMNS = ['exit_code', 'reason', 'message', 'finished_at'] as const;

/** The columns each transition writes besides the state. */
const WRITES: Record<ContainerTransition, readonly ContainerColumn[]> = {
  beginStep: ['step'],
  userResolved: ['user_json'],
  processCreated: ['pid', 'monitor_pid'],
  markCreated: ['step'],
  createFailed: [...EXIT_COLUMNS, 'pid'],
  markRunning: ['started_at'],
  markRestored: ['started_at', 'pid', 'monitor_pid'],
  startFailed: [...EXIT_COLUMNS, 'started_at'],
  markExited: [...EXIT_COLUMNS, 'pid'],
  updateResources: ['resources_json', 'resources_version'],
};

/** The processes conmon started for a container. */
export interface ContainerProcess {
  pid: number;
  monitorPid: number;
}

/**
 * Containers, sharing the store's connection. Records are inserted whole and then change only by
 * the named transitions below, each checked against src/model/container-lifecycle.ts: one UPDATE
 * of the columns it writes, guarded by the states it may start from, so one commit; each returns
 * the record as it now is.
 */
export class ContainerRepo {
  private readonly table: Table<ContainerRecord, Container>;
  private readonly bySandbox: (sandboxId: string) => Container[];
  private readonly idsByImage: Database.Statement<[string, string], { id: string }>;
  private readonly changes: Record<ContainerTransition, Change<ContainerRecord, Container>>;
  /** markCreated that also records the processes, when nothing was done between the two. */
  private readonly markCreatedWithProcess: Change<ContainerRecord, Container>;
  private readonly state: Database.Statement<[string], string>;

  constructor(db: Database.Database) {
    // Status and listings read containers far more often than they change.
    this.table = new Table(db, CONTAINER_TABLE, containerMapping, { keepValues: true });
    this.bySandbox = this.table.where('sandbox_id = ?');
    // Not through the table: only the ids are wanted, and no spec need be parsed for them.
    this.idsByImage = db.prepare<[string, string], { id: string }>(
      // A container uses an image as its rootfs, or as an image volume its spec names by id.
      `SELECT id FROM containers WHERE image_id = ? OR EXISTS (
         SELECT 1 FROM json_each(config_json, '$.mounts') WHERE json_extract(value, '$.image.id') = ?
       ) ${creationOrder()}`,
    );
    const change = (transition: ContainerTransition, writes = WRITES[transition]) => {
      const rule = CONTAINER_TRANSITIONS[transition];
      const columns: (keyof ContainerRecord & string)[] = [...writes, ...(rule.to ? ['state' as const] : [])];
      const guards = [startsFrom('state', rule), ...(writes.includes('step') && !rule.to ? [NEW_STEP] : [])];
      return this.table.change(columns, guards.join(' AND '));
    };
    this.changes = {
      beginStep: change('beginStep'),
      userResolved: change('userResolved'),
      processCreated: change('processCreated'),
      markCreated: change('markCreated'),
      createFailed: change('createFailed'),
      markRunning: change('markRunning'),
      markRestored: change('markRestored'),
      startFailed: change('startFailed'),
      markExited: change('markExited'),
      updateResources: change('updateResources'),
    };
    this.markCreatedWithProcess = change('markCreated', [...WRITES.markCreated, ...WRITES.processCreated]);
    this.state = db.prepare<[string], string>('SELECT state FROM containers WHERE id = ?').pluck();
  }

  /**
   * Throws AlreadyExistsError if the id or the (sandbox, name, attempt) is taken, and
   * NotFoundError if the sandbox has no row.
   */
  insert(container: Container): void {
    this.table.insert(container);
  }

  get(id: string): Container | undefined {
    return this.table.get(id);
  }

  /** Oldest first; an empty prefix matches nothing. */
  findByIdPrefix(prefix: string): Container[] {
    return this.table.findByIdPrefix(prefix);
  }

  /** Oldest first. */
  listBySandbox(sandboxId: string): Container[] {
    return this.bySandbox(sandboxId);
  }

  /** Oldest first. */
  list(): Container[] {
    return this.table.list();
  }

  /** Returns whether a row was deleted; deleting an unknown id is not an error (RemoveContainer is idempotent). */
  delete(id: string): boolean {
    return this.table.delete(id);
  }

  /** Ids of the containers made from image `imageId` or mounting it, oldest first; empty when unused. */
  imageInUse(imageId: string): string[] {
    return this.idsByImage.all(imageId, imageId).map((record) => record.id);
  }

  /** Journaling the step the row already names (the insert's, say) commits nothing. */
  beginStep(id: string, step: string): Container {
    return this.advance(id, 'beginStep', { step });
  }

  userResolved(id: string, user: ContainerUser): Container {
    return this.advance(id, 'userResolved', { user_json: encodeUser(user) });
  }

  processCreated(id: string, process: ContainerProcess): Container {
    return this.advance(id, 'processCreated', processColumns(process));
  }

  /**
   * With `process`, processCreated and markCreated in one commit: nothing happens outside the
   * database between the two, so a crash cannot tell them apart.
   */
  markCreated(id: string, process?: ContainerProcess): Container {
    if (process === undefined) return this.advance(id, 'markCreated', { step: 'created' });
    const values = { step: 'created', ...processColumns(process) };
    return this.advance(id, 'markCreated', values, this.markCreatedWithProcess);
  }

  /** The processes are gone with the failed create's undo: pid 0. */
  createFailed(id: string, exit: ContainerExit): Container {
    return this.advance(id, 'createFailed', { ...exitColumns(exit), pid: 0 });
  }

  markRunning(id: string, startedAt: string): Container {
    return this.advance(id, 'markRunning', { started_at: startedAt });
  }

  /** A restored container runs: its process and monitor came with the start (ContainerRepo's markRestored rule). */
  markRestored(id: string, startedAt: string, process: ContainerProcess): Container {
    return this.advance(id, 'markRestored', { started_at: startedAt, ...processColumns(process) });
  }

  /** The pid stays: the process runc created may outlive a failed start, until RemoveContainer deletes it. */
  startFailed(id: string, startedAt: string, exit: ContainerExit): Container {
    return this.advance(id, 'startFailed', { ...exitColumns(exit), started_at: startedAt });
  }

  markExited(id: string, exit: ContainerExit): Container {
    return this.advance(id, 'markExited', { ...exitColumns(exit), pid: 0 });
  }

  /**
   * The limits runc now enforces, so Status and restarts report them: kept beside the spec, which
   * is written once.
   */
  updateResources(id: string, resources: ContainerResources): Container {
    return this.advance(id, 'updateResources', encodeResources(resources));
  }

  private advance(
    id: string,
    transition: ContainerTransition,
    values: Partial<ContainerRecord>,
    change = this.changes[transition],
  ): Container {
    const to = CONTAINER_TRANSITIONS[transition].to;
    return change(id, { ...values, ...(to && { state: to }) }) ?? this.unchanged(id, transition);
  }

  /** No row satisfied the guard: the reason, or the row, which already held what the transition writes. */
  private unchanged(id: string, transition: ContainerTransition): Container {
    const state = this.state.get(id);
    if (state === undefined) throw new NotFoundError('container', id);
    nextContainerState(
      id,
      parseEnum(CONTAINER_STATES, state, { noun: 'container', id, column: 'state' }),
      transition,
    );
    const current = this.table.get(id);
    if (current === undefined) throw new NotFoundError('container', id);
    return current;
  }
}

function processColumns({ pid, monitorPid }: ContainerProcess): Partial<ContainerRecord> {
  return { pid, monitor_pid: monitorPid };
}

/** Explicit fields: an exit built elsewhere (conmon's exit record, say) may carry more. */
function exitColumns({ exitCode, reason, message, finishedAt }: ContainerExit): Partial<ContainerRecord> {
  return { exit_code: exitCode, reason, message, finished_at: finishedAt };
}
