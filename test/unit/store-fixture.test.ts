/**
 * A database written by berth before its records carried a spec version (test/fixtures/store-main,
 * made at c81c74c) reads back, through today's migrations and decoders, exactly as that berth read it.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { Store } from '../../src/store/index.js';
import { selectRows } from '../harness/database.js';
import {
  fixtureRecordsReadNow,
  makeFixtureDatabase,
  named,
  type FixtureRecords,
} from '../harness/store-fixture.js';

describe('a database written before versioned records', () => {
  let dir: string;
  let store: Store;
  let expected: FixtureRecords;

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'berth-store-fixture-'));
    const path = join(dir, 'berth.db');
    makeFixtureDatabase(path);
    store = Store.open(path);
    expected = fixtureRecordsReadNow();
  });

  after(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('holds the pods, containers and image the fixture says it does', () => {
    // Guards the fixture itself: the comparisons below mean something only if these are in it.
    const pods = expected.sandboxes.map((s) => [s.name, s.state, s.networkState, s.infra]);
    assert.deepEqual(pods, [
      ['fixture-ready', 'READY', 'READY', true],
      ['fixture-stopped', 'NOTREADY', 'TORN_DOWN', false],
    ]);
    const containers = expected.containers.map((c) => [c.name, c.state, c.exitCode, c.reason]);
    assert.deepEqual(containers, [
      ['running', 'RUNNING', 0, ''],
      ['exited', 'EXITED', 3, 'Error'],
      ['created', 'CREATED', 0, ''],
      ['in-stopped', 'EXITED', 137, 'Error'],
    ]);
    assert.equal(expected.images.length, 1);
  });

  it('reads every sandbox back exactly', () => {
    assert.deepEqual(store.sandboxes.list(), expected.sandboxes);
    for (const sandbox of expected.sandboxes) assert.deepEqual(store.sandboxes.get(sandbox.id), sandbox);
    const ready = named(store.sandboxes.list(), 'fixture-ready');
    assert.deepEqual(ready.spec.portMappings, [
      { protocol: 'TCP', containerPort: 8080, hostPort: 0, hostIp: '' },
    ]);
    assert.deepEqual(ready.spec.dnsConfig, {
      servers: ['10.10.10.10'],
      searches: ['cluster.local'],
      options: ['ndots:5'],
    });
    assert.deepEqual(ready.spec.labels, { app: 'fixture', tier: 'ready' });
    assert.equal(ready.spec.annotations['berth.test/fixture'], 'ready');
    assert.ok(ready.pid > 0 && ready.ip !== '' && ready.cniResults !== null && ready.cniConfig !== null);
  });

  it('reads every container back exactly', () => {
    assert.deepEqual(store.containers.list(), expected.containers);
    for (const container of expected.containers) {
      assert.deepEqual(store.containers.get(container.id), container);
    }
    const running = named(store.containers.list(), 'running');
    // What UpdateContainerResources set after the container started, not what it was created with.
    assert.equal(running.spec.resources.memoryLimitBytes, 96 * 1024 * 1024);
    assert.equal(running.spec.resources.cpuShares, 512);
    assert.ok(running.user !== null && running.pid > 0 && running.monitorPid > 0);
    const exited = named(store.containers.list(), 'exited');
    assert.ok(BigInt(exited.finishedAt) >= BigInt(exited.startedAt) && exited.startedAt !== '0');
  });

  it('reads the image, its names and its layers back exactly', () => {
    assert.deepEqual(store.images.listImages(), expected.images);
    assert.deepEqual(store.images.listLayers(), expected.layers);
    const [image] = expected.images;
    assert.ok(image);
    assert.equal(image.repoTags.length, 1);
    assert.equal(image.repoDigests.length, 1);
    assert.deepEqual(store.images.getImage(image.id), store.images.findImageByName(image.repoTags[0] ?? ''));
  });

  it('takes transitions on the old rows without rewriting their specs', () => {
    const specs = (): unknown[] =>
      ['sandboxes', 'containers'].flatMap((table) =>
        selectRows(dir, `SELECT id, config_json, spec_version FROM ${table} ORDER BY id`),
      );
    const before = specs();
    const running = named(expected.containers, 'running');
    const created = named(expected.containers, 'created');
    const ready = named(expected.sandboxes, 'fixture-ready');
    const exit = { exitCode: 137, reason: 'Error', message: '', finishedAt: '1795784949000000000' };
    assert.deepEqual(store.containers.markExited(running.id, exit), {
      ...running,
      ...exit,
      state: 'EXITED',
      pid: 0,
    });
    const resources = { ...created.spec.resources, cpuShares: 1024 };
    assert.deepEqual(store.containers.updateResources(created.id, resources), {
      ...created,
      spec: { ...created.spec, resources },
    });
    assert.deepEqual(store.sandboxes.markNotReady(ready.id), { ...ready, state: 'NOTREADY', pid: 0 });
    assert.deepEqual(store.sandboxes.networkTornDown(ready.id), {
      ...ready,
      state: 'NOTREADY',
      pid: 0,
      networkState: 'TORN_DOWN',
    });
    assert.deepEqual(specs(), before);
  });
});
