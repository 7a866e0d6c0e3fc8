/**
 * Specs written once with the version of their shape, read back through a versioned decoder; and
 * transitions that write their state columns only, one commit each.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';

import { Store } from '../../src/store/index.js';
import { CONTAINER_SPEC, currentVersion, decodeSpec, type SpecCodec } from '../../src/store/spec-codec.js';
import { emptyResources } from '../harness/container-spec.js';
import { selectRows, withConnection } from '../harness/database.js';
import { cniResults, container, sandbox, storedNetworking } from '../harness/records.js';
import { commitsBetween, walMark } from '../harness/wal.js';

const WHERE = { noun: 'container', id: 'c1', column: 'config_json' };

describe('the versioned spec decoder', () => {
  /** What a berth that added `tty` to a spec of shape 1 would declare. */
  const twoShapes: SpecCodec = {
    upgrades: [(older) => ({ ...older, tty: false })],
    looksRight: (spec) => typeof spec.tty === 'boolean',
  };

  it('gives a spec of an older shape the field it lacked, explicitly', () => {
    const old = decodeSpec<Record<string, unknown>>(twoShapes, 1, '{"metadata":{}}', WHERE);
    assert.deepEqual(old, { metadata: {}, tty: false });
    const current = decodeSpec<Record<string, unknown>>(twoShapes, 2, '{"metadata":{},"tty":true}', WHERE);
    assert.deepEqual(current, { metadata: {}, tty: true });
    assert.equal(currentVersion(twoShapes), 2);
  });

  it('refuses a version it does not know, naming the row and column', () => {
    for (const version of [0, 3, 1.5]) {
      assert.throws(
        () => decodeSpec(twoShapes, version, '{"metadata":{}}', WHERE),
        new RegExp(
          `^Error: container c1: config_json has spec version ${version}, which this berth cannot read`,
        ),
      );
    }
    const unknown = currentVersion(CONTAINER_SPEC) + 1;
    assert.throws(
      () => decodeSpec(CONTAINER_SPEC, unknown, '{"metadata":{}}', WHERE),
      new RegExp(`spec version ${unknown}`),
    );
  });

  it('still checks the outline of what it upgraded', () => {
    assert.throws(() => decodeSpec(twoShapes, 2, '{"metadata":{}}', WHERE), /unexpected config_json/);
    assert.throws(() => decodeSpec(CONTAINER_SPEC, 1, '[]', WHERE), /unexpected config_json/);
  });

  it('reads a container spec of shape 1 as merging the image groups, as every container then did', () => {
    const text = '{"metadata":{},"mounts":[],"security":{"supplementalGroups":[5]}}';
    const spec = decodeSpec<{ security: unknown }>(CONTAINER_SPEC, 1, text, WHERE);
    assert.deepEqual(spec.security, { supplementalGroups: [5], supplementalGroupsPolicy: 'Merge' });
  });
});

describe('records written light', () => {
  let dir: string;
  let path: string;
  let store: Store;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-store-light-'));
    path = join(dir, 'berth.db');
    store = Store.open(path);
  });

  afterEach(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const specColumns = (table: string): unknown[] =>
    selectRows<Record<string, unknown>>(dir, `SELECT * FROM ${table}`).map((row) => ({
      config_json: row.config_json,
      spec_version: row.spec_version,
    }));

  it('writes each spec once, with its version, and never again', () => {
    store.sandboxes.insert(sandbox());
    store.containers.insert(container());
    const written = [specColumns('sandboxes'), specColumns('containers')];
    // Shape 2 of sandbox specs added userNamespace; container specs are at their newest shape too.
    assert.deepEqual(written[0], [{ config_json: JSON.stringify(sandbox().spec), spec_version: 2 }]);
    assert.deepEqual(written[1], [
      { config_json: JSON.stringify(container().spec), spec_version: currentVersion(CONTAINER_SPEC) },
    ]);

    store.sandboxes.networkAdding('pod1', storedNetworking());
    store.sandboxes.pluginAddStarting('pod1', 0, 0);
    store.sandboxes.networkUp('pod1', { results: cniResults(), ip: '10.88.0.5', additionalIps: [] });
    store.sandboxes.markReady('pod1');
    store.containers.beginStep('c0ffee01', 'rootfs');
    store.containers.userResolved('c0ffee01', { uid: 1, gid: 1, additionalGids: [] });
    store.containers.markCreated('c0ffee01', { pid: 4242, monitorPid: 4241 });
    store.containers.markRunning('c0ffee01', '5');
    const resources = { ...emptyResources(), cpuShares: 512 };
    assert.deepEqual(store.containers.updateResources('c0ffee01', resources).spec, {
      ...container().spec,
      resources,
    });
    store.containers.markExited('c0ffee01', {
      exitCode: 0,
      reason: 'Completed',
      message: '',
      finishedAt: '6',
    });
    assert.deepEqual([specColumns('sandboxes'), specColumns('containers')], written);

    // The changed resources are kept beside the spec, in a shape of their own, and read back.
    assert.deepEqual(selectRows(dir, 'SELECT resources_json, resources_version FROM containers'), [
      { resources_json: JSON.stringify(resources), resources_version: 1 },
    ]);
    store.close();
    store = Store.open(path);
    assert.equal(store.containers.get('c0ffee01')?.spec.resources.cpuShares, 512);
  });

  it('reads a row of an unknown spec version as an error naming it, not as a guess', () => {
    store.sandboxes.insert(sandbox());
    store.containers.insert(container());
    store.close();
    const unknown = currentVersion(CONTAINER_SPEC) + 1;
    withConnection(path, (db) => db.prepare('UPDATE containers SET spec_version = ?').run(unknown));
    store = Store.open(path);
    assert.throws(
      () => store.containers.get('c0ffee01'),
      new RegExp(`container c0ffee01: config_json has spec version ${unknown}`),
    );
  });

  it('commits once per transition, and not at all for a step already journaled', () => {
    store.sandboxes.insert(sandbox());
    store.containers.insert(container({ step: 'rootfs' }));
    const commits = (act: () => void): number => {
      const before = walMark(path);
      act();
      return commitsBetween(before, walMark(path));
    };
    assert.equal(
      commits(() => store.containers.beginStep('c0ffee01', 'rootfs')),
      0,
    );
    assert.equal(store.containers.get('c0ffee01')?.step, 'rootfs');
    assert.equal(
      commits(() => store.containers.beginStep('c0ffee01', 'spec')),
      1,
    );
    assert.equal(
      commits(() => store.containers.markCreated('c0ffee01', { pid: 4242, monitorPid: 4241 })),
      1,
    );
    assert.deepEqual(store.containers.get('c0ffee01'), {
      ...container(),
      state: 'CREATED',
      step: 'created',
      pid: 4242,
      monitorPid: 4241,
    });
    // Refused by its guard: the transaction that read the count rolls back, writing nothing.
    assert.equal(
      commits(() =>
        assert.throws(() => store.sandboxes.pluginAddStarting('pod1', 1, 0), /network state NONE/),
      ),
      0,
    );
  });
});
