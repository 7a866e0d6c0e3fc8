/**
 * How many transactions berthd commits (each an fsync of its WAL, synchronous = FULL) for one
 * RunPodSandbox and one CreateContainer, counted from the database's -wal file. Crash safety needs
 * a commit before each action outside the database that start-up repair must be able to undo
 * (the kill -9 tests in sandbox-recovery and container-recovery check those); these numbers say
 * no more are made. Needs root; sends no traffic.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { databasePath } from '../harness/database.js';
import { SHARED_PID_LINUX, useDaemon, type TestDaemon } from '../harness/daemon.js';
import { useBusyboxImage } from '../harness/images.js';
import { containerConfig, createContainer, runPod, type Pod } from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';
import { commitsBetween, walMark } from '../harness/wal.js';

const SUITE_TIMEOUT_MS = 120_000;

/**
 * Pods are on loopback and on the test network, bridge (host-local) then portmap: three ADDs. A pod
 * commits its journal row, the CNI input before the first ADD, each plugin before its ADD, the ADDs'
 * results, and READY; with an infra, also the infra's pid between runc create and start. (At
 * c81c74c: 10 and 13, every step journaled on its own and every transition a read-and-rewrite.)
 */
const RUN_POD_COMMITS = { withoutInfra: 7, withInfra: 8 };
/**
 * The row with its first step, the journal of each later step (spec, monitor) before it acts, the
 * resolved user, and the processes with CREATED in one. (At c81c74c: 7.)
 */
const CREATE_CONTAINER_COMMITS = 5;

describe('commits per rpc', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const image = useBusyboxImage('berth/commits');
  const daemon = useDaemon({ cni: 'bridge+portmap' }, async (d) => {
    await d.cri.callImage('PullImage', { image: { image: image() } });
  });

  async function counted<T>(d: TestDaemon, rpc: () => Promise<T>): Promise<[T, number]> {
    const path = databasePath(d.rootDir);
    const before = walMark(path);
    const value = await rpc();
    return [value, commitsBetween(before, walMark(path))];
  }

  test('RunPodSandbox without infra', async () => {
    const d = daemon();
    const [, commits] = await counted(d, () => runPod(d.cri, d.pod('commits-plain')));
    assert.equal(commits, RUN_POD_COMMITS.withoutInfra);
  });

  test('RunPodSandbox with infra', async () => {
    const d = daemon();
    const [, commits] = await counted(d, () =>
      runPod(d.cri, d.pod('commits-infra', { linux: SHARED_PID_LINUX })),
    );
    assert.equal(commits, RUN_POD_COMMITS.withInfra);
  });

  test('CreateContainer', async () => {
    const d = daemon();
    const pod: Pod = await runPod(d.cri, d.pod('commits-container'));
    const [, commits] = await counted(d, () =>
      createContainer(d.cri, pod, containerConfig('counted', image())),
    );
    assert.equal(commits, CREATE_CONTAINER_COMMITS);
  });
});
