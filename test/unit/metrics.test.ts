import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BerthMetrics, repairCounts } from '../../src/metrics/berth-metrics.js';
import { RegistryNotFoundError } from '../../src/registry/errors.js';
import { parseExposition, valueOf } from '../harness/prometheus.js';

describe('BerthMetrics', () => {
  it('counts records by state at scrape time, every known state included', async () => {
    const sandboxes = [{ state: 'READY' }, { state: 'READY' }, { state: 'CREATING' }];
    const metrics = new BerthMetrics({
      sandboxes: () => sandboxes,
      // Not a live pid: no monitor runs.
      containers: () => [{ state: 'EXITED', monitorPid: 0 }],
    });
    let samples = parseExposition(await metrics.metrics());
    assert.equal(valueOf(samples, 'berth_pods', { state: 'READY' }), 2);
    assert.equal(valueOf(samples, 'berth_pods', { state: 'NOTREADY' }), 0);
    assert.equal(valueOf(samples, 'berth_containers', { state: 'EXITED' }), 1);
    assert.equal(valueOf(samples, 'berth_containers', { state: 'RUNNING' }), 0);
    assert.equal(valueOf(samples, 'berth_monitors_running'), 0);
    sandboxes.pop();
    samples = parseExposition(await metrics.metrics());
    assert.equal(valueOf(samples, 'berth_pods', { state: 'CREATING' }), 0);
  });

  it('labels calls, steps, plugins and pulls as reported', async () => {
    const metrics = new BerthMetrics({ sandboxes: () => [], containers: () => [] });
    metrics.rpcDone({ service: 'RuntimeService', method: 'Version', code: 'OK', seconds: 0.001 });
    metrics.stepDone({ operation: 'RunPodSandbox', step: 'cni-add', seconds: 0.2, ok: false });
    metrics.cniPluginDone({ plugin: 'bridge', command: 'DEL', seconds: 0.01, ok: true });
    metrics.pullDone({ ok: true, bytes: 1000, seconds: 2 });
    metrics.pullDone({
      ok: false,
      error: new RegistryNotFoundError('manifest', 'example/app:1', 'http://127.0.0.1:1'),
      seconds: 1,
    });
    metrics.pullDone({ ok: false, error: 'not an error', seconds: 1 });
    const samples = parseExposition(await metrics.metrics());
    const version = { service: 'RuntimeService', method: 'Version', code: 'OK' };
    assert.equal(valueOf(samples, 'berth_grpc_requests_total', version), 1);
    assert.equal(valueOf(samples, 'berth_grpc_request_duration_seconds_sum', version), 0.001);
    const step = { operation: 'RunPodSandbox', step: 'cni-add' };
    assert.equal(
      valueOf(samples, 'berth_operation_step_duration_seconds_bucket', { ...step, le: '0.25' }),
      1,
    );
    assert.equal(valueOf(samples, 'berth_operation_step_duration_seconds_bucket', { ...step, le: '0.1' }), 0);
    assert.equal(
      valueOf(samples, 'berth_cni_plugin_duration_seconds_count', { plugin: 'bridge', command: 'DEL' }),
      1,
    );
    assert.equal(valueOf(samples, 'berth_image_pull_bytes_total'), 1000);
    assert.equal(valueOf(samples, 'berth_image_pull_duration_seconds_count'), 1);
    assert.equal(valueOf(samples, 'berth_image_pull_failures_total', { reason: 'RegistryNotFoundError' }), 1);
    assert.equal(valueOf(samples, 'berth_image_pull_failures_total', { reason: 'unknown' }), 1);
  });

  it("counts every list of the recovery report, the containers' own prefixed", async () => {
    const report = {
      rebooted: false,
      rolledBack: ['a'],
      markedNotReady: [],
      orphanNetns: ['n1', 'n2'],
      containers: { exitedWhileDown: ['c'], lost: [] },
    };
    assert.deepEqual(repairCounts(report, 'pod'), [
      ['pod_rolled_back', 1],
      ['pod_marked_not_ready', 0],
      ['pod_orphan_netns', 2],
      ['container_exited_while_down', 1],
      ['container_lost', 0],
    ]);
    const metrics = new BerthMetrics({ sandboxes: () => [], containers: () => [] });
    metrics.recovered(report, 0.25);
    const samples = parseExposition(await metrics.metrics());
    assert.equal(valueOf(samples, 'berth_recovery_repairs_total', { kind: 'pod_orphan_netns' }), 2);
    assert.equal(valueOf(samples, 'berth_recovery_repairs_total', { kind: 'container_lost' }), 0);
    assert.equal(valueOf(samples, 'berth_recovery_duration_seconds'), 0.25);
  });
});
