/**
 * A berthd started on a database written by berth before its records carried a spec version
 * (test/fixtures/store-main, made at c81c74c), as a node rebooted into an upgraded berth would find
 * it: the rows are there, but none of the processes, mounts or files they name. Start-up repair
 * must read every row, report the pods stopped and the containers whose processes it lost as
 * exited, keep every recorded exit as it was, serve the specs as they were stored, and let kubelet
 * remove all of it. Needs root; sends no traffic.
 */
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import { describe, test } from 'node:test';

import { databasePath } from '../harness/database.js';
import { useDaemon } from '../harness/daemon.js';
import { startAndLog } from '../harness/log.js';
import { containerStatus } from '../harness/pods.js';
import { rootSkip as skip } from '../harness/skip.js';
import { fixtureRecords, fixtureRunDir, makeFixtureDatabase, named } from '../harness/store-fixture.js';
import type { WireContainer } from '../harness/wire.js';

const SUITE_TIMEOUT_MS = 120_000;

interface WirePod {
  id: string;
  state: string;
  created_at: string;
  metadata: { name: string; uid: string; namespace: string; attempt: number };
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

interface WireImage {
  id: string;
  repo_tags: string[];
  repo_digests: string[];
  size: string;
}

describe('berthd on a database written before versioned records', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const daemon = useDaemon();

  test('serves its pods, containers and image after a reboot, and removes them', async (t) => {
    const d = daemon();
    const expected = fixtureRecords();
    // Made again by the network teardown of the fixture's pods; not this daemon's to clean.
    const madeBy = fixtureRunDir(expected);
    assert.notEqual(madeBy, d.base);
    t.after(() => rm(madeBy, { recursive: true, force: true }));
    await d.stop();
    const path = databasePath(d.rootDir);
    await Promise.all(['', '-wal', '-shm'].map((suffix) => rm(`${path}${suffix}`, { force: true })));
    makeFixtureDatabase(path);
    // None of the fixture's processes exist: what berthd finds after a reboot.
    await d.forgetBoot();
    await startAndLog(d);

    const pods = (await d.cri.call<{ items: WirePod[] }>('ListPodSandbox', {})).items;
    assert.deepEqual(pods.map((p) => p.id).sort(), expected.sandboxes.map((s) => s.id).sort());
    for (const sandbox of expected.sandboxes) {
      const pod = named(
        pods.map((p) => ({ ...p, name: p.metadata.name })),
        sandbox.name,
      );
      assert.equal(pod.state, 'SANDBOX_NOTREADY', `${sandbox.name}: its infra or pins are gone`);
      assert.equal(pod.created_at, sandbox.createdAt);
      assert.deepEqual(pod.metadata, sandbox.spec.metadata);
      assert.deepEqual(pod.labels, sandbox.spec.labels);
      assert.deepEqual(pod.annotations, sandbox.spec.annotations);
    }

    const imageOf = (id: string) => {
      const image = expected.images.find((i) => i.id === id);
      assert.ok(image, `no image ${id} in the fixture`);
      return image;
    };
    const listed = (await d.cri.call<{ containers: WireContainer[] }>('ListContainers', {})).containers;
    assert.deepEqual(listed.map((c) => c.id).sort(), expected.containers.map((c) => c.id).sort());
    for (const container of expected.containers) {
      const status = await containerStatus(d.cri, container.id);
      const what = `container ${container.name}`;
      assert.equal(status.metadata.name, container.name, what);
      assert.equal(status.created_at, container.createdAt, what);
      assert.equal(status.image?.image, container.imageName, what);
      // Its image is still pulled: the reference is the image's repo digest, as before the reboot.
      assert.equal(status.image_ref, imageOf(container.imageId).repoDigests[0], what);
      assert.deepEqual(status.labels, container.spec.labels, what);
      assert.deepEqual(status.annotations, container.spec.annotations, what);
      assert.equal(status.state, 'CONTAINER_EXITED', `${what}: no process survives a reboot`);
      if (container.state === 'EXITED') {
        // A recorded exit stays what it was.
        assert.equal(status.exit_code, container.exitCode, what);
        assert.equal(status.reason, container.reason, what);
        assert.equal(status.started_at, container.startedAt, what);
        assert.equal(status.finished_at, container.finishedAt, what);
      } else {
        // A process lost without an exit record, as containerd reports a lost task.
        assert.equal(status.exit_code, 255, what);
        assert.notEqual(status.finished_at, '0', what);
      }
    }
    const running = await containerStatus(d.cri, named(expected.containers, 'running').id);
    // The limits UpdateContainerResources stored, not those the container was created with.
    assert.equal(running.resources?.linux?.memory_limit_in_bytes, String(96 * 1024 * 1024));
    assert.equal(running.resources?.linux?.cpu_shares, '512');

    const images = (await d.cri.callImage<{ images: WireImage[] }>('ListImages', {})).images;
    assert.deepEqual(
      images.map((i) => [i.id, i.repo_tags, i.repo_digests, i.size]),
      expected.images.map((i) => [i.id, i.repoTags, i.repoDigests, String(i.size)]),
    );

    for (const sandbox of expected.sandboxes) {
      await d.cri.call('StopPodSandbox', { pod_sandbox_id: sandbox.id });
      await d.cri.call('RemovePodSandbox', { pod_sandbox_id: sandbox.id });
    }
    assert.deepEqual((await d.cri.call<{ items: WirePod[] }>('ListPodSandbox', {})).items, []);
    assert.deepEqual(
      (await d.cri.call<{ containers: WireContainer[] }>('ListContainers', {})).containers,
      [],
    );
  });
});
