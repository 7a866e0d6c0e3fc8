import type Database from 'better-sqlite3';

import type { CniResult } from '../cni/index.js';
import { NotFoundError } from '../errors.js';
import type { PodResources, Sandbox, StoredNetworking } from '../model/sandbox.js';
import type { ProcessRef } from '../process/index.js';
import {
  NETWORK_STATES,
  SANDBOX_STATES,
  SANDBOX_TRANSITIONS,
  nextSandboxStates,
  type SandboxTransition,
} from '../model/sandbox-lifecycle.js';
import { encodeNullableJson, parseEnum } from './columns.js';
import { startsFrom } from './guard.js';
import { decodeNetworking, SANDBOX_TABLE, sandboxMapping, type SandboxRecord } from './sandbox-record.js';
import { Table, type Change } from './table.js';

/** What a transition writes besides the states, which only the lifecycle table sets. */
type SandboxColumn =
  | 'step'
  | 'pid'
  | 'infra_start_time'
  | 'reason'
  | 'cni_config_json'
  | 'cni_result_json'
  | 'ip'
  | 'additional_ips'
  | 'resources_json';

/** The columns each transition writes besides the states. */
const WRITES: Record<SandboxTransition, readonly SandboxColumn[]> = {
  infraCreated: ['pid', 'infra_start_time'],
  infraIdentified: ['pid', 'infra_start_time'],
  networkAdding: ['cni_config_json'],
  pluginAddStarting: ['cni_config_json'],
  networkUp: ['cni_result_json', 'ip', 'additional_ips'],
  markReady: ['step'],
  createFailed: ['step', 'pid', 'infra_start_time'],
  foundDead: ['pid', 'infra_start_time', 'reason'],
  markNotReady: ['pid', 'infra_start_time'],
  networkTornDown: [],
  resourcesUpdated: ['resources_json'],
};

/** What the ADDs of a pod's networks came to. */
export interface NetworkUp {
  results: CniResult[];
  ip: string;
  additionalIps: string[];
}

interface StatesRow {
  state: string;
  network_state: string;
}

/**
 * Pod sandboxes, sharing the store's connection. Records are inserted whole and then change only
 * by the named transitions below, each checked against src/model/sandbox-lifecycle.ts: one UPDATE
 * of the columns it writes, guarded by the states it may start from, so one commit; each returns
 * the record as it now is.
 */
export class SandboxRepo {
  private readonly table: Table<SandboxRecord, Sandbox>;
  private readonly byMetadata: (namespace: string, name: string, uid: string, attempt: number) => Sandbox[];
  private readonly changes: Record<SandboxTransition, Change<SandboxRecord, Sandbox>>;
  private readonly states: Database.Statement<[string], StatesRow>;
  private readonly cniConfig: Database.Statement<[string], string | null>;
  private readonly pluginAddStartingInTransaction: Database.Transaction<
    (id: string, network: number, plugin: number) => Sandbox
  >;

