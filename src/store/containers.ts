import type Database from 'better-sqlite3';

import type { Container, ContainerExit, ContainerResources, ContainerUser } from '../model/container.js';
import { nextContainerState, type ContainerTransition } from '../model/container-lifecycle.js';
import { CONTAINER_TABLE, containerMapping, type ContainerRecord } from './container-record.js';
import { Table, creationOrder } from './table.js';

/** The fields a transition may set besides the state, which only the lifecycle table sets. */
type ContainerChanges = Partial<
  Pick<
    Container,
    | 'step'
    | 'spec'
    | 'user'
    | 'pid'
    | 'monitorPid'
    | 'startedAt'
    | 'finishedAt'
    | 'exitCode'
    | 'reason'
    | 'message'
  >
>;

/** The processes conmon started for a container. */
export interface ContainerProcess {
  pid: number;
  monitorPid: number;
}

/**
 * Containers, sharing the store's connection. Records are inserted whole and then change only by
 * the named transitions below, each checked against src/model/container-lifecycle.ts and applied
 * in one IMMEDIATE transaction; each returns the record as it now is.
 */
export class ContainerRepo {
  private readonly table: Table<ContainerRecord, Container>;
  private readonly bySandbox: (sandboxId: string) => Container[];
  private readonly idsByImage: Database.Statement<[string], { id: string }>;

  constructor(db: Database.Database) {
    // Status and listings read containers far more often than they change.
    this.table = new Table(db, CONTAINER_TABLE, containerMapping, { keepValues: true });
    this.bySandbox = this.table.where('sandbox_id = ?');
    // Not through the table: only the ids are wanted, and no spec need be parsed for them.
    this.idsByImage = db.prepare<[string], { id: string }>(
      `SELECT id FROM containers WHERE image_id = ? ${creationOrder()}`,
    );
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

  /** Ids of the containers made from image `imageId`, oldest first; empty when it is unused. */
  imageInUse(imageId: string): string[] {
    return this.idsByImage.all(imageId).map((record) => record.id);
  }

  beginStep(id: string, step: string): Container {
    return this.advance(id, 'beginStep', () => ({ step }));
  }

  userResolved(id: string, user: ContainerUser): Container {
    return this.advance(id, 'userResolved', () => ({ user }));
  }

  processCreated(id: string, process: ContainerProcess): Container {
    return this.advance(id, 'processCreated', () => ({ pid: process.pid, monitorPid: process.monitorPid }));
  }

  markCreated(id: string): Container {
    return this.advance(id, 'markCreated', () => ({ step: 'created' }));
  }

  /** The processes are gone with the failed create's undo: pid 0. */
  createFailed(id: string, exit: ContainerExit): Container {
    return this.advance(id, 'createFailed', () => ({ ...exitChanges(exit), pid: 0 }));
  }

  markRunning(id: string, startedAt: string): Container {
    return this.advance(id, 'markRunning', () => ({ startedAt }));
  }

  /** The pid stays: the process runc created may outlive a failed start, until RemoveContainer deletes it. */
  startFailed(id: string, startedAt: string, exit: ContainerExit): Container {
    return this.advance(id, 'startFailed', () => ({ ...exitChanges(exit), startedAt }));
  }

  markExited(id: string, exit: ContainerExit): Container {
    return this.advance(id, 'markExited', () => ({ ...exitChanges(exit), pid: 0 }));
  }

  /** The stored spec takes the limits runc now enforces, so Status and restarts report them. */
  updateResources(id: string, resources: ContainerResources): Container {
    return this.advance(id, 'updateResources', (current) => ({ spec: { ...current.spec, resources } }));
  }

  private advance(
    id: string,
    transition: ContainerTransition,
    changes: (current: Container) => ContainerChanges,
  ): Container {
    return this.table.update(id, (current) => {
      const state = nextContainerState(id, current.state, transition);
      return { ...current, ...changes(current), state };
    });
  }
}

/** Explicit fields: an exit built elsewhere (conmon's exit record, say) may carry more. */
function exitChanges({ exitCode, reason, message, finishedAt }: ContainerExit): ContainerChanges {
  return { exitCode, reason, message, finishedAt };
}
