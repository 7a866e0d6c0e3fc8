import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { migrate } from '../../state/migrate.js';
import { migrations } from '../../state/migrations.js';
import { Store } from '../../src/store/index.js';
import type { NamespaceOptions } from '../../src/model/sandbox.js';
import { namespacePins, needsInfra, pinPaths, podNamespacePaths } from '../../src/sandbox/namespaces.js';
import { sandboxSpec } from '../harness/container-spec.js';
import { sandbox } from '../harness/records.js';

function withNamespaces(over: Partial<NamespaceOptions>) {
  const spec = sandboxSpec();
  return { ...spec, namespaces: { ...spec.namespaces, ...over } };
}

describe('pod namespaces', () => {
  it('runs an infra only for a shared pid namespace in auto mode, always in always mode', () => {
    assert.equal(needsInfra('auto', withNamespaces({ pid: 'POD' })), true);
    assert.equal(needsInfra('auto', withNamespaces({ pid: 'CONTAINER' })), false);
    assert.equal(needsInfra('auto', withNamespaces({ pid: 'NODE' })), false);
    assert.equal(needsInfra('always', withNamespaces({ pid: 'CONTAINER' })), true);
  });

  it('joins an infra through its /proc entries', () => {
    const pod = sandbox({ infra: true, pid: 4242 });
    assert.deepEqual(podNamespacePaths(pod), {
      network: '/var/run/netns/berth-pod1',
      ipc: '/proc/4242/ns/ipc',
      uts: '/proc/4242/ns/uts',
      pid: '/proc/4242/ns/pid',
      user: null,
    });
    assert.deepEqual(pinPaths(pod), [], 'a pod with an infra pins nothing but its netns');
  });

  it('joins the pins of a pod without infra, in its sandbox dir; no pod pid namespace', () => {
    const pod = sandbox({ infra: false, spec: withNamespaces({ pid: 'CONTAINER', ipc: 'POD' }) });
    assert.deepEqual(podNamespacePaths(pod), {
      network: '/var/run/netns/berth-pod1',
      ipc: '/var/lib/berth/sandboxes/pod1/ns/ipc',
      uts: '/var/lib/berth/sandboxes/pod1/ns/uts',
      pid: null,
      user: null,
    });
  });

  it("pins no ipc for a host-ipc pod, and no uts for a host-network pod: those are the host's", () => {
    const hostIpc = sandbox({ infra: false, spec: withNamespaces({ pid: 'CONTAINER', ipc: 'NODE' }) });
    assert.deepEqual(namespacePins(hostIpc), {
      user: null,
      ipc: null,
      uts: '/var/lib/berth/sandboxes/pod1/ns/uts',
    });
    const hostAll = sandbox({
      infra: false,
      hostNetwork: true,
      netnsPath: null,
      spec: withNamespaces({ network: 'NODE', pid: 'CONTAINER', ipc: 'NODE' }),
    });
    assert.deepEqual(pinPaths(hostAll), []);
    assert.deepEqual(podNamespacePaths(hostAll), {
      network: null,
      ipc: null,
      uts: null,
      pid: null,
      user: null,
    });
  });

  it('pins the user namespace of a pod that has its own beside its others, and tears it down with them', () => {
    const userNamespace = { uids: [{ containerId: 0, hostId: 65536, length: 65536 }], gids: [] };
    const pod = sandbox({ infra: false, spec: { ...withNamespaces({ pid: 'CONTAINER' }), userNamespace } });
    const dir = '/var/lib/berth/sandboxes/pod1/ns';
    assert.deepEqual(namespacePins(pod), { user: `${dir}/user`, ipc: `${dir}/ipc`, uts: `${dir}/uts` });
    assert.deepEqual(pinPaths(pod), [`${dir}/ipc`, `${dir}/uts`, `${dir}/user`]);
    // Containers join it by its pin, with its mappings (runc 1.1 wants them).
    assert.deepEqual(podNamespacePaths(pod), {
      network: '/var/run/netns/berth-pod1',
      ipc: `${dir}/ipc`,
      uts: `${dir}/uts`,
      pid: null,
      user: { path: `${dir}/user`, ...userNamespace },
    });
    // With an infra too, which joined the same pin.
    const withInfra = sandbox({
      infra: true,
      pid: 4242,
      spec: { ...withNamespaces({ pid: 'POD' }), userNamespace },
    });
    assert.deepEqual(pinPaths(withInfra), [`${dir}/user`]);
    assert.deepEqual(podNamespacePaths(withInfra).user, { path: `${dir}/user`, ...userNamespace });
  });
});

describe('the infra flag in the store', () => {
  it('round-trips, and pods recorded before it existed ran an infra', () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-infra-flag-'));
    try {
      const path = join(dir, 'berth.db');
      const old = new Database(path);
      try {
        migrate(old, migrations.slice(0, 3));
        old
          .prepare(
            `INSERT INTO sandboxes (id, name, namespace, uid, attempt, state, step, config_json, runtime_handler,
               host_network, netns_path, network_state, ip, created_at, pid, cgroup_parent, sandbox_dir)
             VALUES ('old', 'n', 'ns', 'u', 0, 'READY', 'ready', @spec, '', 0, NULL, 'NONE', '', '1', 7, '', '/d')`,
          )
          .run({ spec: JSON.stringify(sandbox().spec) });
      } finally {
        old.close();
      }
      const store = Store.open(path);
      try {
        assert.equal(store.sandboxes.get('old')?.infra, true);
        store.sandboxes.insert(sandbox({ id: 'new', name: 'other', infra: false }));
        assert.equal(store.sandboxes.get('new')?.infra, false);
      } finally {
        store.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
