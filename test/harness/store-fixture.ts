/**
 * The database a berth from before versioned records wrote (test/fixtures/store-main), as the
 * tests that read it after the change need it: the file rebuilt, and what that berth read from it.
 */
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { Container } from '../../src/model/container.js';
import type { Sandbox } from '../../src/model/sandbox.js';
import type { ImageWithNames, LayerRecord } from '../../src/store/types.js';
import { loadDump } from './sql-dump.js';

/** The fixture's directory in the source tree, from dist/test/harness. */
const DIR = fileURLToPath(new URL('../../../test/fixtures/store-main/', import.meta.url));

/** What the store of the commit that made the fixture read from it. */
export interface FixtureRecords {
  sandboxes: Sandbox[];
  containers: Container[];
  images: ImageWithNames[];
  layers: LayerRecord[];
}

export function fixtureRecords(): FixtureRecords {
  return JSON.parse(readFileSync(`${DIR}records.json`, 'utf8')) as FixtureRecords;
}

/**
 * The fixture's records as this berth reads them: each field a later spec shape added, with the
 * value its upgrade (src/store/spec-codec.ts) says it had for rows written before.
 */
export function fixtureRecordsReadNow(): FixtureRecords {
  const records = fixtureRecords();
  // Sandbox spec shape 2: every pod before it ran in the host's user namespace. Migration 6: no pod
  // before it had a cgroup berth made, or recorded resources. Migration 8: no infra's start time
  // was recorded (start-up reads it), and no pod was found dead.
  const sandboxes = records.sandboxes.map((s) => ({
    ...s,
    spec: { ...s.spec, userNamespace: null },
    podCgroup: '',
    resources: null,
    infraStartTime: 0,
    reason: '',
  }));
  // Container spec shapes 2 to 5: no container before them asked for a CDI device, had an idmapped
  // or image volume (the fixture's have no mounts), or kept only the pod's groups. Schema 6: none
  // was made from a checkpoint.
  const containers = records.containers.map((c) => ({
    ...c,
    restore: false,
    spec: {
      ...c.spec,
      cdiDevices: [],
      security: { ...c.spec.security, supplementalGroupsPolicy: 'Merge' as const },
    },
  }));
  return { ...records, sandboxes, containers };
}

/** Makes the fixture's database file at `path`, which must not exist. */
export function makeFixtureDatabase(path: string): void {
  loadDump(path, readFileSync(`${DIR}berth.sql`, 'utf8'));
}

/**
 * The run dir of the test daemon that made the fixture (/run/berth-test-<tag>): its rows name
 * paths there, and the CNI DEL start-up repair runs for them makes host-local's lock dir in it.
 */
export function fixtureRunDir(records: FixtureRecords): string {
  const netns = records.sandboxes.find((s) => s.netnsPath !== null)?.netnsPath;
  if (!netns?.startsWith('/run/berth-test-')) throw new Error('the fixture names no test netns');
  return dirname(dirname(netns));
}

/** The one record of `name` among `records`; fails when there is none. */
export function named<R extends { name: string }>(records: readonly R[], name: string): R {
  const found = records.find((record) => record.name === name);
  if (!found) throw new Error(`the fixture has no record named ${name}`);
  return found;
}
