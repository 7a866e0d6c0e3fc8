/**
 * A pod of its own user namespace (kubelet's hostUsers: false), as far as berth makes one: the
 * namespace pinned with kubelet's mappings, the pod's network, IPC and UTS namespaces owned by it,
 * validation as kubelet and critest expect it, teardown, restart and kill -9 at each step (its
 * containers: userns-containers.test.ts). Real berthd, CNI, nsenter; needs root and a host whose
 * probes let berth run such pods.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { rm } from 'node:fs/promises';
import { describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import { isPinned } from '../../src/netns/index.js';
import { SHM_DIR } from '../../src/sandbox/files.js';
import { NETNS_PREFIX } from '../../src/sandbox/namespaces.js';
import { PAUSE_BEFORE_STEP_ENV, TestDaemon, podConfig, useDaemon } from '../harness/daemon.js';
import { startAndLog } from '../harness/log.js';
import { nsInode } from '../harness/namespaces.js';
import { waitFor } from '../harness/wait.js';
import { rejectsWith } from '../harness/grpc.js';
import { mountPointsBelow } from '../harness/mounts.js';
import { containerConfig, podStatus, runPodSandbox, stopAndRemovePod } from '../harness/pods.js';
import { rootSkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 300_000;
const TIMEOUT_MS = 10_000;
const NS_OPTIONS = { network: 'POD', pid: 'CONTAINER', ipc: 'POD' };
/** As kubelet hands them out: 65536 ids per pod, at a multiple of 65536. */
const mapping = (slot: number): { container_id: number; host_id: number; length: number }[] => [
  { container_id: 0, host_id: 65536 * slot, length: 65536 },
];

function usernsPod(name: string, userns: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return podConfig(name, {
    linux: { security_context: { namespace_options: { ...NS_OPTIONS, userns_options: userns } }, ...extra },
  });
}

const hex = (): string => randomBytes(4).toString('hex');

function pinDir(daemon: TestDaemon, id: string): string {
  return join(daemon.rootDir, 'sandboxes', id, 'ns');
}

function netnsOf(daemon: TestDaemon, id: string): string {
  return join(daemon.netnsDir, `${NETNS_PREFIX}${id}`);
}

/** Runs `args` in the pinned namespaces given, user namespace first, as nsenter enters them. */
function nsenter(pins: Record<string, string>, args: string[]): Promise<{ stdout: string }> {
  const flags = Object.entries(pins).map(([type, path]) => `--${type}=${path}`);
  return run('nsenter', [...flags, '--', ...args], { timeoutMs: TIMEOUT_MS });
}

async function assertNothingLeft(daemon: TestDaemon): Promise<void> {
  const pods = await daemon.cri.call<{ items: unknown[] }>('ListPodSandbox', {});
  assert.deepEqual(pods.items, [], 'ListPodSandbox');
  assert.deepEqual(await daemon.netnsFiles(), [], 'files in the netns dir');
  assert.deepEqual(await mountPointsBelow(daemon.netnsDir), [], 'mounts in the netns dir');
  assert.deepEqual(await daemon.sandboxDirs(), [], 'sandbox dirs');
  assert.deepEqual(await mountPointsBelow(daemon.rootDir), [], 'mounts (pins, shm) in the root dir');
}