  constructor(db: Database.Database) {
    this.table = new Table(db, SANDBOX_TABLE, sandboxMapping);
    this.byMetadata = this.table.where('namespace = ? AND name = ? AND uid = ? AND attempt = ?');
    const change = (transition: SandboxTransition): Change<SandboxRecord, Sandbox> => {
      const rule = SANDBOX_TRANSITIONS[transition];
      const columns: (keyof SandboxRecord & string)[] = [...WRITES[transition]];
      const guards = [startsFrom('state', rule.state)];
      if (rule.state.to) columns.push('state');
      if (rule.network) guards.push(startsFrom('network_state', rule.network));
      if (rule.network?.to) columns.push('network_state');
      return this.table.change(columns, guards.join(' AND '));
    };
    this.changes = {
      infraCreated: change('infraCreated'),
      infraIdentified: change('infraIdentified'),
      foundDead: change('foundDead'),
      networkAdding: change('networkAdding'),
      pluginAddStarting: change('pluginAddStarting'),
      networkUp: change('networkUp'),
      markReady: change('markReady'),
      createFailed: change('createFailed'),
      markNotReady: change('markNotReady'),
      networkTornDown: change('networkTornDown'),
      resourcesUpdated: change('resourcesUpdated'),
    };
    this.states = db.prepare<[string], StatesRow>('SELECT state, network_state FROM sandboxes WHERE id = ?');
    this.cniConfig = db
      .prepare<[string], string | null>('SELECT cni_config_json FROM sandboxes WHERE id = ?')
      .pluck();
    // The count read and raised under one lock, so a concurrent writer cannot slip in between.
    this.pluginAddStartingInTransaction = db.transaction((id: string, network: number, plugin: number) => {
      const text = this.cniConfig.get(id);
      if (text === undefined) throw new NotFoundError('sandbox', id);
      const stored =
        text === null ? null : decodeNetworking(text, { noun: 'sandbox', id, column: 'cni_config_json' });
      return this.advance(id, 'pluginAddStarting', {
        cni_config_json: encodeNullableJson(started(stored, network, plugin)),
      });
    });
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

  infraCreated(id: string, infra: ProcessRef): Sandbox {
    return this.advance(id, 'infraCreated', { pid: infra.pid, infra_start_time: infra.startTime });
  }

  /** For a running infra recorded before berth kept its start time. */
  infraIdentified(id: string, infra: ProcessRef): Sandbox {
    return this.advance(id, 'infraIdentified', { pid: infra.pid, infra_start_time: infra.startTime });
  }

  /** `reason`: what was found gone, as PodSandboxStatus and a refused CreateContainer say it. */
  foundDead(id: string, reason: string): Sandbox {
    return this.advance(id, 'foundDead', { pid: 0, infra_start_time: 0, reason });
  }

  networkAdding(id: string, cniConfig: StoredNetworking): Sandbox {
    return this.advance(id, 'networkAdding', { cni_config_json: JSON.stringify(cniConfig) });
  }

  /** Counts plugin `plugin` (0-based) of network `network` as started, before its ADD runs. */
  pluginAddStarting(id: string, network: number, plugin: number): Sandbox {
    return this.pluginAddStartingInTransaction.immediate(id, network, plugin);
  }

  networkUp(id: string, up: NetworkUp): Sandbox {
    return this.advance(id, 'networkUp', {
      cni_result_json: JSON.stringify(up.results),
      ip: up.ip,
      additional_ips: JSON.stringify(up.additionalIps),
    });
  }

  markReady(id: string): Sandbox {
    return this.advance(id, 'markReady', { step: 'ready' });
  }

  /** `failedStep` is the step whose failure undoing could not fully repair. */
  createFailed(id: string, failedStep: string): Sandbox {
    return this.advance(id, 'createFailed', { step: `failed at ${failedStep}`, pid: 0, infra_start_time: 0 });
  }

  markNotReady(id: string): Sandbox {
    return this.advance(id, 'markNotReady', { pid: 0, infra_start_time: 0 });
  }

  networkTornDown(id: string): Sandbox {
    return this.advance(id, 'networkTornDown', {});
  }

  resourcesUpdated(id: string, resources: PodResources): Sandbox {
    return this.advance(id, 'resourcesUpdated', { resources_json: JSON.stringify(resources) });
  }

  private advance(id: string, transition: SandboxTransition, values: Partial<SandboxRecord>): Sandbox {
    const changed = this.changes[transition](id, { ...values, ...statesAfter(transition) });
    return changed ?? this.unchanged(id, transition);
  }

  /** No row satisfied the guard: the reason, or the row, which already held what the transition writes. */
  private unchanged(id: string, transition: SandboxTransition): Sandbox {
    const row = this.states.get(id);
    if (row === undefined) throw new NotFoundError('sandbox', id);
    const where = (column: string) => ({ noun: 'sandbox', id, column });
    nextSandboxStates(
      id,
      {
        state: parseEnum(SANDBOX_STATES, row.state, where('state')),
        networkState: parseEnum(NETWORK_STATES, row.network_state, where('network_state')),
      },
      transition,
    );
    const current = this.table.get(id);
    if (current === undefined) throw new NotFoundError('sandbox', id);
    return current;
  }
}

/** The state columns `transition` sets, as it sets them. */
function statesAfter(transition: SandboxTransition): Partial<SandboxRecord> {
  const rule = SANDBOX_TRANSITIONS[transition];
  return {
    ...(rule.state.to && { state: rule.state.to }),
    ...(rule.network?.to && { network_state: rule.network.to }),
  };
}

/** `stored` with plugin `plugin` of network `network` counted as started; null stays null. */
function started(stored: StoredNetworking | null, network: number, plugin: number): StoredNetworking | null {
  if (stored === null) return null;
  const addsStarted = stored.networks.map((_, i) => stored.addsStarted?.[i] ?? 0);
  addsStarted[network] = Math.max(addsStarted[network] ?? 0, plugin + 1);
  return { ...stored, addsStarted };
}
