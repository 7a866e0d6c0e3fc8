/**
 * A berthd whose root dir is under a dir other users cannot pass (0700, as `mktemp -d` makes it):
 * a user namespace's root could not reach its pods' files, so user namespaces are off, and the
 * log, verbose Status and the refusal of such a pod all say which dir is in the way. berthd leaves
 * the operator's dir as it is. Real berthd; needs root.
 */
import assert from 'node:assert/strict';
import { stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import type { HostFeatures } from '../../src/host/features.js';
import { podConfig, useDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { usernsNamespaceOptions } from '../harness/pods.js';
import { rootSkip as skip } from '../harness/skip.js';
import { BOUND_SCALE } from '../harness/bounds.js';

interface Shown {
  host: HostFeatures;
  runtimeHandlers: Record<string, { userNamespaces: boolean; off: { userNamespaces?: string } }>;
}

describe('a root dir under a dir of mode 0700', { skip, timeout: 120_000 * BOUND_SCALE }, () => {
  const daemon = useDaemon({ rootParentMode: 0o700 });

  test('user namespaces are off, and the log, verbose Status and the refusal name the dir', async (t) => {
    const d = daemon();
    const parent = dirname(d.rootDir);
    const res = await d.cri.call<{
      info: Record<string, string>;
      runtime_handlers: { name: string; features: { user_namespaces: boolean } }[];
    }>('Status', { verbose: true });
    const shown = JSON.parse(res.info.probedFeatures ?? '{}') as Shown;
    const { overlayLower, tmpfs } = shown.host.idmappedMounts;
    if (!overlayLower || !tmpfs) {
      t.skip('this host cannot idmap: user namespaces are off for that reason');
      return;
    }
    const why = `${parent} is 0700: a user namespace's root cannot pass it`;
    assert.equal(shown.runtimeHandlers.runc?.userNamespaces, false);
    assert.ok(shown.runtimeHandlers.runc?.off.userNamespaces?.startsWith(why), JSON.stringify(shown));
    assert.deepEqual(
      res.runtime_handlers.map((h) => h.features.user_namespaces),
      [false, false],
    );
    assert.equal(d.output.split(why).length - 1, 1, `logged once:\n${d.output}`);
    // A warning of its own that names the feature, not a line lost among the debug ones.
    const line = d.output.split('\n').find((l) => l.includes(why)) ?? '';
    const logged = JSON.parse(line) as { level: number; feature: string; msg: string };
    assert.equal(logged.level, 40, line);
    assert.equal(logged.feature, 'userNamespaces', line);
    assert.equal(logged.msg, 'runtime handler feature off', line);
    const config = podConfig('userns-blocked', {
      linux: { security_context: { namespace_options: usernsNamespaceOptions(65536 * 40) } },
    });
    await rejectsWith(
      d.cri.call('RunPodSandbox', { config }),
      status.INVALID_ARGUMENT,
      new RegExp(`cannot run pods in one .*${why.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}`),
    );
    // The operator's dir: berth says, it does not chmod it.
    assert.equal((await stat(parent)).mode & 0o7777, 0o700);
  });
});
