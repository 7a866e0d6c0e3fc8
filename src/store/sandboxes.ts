import type Database from 'better-sqlite3';

import type { CniResult } from '../cni/index.js';
import type { Sandbox, StoredNetworking } from '../model/sandbox.js';
import { nextSandboxStates, type SandboxTransition } from '../model/sandbox-lifecycle.js';
import { SANDBOX_TABLE, sandboxMapping, type SandboxRecord } from './sandbox-record.js';
import { Table } from './table.js';

/** The fields a transition may set besides the states, which only the lifecycle table sets. */
type SandboxChanges = Partial<
  Pick<Sandbox, 'step' | 'pid' | 'cniConfig' | 'cniResults' | 'ip' | 'additionalIps'>
>;

/** What the ADDs of a pod's networks came to. */
export interface NetworkUp {
  results: CniResult[];
  ip: string;
  additionalIps: string[];
}

/**
 * Pod sandboxes, sharing the store's connection. Records are inserted whole and then change only
 * by the named transitions below, each checked against src/model/sandbox-lifecycle.ts and applied
 * in one IMMEDIATE transaction; each returns the record as it now is.
 */
export class SandboxRepo {
  private readonly table: Table<SandboxRecord, Sandbox>;
  private readonly byMetadata: (namespace: string, name: string, uid: string, attempt: number) => Sandbox[];

  constructor(db: Database.Database) {
    this.table = new Table(db, SANDBOX_TABLE, sandboxMapping);
    this.byMetadata = this.table.where('namespace = ? AND name = ? AND uid = ? AND attempt = ?');
  }

  /** Throws AlreadyExistsError if the id or the (namespace, name, uid, attempt) is taken. */
  insert(sandbox: Sandbox): void {
    this.table.insert(sandbox);
  }

  get(id: string): Sandbox | undefined {
    return this.table.get(id);
  }

  /** The pod's sandbox, as kubelet's retry of a RunPodSandbox names it. */
  findByMetadata(namespace: string, name: string, uid: string, attempt: number): Sandbox | undefined {
    return this.byMetadata(namespace, name, uid, attempt)[0];
  }

  /** Oldest first; an empty prefix matches nothing. */
  findByIdPrefix(prefix: string): Sandbox[] {
    return this.table.findByIdPrefix(prefix);
  }

  /** Oldest first. */
  list(): Sandbox[] {
    return this.table.list();
  }

  /** Returns whether a row was deleted; deleting an unknown id is not an error (RemovePodSandbox is idempotent). */
  delete(id: string): boolean {
    return this.table.delete(id);
  }

  beginStep(id: string, step: string): Sandbox {
    return this.advance(id, 'beginStep', { step });
  }

  infraCreated(id: string, pid: number): Sandbox {
    return this.advance(id, 'infraCreated', { pid });
  }

  networkAdding(id: string, cniConfig: StoredNetworking): Sandbox {
    return this.advance(id, 'networkAdding', { cniConfig });
  }

  /** Counts plugin `plugin` (0-based) of network `network` as started, before its ADD runs. */
  pluginAddStarting(id: string, network: number, plugin: number): Sandbox {
    return this.advance(id, 'pluginAddStarting', (current) => {
      const stored = current.cniConfig;
      if (stored === null) return {};
      const addsStarted = stored.networks.map((_, i) => stored.addsStarted?.[i] ?? 0);
      addsStarted[network] = Math.max(addsStarted[network] ?? 0, plugin + 1);
      return { cniConfig: { ...stored, addsStarted } };
    });
  }

  networkUp(id: string, up: NetworkUp): Sandbox {
    return this.advance(id, 'networkUp', {
      cniResults: up.results,
      ip: up.ip,
      additionalIps: up.additionalIps,
    });
  }

  markReady(id: string): Sandbox {
    return this.advance(id, 'markReady', { step: 'ready' });
  }

  /** `failedStep` is the step whose failure undoing could not fully repair. */
  createFailed(id: string, failedStep: string): Sandbox {
    return this.advance(id, 'createFailed', { step: `failed at ${failedStep}`, pid: 0 });
  }

  markNotReady(id: string): Sandbox {
    return this.advance(id, 'markNotReady', { pid: 0 });
  }

  networkTornDown(id: string): Sandbox {
    return this.advance(id, 'networkTornDown', {});
  }

  private advance(
    id: string,
    transition: SandboxTransition,
    changes: SandboxChanges | ((current: Sandbox) => SandboxChanges),
  ): Sandbox {
    return this.table.update(id, (current) => {
      const states = nextSandboxStates(id, current, transition);
      return { ...current, ...(typeof changes === 'function' ? changes(current) : changes), ...states };
    });
  }
}
