/**
 * How often StopPodSandbox and RemovePodSandbox read the pod's row: once to find it, once more
 * under its lock (a Stop or Remove waited for may have changed it), and Remove once for its
 * teardown, after the Stop it ran. Each teardown action used to read the row again for itself.
 * A real store and service; the pod (host network, no infra, no pins) leaves nothing on the host
 * to run or unmount, so no runc, CNI plugin or mount is involved.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { Cni } from '../../src/cni/index.js';
import { defaultConfig } from '../../src/config/settings.js';
import type { LifecycleEvents, LifecycleFact } from '../../src/events/lifecycle.js';
import { cgroupManager } from '../../src/cgroups/index.js';
import { MonitorCgroup } from '../../src/cgroups/monitor.js';
import { probeCgroupHost } from '../../src/cgroups/probe.js';
import { openRuntimeHandlers } from '../../src/runtime/index.js';
import { PodGate } from '../../src/sandbox/gate.js';
import { SandboxService } from '../../src/sandbox/service.js';
import { SandboxTeardown } from '../../src/sandbox/teardown.js';
import { Store } from '../../src/store/index.js';
import { sandboxSpec } from '../harness/container-spec.js';
import { sandbox } from '../harness/records.js';

describe('sandbox row reads of StopPodSandbox and RemovePodSandbox', () => {
  let dir: string;
  let store: Store;
  let service: SandboxService;
  const facts: string[] = [];
  let reads = 0;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'berth-row-reads-'));
    const config = { ...defaultConfig(), rootDir: join(dir, 'root'), stateDir: join(dir, 'state') };
    store = Store.open(join(dir, 'berth.db'));
    // Counts every read of a row by id or prefix; transitions read inside the store and are not counted.
    const repo = store.sandboxes;
    const get = repo.get.bind(repo);
    const byPrefix = repo.findByIdPrefix.bind(repo);
    repo.get = (id) => (reads++, get(id));
    repo.findByIdPrefix = (prefix) => (reads++, byPrefix(prefix));
    // Never run: the pod has no infra and no container.
    const timeoutMs = 1000;
    const logger = pino({ level: 'silent' });
    const runtimes = await openRuntimeHandlers(
      { name: 'runc', binary: 'runc', root: join(dir, 'runc') },
      [],
      {
        binary: 'conmon',
        systemdCgroup: false,
        kernelHasMountSetattr: false,
        usernsProbe: { skipped: 'no user namespaces in this test' },
        criuUsable: false,
        exitDir: join(dir, 'exits'),
        socketDir: join(dir, 'sockets'),
        persistDir: join(dir, 'persist'),
        timeoutMs,
        cgroup: new MonitorCgroup('inherit', 'cgroupfs'),
        execDir: join(dir, 'exec'),
      },
    );
    const cni = new Cni({ binDirs: [], timeoutMs });
    const events: LifecycleEvents = {
      publish: (fact: LifecycleFact) => facts.push(`${fact.change} ${fact.sandboxId}`),
      capture: (fact: LifecycleFact) => () => facts.push(`${fact.change} ${fact.sandboxId}`),
    };
    const cgroups = cgroupManager('cgroupfs', await probeCgroupHost());
    service = new SandboxService({
      config,
      store,
      cgroups,
      cni,
      runtimes,
      logger,
      host: { process: { capabilities: [], oomScoreAdj: null } },
      teardown: new SandboxTeardown({
        sandboxes: store.sandboxes,
        cni,
        runtimes,
        cgroups,
        timeoutMs,
        logger,
      }),
      infraRootfs: '',
      pods: new PodGate(),
      events,
    });
  });

  after(() => {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  function readyPod(id: string): void {
    const spec = sandboxSpec();
    store.sandboxes.insert(
      sandbox({
        id,
        ...spec.metadata,
        state: 'READY',
        step: 'ready',
        spec: { ...spec, namespaces: { ...spec.namespaces, network: 'NODE', ipc: 'NODE' } },
        hostNetwork: true,
        netnsPath: null,
        infra: false,
        sandboxDir: join(dir, 'root', 'sandboxes', id),
      }),
    );
  }

  it('Remove of a READY pod reads its row 3 times: to find it, under its lock, for the teardown', async () => {
    readyPod('pod-remove');
    reads = 0;
    await service.remove('pod-remove');
    assert.equal(reads, 3);
    assert.equal(store.sandboxes.get('pod-remove'), undefined);
    assert.deepEqual(facts.splice(0), ['STOPPED pod-remove', 'DELETED pod-remove']);
  });

  it('Stop reads it twice, and a Remove after the Stop 3 times', async () => {
    readyPod('pod-stop');
    reads = 0;
    await service.stop('pod-stop');
    assert.equal(reads, 2);
    assert.equal(store.sandboxes.get('pod-stop')?.state, 'NOTREADY');
    reads = 0;
    await service.remove('pod-stop');
    assert.equal(reads, 3);
    assert.equal(store.sandboxes.get('pod-stop'), undefined);
    assert.deepEqual(facts.splice(0), ['STOPPED pod-stop', 'DELETED pod-stop']);
  });
});
