/**
 * Hostile input against the rpcs that run something in a container or hand out a streaming URL
 * for it (the fuzz: test/harness/hostile-fuzz.ts). Needs root; traffic stays on loopback and in
 * the test pods' own namespaces.
 *
 * BERTH_HOSTILE_SEED=<n> runs other random values; BERTH_HOSTILE_VERBOSE=1 prints codes per field.
 */
import { describe, it, type TestContext } from 'node:test';
import { status } from '@grpc/grpc-js';
import { HOSTILE_FILE_BOUND_MS } from '../harness/bounds.js';
import { CriFuzz } from '../harness/hostile-fuzz.js';
import type { RpcSpec } from '../harness/hostile-specs.js';
import { HostileCri } from '../harness/hostile-cri.js';
import { registrySkip as skip } from '../harness/skip.js';

describe('hostile input on exec, attach, port-forward', { skip, timeout: HOSTILE_FILE_BOUND_MS }, () => {
  const cri = HostileCri.forSuite();
  const fuzz = new CriFuzz(cri);
  const { targets } = cri;

  const specs: RpcSpec[] = [
    {
      rpc: 'ExecSync',
      base: () => ({ container_id: targets.ctrId, cmd: ['/bin/echo', 'hostile'], timeout: '5' }),
      extraCodes: [status.DEADLINE_EXCEEDED],
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'cmd[0]', kind: 'string' },
        { path: 'cmd[1]', kind: 'string' },
        { path: 'cmd', kind: 'list', item: 'a' },
        { path: 'timeout', kind: 'int64' },
      ],
    },
    {
      rpc: 'Exec',
      base: () => ({
        container_id: targets.ctrId,
        cmd: ['/bin/sh'],
        tty: false,
        stdin: true,
        stdout: true,
        stderr: true,
      }),
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'cmd[0]', kind: 'string' },
        { path: 'cmd', kind: 'list', item: 'a' },
        { path: 'tty', kind: 'bool' },
        { path: 'stdin', kind: 'bool' },
        { path: 'stdout', kind: 'bool' },
      ],
    },
    {
      rpc: 'Attach',
      base: () => ({ container_id: targets.ctrId, stdin: false, tty: false, stdout: true, stderr: true }),
      fields: [
        { path: 'container_id', kind: 'ctrId' },
        { path: 'tty', kind: 'bool' },
        { path: 'stdout', kind: 'bool' },
      ],
    },
    {
      rpc: 'PortForward',
      base: () => ({ pod_sandbox_id: targets.podId, port: [80] }),
      fields: [
        { path: 'pod_sandbox_id', kind: 'podId' },
        { path: 'port[0]', kind: 'int32' },
        { path: 'port', kind: 'list', item: 80 },
      ],
    },
  ];

  it('answers every hostile request to every rpc of its group, with a typed status and a bounded message', async (t: TestContext) => {
    await fuzz.run(t, 'exec', specs);
  });

  it('removes through the API what hostile requests created, and leaves nothing behind', async () => {
    await fuzz.assertNothingLeft();
  });
});
