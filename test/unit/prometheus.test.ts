import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseExposition, samplesOf, valueOf } from '../harness/prometheus.js';

const TEXT = `# HELP berth_grpc_requests_total CRI calls
# TYPE berth_grpc_requests_total counter
berth_grpc_requests_total{service="RuntimeService",method="Version",code="OK"} 3
berth_grpc_requests_total{service="RuntimeService",method="ContainerStatus",code="NOT_FOUND"} 1

# TYPE berth_step histogram
berth_step_bucket{operation="RunPodSandbox",step="cni-add",le="0.5"} 1
berth_step_bucket{operation="RunPodSandbox",step="cni-add",le="+Inf"} 1
berth_step_count{operation="RunPodSandbox",step="cni-add"} 1
berth_step_sum{operation="RunPodSandbox",step="cni-add"} 0.0421
odd{path="a \\"quoted\\" \\\\ back\\nslash", empty=""} -1.5e-3 1700000000000
process_resident_memory_bytes 52334592
nan_metric NaN
prom_client_nan Nan
`;

describe('the exposition parser of the tests', () => {
  const samples = parseExposition(TEXT);

  it('reads names, labels and values, skipping comments and blank lines', () => {
    assert.equal(samples.length, 10);
    assert.deepEqual(samples[0], {
      name: 'berth_grpc_requests_total',
      labels: { service: 'RuntimeService', method: 'Version', code: 'OK' },
      value: 3,
    });
    assert.equal(valueOf(samples, 'process_resident_memory_bytes'), 52334592);
    assert.ok(Number.isNaN(valueOf(samples, 'nan_metric')));
    assert.ok(Number.isNaN(valueOf(samples, 'prom_client_nan')));
  });

  it('unescapes label values and accepts a timestamp and exponents', () => {
    const [odd] = samplesOf(samples, 'odd');
    assert.deepEqual(odd?.labels, { path: 'a "quoted" \\ back\nslash', empty: '' });
    assert.equal(odd?.value, -0.0015);
  });

  it('reads +Inf bucket bounds as labels and matches label subsets', () => {
    const buckets = samplesOf(samples, 'berth_step_bucket', { step: 'cni-add' });
    assert.deepEqual(
      buckets.map((b) => b.labels.le),
      ['0.5', '+Inf'],
    );
    assert.equal(valueOf(samples, 'berth_step_count', { operation: 'RunPodSandbox', step: 'cni-add' }), 1);
    // Exact label sets only: a subset names no single sample.
    assert.equal(valueOf(samples, 'berth_step_count', { step: 'cni-add' }), undefined);
    assert.equal(
      valueOf(samples, 'berth_grpc_requests_total', { code: 'OK', method: 'Nope', service: 'x' }),
      undefined,
    );
  });

  it('refuses a line that is not a sample', () => {
    assert.throws(() => parseExposition('berth_x{a="1" 2\n'), /line 1 is not a sample/);
    assert.throws(() => parseExposition('berth_x twelve\n'), /line 1/);
  });
});