describe('pods of their own user namespace', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const daemon = useDaemon();

  test("RunPodSandbox pins the pod's user namespace with kubelet's mappings, owning its other namespaces", async () => {
    const d = daemon();
    const name = `userns-${hex()}`;
    const config = usernsPod(
      name,
      { mode: 'POD', uids: mapping(5), gids: mapping(6) },
      { sysctls: { 'net.ipv4.ip_unprivileged_port_start': '80' } },
    );
    const id = await runPodSandbox(d.cri, config);
    const pod = await podStatus<unknown>(d.cri, id);
    assert.equal((pod.status as { state: string }).state, 'SANDBOX_READY');
    const dir = pinDir(d, id);
    const user = join(dir, 'user');
    assert.equal(await isPinned(user), true);

    const maps = await nsenter({ user }, ['cat', '/proc/self/uid_map', '/proc/self/gid_map']);
    const lines = maps.stdout
      .trim()
      .split('\n')
      .map((l) => l.trim().split(/\s+/).map(Number));
    assert.deepEqual(lines, [
      [0, 65536 * 5, 65536],
      [0, 65536 * 6, 65536],
    ]);

    // nsenter enters the user namespace last, so the command runs as the pod's root, whose
    // capabilities count only in namespaces its user namespace owns.
    const net = netnsOf(d, id);
    const owned = { user, net, ipc: join(dir, 'ipc'), uts: join(dir, 'uts') };
    assert.equal((await nsenter(owned, ['hostname'])).stdout.trim(), name);
    const sysctl = await nsenter(owned, ['sysctl', '-n', 'net.ipv4.ip_unprivileged_port_start']);
    assert.equal(sysctl.stdout.trim(), '80', "the pod's sysctl, set in its netns");
    await nsenter(owned, ['sysctl', '-q', '-w', 'net.ipv4.ip_unprivileged_port_start=81']);
    await nsenter(owned, ['sysctl', '-q', '-w', 'kernel.shmmni=2048']);
    await nsenter(owned, ['hostname', 'renamed-by-pod-root']);
    assert.equal((await nsenter({ uts: owned.uts }, ['hostname'])).stdout.trim(), 'renamed-by-pod-root');

    // The same as the root of another pod's user namespace: none of these are its own.
    const other = await runPodSandbox(
      d.cri,
      usernsPod(`other-${hex()}`, { mode: 'POD', uids: mapping(7), gids: mapping(7) }),
    );
    const stranger = { ...owned, user: join(pinDir(d, other), 'user') };
    await assert.rejects(
      nsenter(stranger, ['sysctl', '-q', '-w', 'net.ipv4.ip_unprivileged_port_start=82']),
      /permission denied/i,
    );
    await assert.rejects(nsenter(stranger, ['hostname', 'renamed-by-stranger']), /must be root/);
    await stopAndRemovePod(d.cri, other);

    // A container of this pod that asks for the host's user namespace is refused, not run in it
    // (before its image is even looked up).
    const hostUsers = { ...NS_OPTIONS, userns_options: { mode: 'NODE', uids: [], gids: [] } };
    await rejectsWith(
      d.cri.call('CreateContainer', {
        pod_sandbox_id: id,
        config: containerConfig('c', 'berth.test/no-such-image:1', {
          command: ['/bin/true'],
          linux: { security_context: { namespace_options: hostUsers } },
        }),
        sandbox_config: config,
      }),
      status.INVALID_ARGUMENT,
      /userns_options\.mode: NODE asks for the host's user namespace/,
    );

    await stopAndRemovePod(d.cri, id);
    assert.equal(await isPinned(user), false);
    await assertNothingLeft(d);
  });

  test('RunPodSandbox refuses what kubelet and critest expect refused, naming the field, and keeps nothing', async () => {
    const d = daemon();
    const one = mapping(5);
    const cases: [string, Record<string, unknown>, RegExp][] = [
      [
        'two mappings',
        { mode: 'POD', uids: [...one, ...mapping(6)], gids: one },
        /userns_options\.uids: exactly one/,
      ],
      [
        'container id 0 unmapped',
        { mode: 'POD', uids: [{ container_id: 1, host_id: 65536, length: 65536 }], gids: one },
        /uids\[0\]\.container_id/,
      ],
      ['mode CONTAINER', { mode: 'CONTAINER', uids: [], gids: [] }, /userns_options\.mode/],
      ['mode TARGET', { mode: 'TARGET', uids: [], gids: [] }, /userns_options\.mode/],
      [
        'an empty range',
        { mode: 'POD', uids: one, gids: [{ container_id: 0, host_id: 65536, length: 0 }] },
        /gids\[0\]\.length/,
      ],
      [
        'a range past the largest id',
        { mode: 'POD', uids: [{ container_id: 0, host_id: 0xffff0000, length: 65536 }], gids: one },
        /uids\[0\]\.host_id/,
      ],
      [
        "the host's root",
        { mode: 'POD', uids: [{ container_id: 0, host_id: 0, length: 65536 }], gids: one },
        /uids\[0\]\.host_id/,
      ],
      ['NODE with mappings', { mode: 'NODE', uids: one, gids: one }, /userns_options\.uids/],
      [
        "the host's own users",
        { mode: 'POD', uids: [{ container_id: 0, host_id: 1, length: 65536 }], gids: one },
        /userns_options\.uids\[0\]\.host_id: 1 is below 65536: host ids below it are the host's own users/,
      ],
      [
        "the host's own groups",
        { mode: 'POD', uids: one, gids: [{ container_id: 0, host_id: 65535, length: 65536 }] },
        /userns_options\.gids\[0\]\.host_id: 65535 is below 65536/,
      ],
    ];
    for (const [what, userns, field] of cases) {
      await rejectsWith(
        d.cri.call('RunPodSandbox', { config: usernsPod(`bad-${hex()}`, userns) }),
        status.INVALID_ARGUMENT,
        field,
      ).catch((err: unknown) => assert.fail(`${what}: ${String(err)}`));
    }
    const hostNetwork = podConfig(`hostnet-${hex()}`, {
      linux: {
        security_context: {
          namespace_options: {
            ...NS_OPTIONS,
            network: 'NODE',
            userns_options: { mode: 'POD', uids: one, gids: one },
          },
        },
      },
    });
    await rejectsWith(
      d.cri.call('RunPodSandbox', { config: hostNetwork }),
      status.INVALID_ARGUMENT,
      /namespace_options\.network/,
    );
    await assertNothingLeft(d);
  });

  test("a pod whose host ids are another live pod's is refused, naming that pod, until it is removed", async () => {
    const d = daemon();
    const a = await runPodSandbox(
      d.cri,
      usernsPod(`own-a-${hex()}`, { mode: 'POD', uids: mapping(10), gids: mapping(11) }),
    );
    // The same range, a range overlapping it by one id, and a pod whose gids are a's: each would
    // make its root and a's one user or group to the host.
    const cases: [string, Record<string, unknown>, RegExp][] = [
      [
        'the same uids',
        { mode: 'POD', uids: mapping(10), gids: mapping(12) },
        /userns_options\.uids: host ids 655360\.\.720895/,
      ],
      [
        'overlapping uids',
        {
          mode: 'POD',
          uids: [{ container_id: 0, host_id: 65536 * 9 + 1, length: 65536 }],
          gids: mapping(12),
        },
        /userns_options\.uids: host ids 655360\.\.655360 /,
      ],
      [
        'the same gids',
        { mode: 'POD', uids: mapping(12), gids: mapping(11) },
        /userns_options\.gids: host ids/,
      ],
    ];
    for (const [what, userns, detail] of cases) {
      const err = await rejectsWith(
        d.cri.call('RunPodSandbox', { config: usernsPod(`own-b-${hex()}`, userns) }),
        status.FAILED_PRECONDITION,
        detail,
      ).catch((e: unknown) => assert.fail(`${what}: ${String(e)}`));
      assert.match(err.details, new RegExp(`pod sandbox ${a} \\(berth-test/own-a-`), what);
    }
    // A stopped pod keeps its range: its files are still owned by those ids.
    await d.cri.call('StopPodSandbox', { pod_sandbox_id: a });
    await rejectsWith(
      d.cri.call('RunPodSandbox', {
        config: usernsPod(`own-c-${hex()}`, { mode: 'POD', uids: mapping(10), gids: mapping(12) }),
      }),
      status.FAILED_PRECONDITION,
      new RegExp(`pod sandbox ${a} `),
    );
    // Disjoint ranges run side by side, and a's range is free again once a is removed.
    const b = await runPodSandbox(
      d.cri,
      usernsPod(`own-d-${hex()}`, { mode: 'POD', uids: mapping(12), gids: mapping(12) }),
    );
    await stopAndRemovePod(d.cri, a);
    const c = await runPodSandbox(
      d.cri,
      usernsPod(`own-e-${hex()}`, { mode: 'POD', uids: mapping(10), gids: mapping(11) }),
    );
    await stopAndRemovePod(d.cri, b);
    await stopAndRemovePod(d.cri, c);
    await assertNothingLeft(d);
  });

  test('a restart keeps the pod READY with its pins', async () => {
    const d = daemon();
    const id = await runPodSandbox(
      d.cri,
      usernsPod(`keep-${hex()}`, { mode: 'POD', uids: mapping(8), gids: mapping(8) }),
    );
    const user = join(pinDir(d, id), 'user');
    const before = await nsInode(user);
    await d.kill9();
    await startAndLog(d);
    assert.equal((await podStatus<{ state: string }>(d.cri, id)).status.state, 'SANDBOX_READY');
    assert.equal(await nsInode(user), before, 'the same user namespace');
    await stopAndRemovePod(d.cri, id);
    await assertNothingLeft(d);
  });

  for (const step of ['userns', 'namespaces', 'cni-add']) {
    test(`kill -9 before '${step}': start-up rolls the pod back, pins and all`, async () => {
      const d = daemon();
      const config = usernsPod(`crash-${step}-${hex()}`, { mode: 'POD', uids: mapping(9), gids: mapping(9) });
      await d.restart({ [PAUSE_BEFORE_STEP_ENV]: step });
      const pending = d.cri.call('RunPodSandbox', { config }).catch((err: unknown) => err);
      const pauseFile = await d.pausedBefore(step);
      // The sandbox dir is made beside the user namespace; its shm mount is the last of it.
      await waitFor(
        async () => (await mountPointsBelow(d.rootDir)).some((p) => p.endsWith(`/${SHM_DIR}`)),
        10_000,
      );
      const [dir] = await d.sandboxDirs();
      assert.ok(dir, 'no sandbox dir');
      if (step !== 'userns')
        assert.equal(await isPinned(join(d.rootDir, 'sandboxes', dir, 'ns', 'user')), true);
      await d.kill9();
      assert.ok((await pending) instanceof Error, 'the paused RunPodSandbox succeeded');
      await rm(pauseFile);
      await startAndLog(d);
      await assertNothingLeft(d);
      const id = await runPodSandbox(d.cri, config);
      await stopAndRemovePod(d.cri, id);
      await assertNothingLeft(d);
    });
  }
});
