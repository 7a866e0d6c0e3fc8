/**
 * ListContainers and ContainerStatus over many containers, timed inside a real berthd (its debug
 * "rpc" lines) and at the client. The containers are rows written through the store while the
 * daemon is stopped: exited containers of one stopped pod, the shape kubelet's records take, so
 * start-up repair leaves them alone and nothing needs runc. Prints numbers; never fails on time.
 * Usage: node dist/bench/containers-list.js
 * Env: BENCH_LIST_N (containers, 1000), BENCH_CALLS (calls per figure, 50), BENCH_CLIENTS (clients
 * calling ContainerStatus at once, 4).
 */
import type { ContainerMount } from '../src/model/container.js';
import { Store } from '../src/store/index.js';
import { TestDaemon } from '../test/harness/daemon.js';
import { parseLog } from '../test/harness/log.js';
import { container, sandbox } from '../test/harness/records.js';
import { containerSpec } from '../test/harness/container-spec.js';
import { envCount, runBench } from './run.js';
import { figures, line, timed } from './stats.js';

/** Labels and annotations the size kubelet gives every container. */
function kubeletMetadata(i: number): { labels: Record<string, string>; annotations: Record<string, string> } {
  return {
    labels: {
      'io.kubernetes.container.name': `c-${i}`,
      'io.kubernetes.pod.name': 'list',
      'io.kubernetes.pod.namespace': 'default',
      'io.kubernetes.pod.uid': 'list-uid',
      group: `g${i % 10}`,
    },
    annotations: {
      'io.kubernetes.container.hash': (0x1234abcd + i).toString(16),
      'io.kubernetes.container.restartCount': '0',
      'io.kubernetes.container.terminationMessagePath': '/dev/termination-log',
      'io.kubernetes.container.terminationMessagePolicy': 'File',
      'io.kubernetes.pod.terminationGracePeriod': '30',
    },
  };
}

/** The service-link variables kubelet puts in every container of the default namespace. */
const KUBERNETES_ENV = [
  ['KUBERNETES_SERVICE_HOST', '10.96.0.1'],
  ['KUBERNETES_SERVICE_PORT', '443'],
  ['KUBERNETES_SERVICE_PORT_HTTPS', '443'],
  ['KUBERNETES_PORT', 'tcp://10.96.0.1:443'],
  ['KUBERNETES_PORT_443_TCP', 'tcp://10.96.0.1:443'],
  ['KUBERNETES_PORT_443_TCP_PROTO', 'tcp'],
  ['KUBERNETES_PORT_443_TCP_PORT', '443'],
  ['KUBERNETES_PORT_443_TCP_ADDR', '10.96.0.1'],
].map(([key = '', value = '']) => ({ key, value }));

/** The token, hosts file and termination log kubelet mounts into every container. */
function kubeletMounts(id: string): ContainerMount[] {
  const pod = '/var/lib/kubelet/pods/list-uid';
  return [
    [
      '/var/run/secrets/kubernetes.io/serviceaccount',
      `${pod}/volumes/kubernetes.io~projected/kube-api-access`,
      true,
    ],
    ['/etc/hosts', `${pod}/etc-hosts`, false],
    ['/dev/termination-log', `${pod}/containers/${id.slice(0, 8)}/termination-log`, false],
  ].map(([containerPath, hostPath, readonly]): ContainerMount => ({
    containerPath: String(containerPath),
    hostPath: String(hostPath),
    readonly: readonly === true,
    recursiveReadOnly: false,
    propagation: 'PRIVATE',
    selinuxRelabel: false,
    idmap: null,
    image: null,
  }));
}

/** Fills the stopped daemon's database with `n` exited containers of one stopped pod. */
function fill(daemon: TestDaemon, n: number): string[] {
  const store = Store.open(`${daemon.rootDir}/berth.db`);
  try {
    store.sandboxes.insert(
      sandbox({ id: 'listpod', state: 'NOTREADY', step: 'stopped', networkState: 'NONE', pid: 0 }),
    );
    const ids: string[] = [];
    const base = 1_763_793_600_000_000_000n;
    for (let i = 0; i < n; i++) {
      const id = `${i.toString(16).padStart(8, '0')}${'e'.repeat(56)}`;
      const { labels, annotations } = kubeletMetadata(i);
      store.containers.insert(
        container({
          id,
          sandboxId: 'listpod',
          name: `c-${i}`,
          state: 'EXITED',
          step: 'created',
          spec: containerSpec({
            metadata: { name: `c-${i}`, attempt: 0 },
            command: ['/bin/sleep', '1000'],
            labels,
            annotations,
            envs: KUBERNETES_ENV,
            mounts: kubeletMounts(id),
          }),
          createdAt: (base + BigInt(i)).toString(),
          startedAt: (base + BigInt(i) + 1000n).toString(),
          finishedAt: (base + BigInt(i) + 2000n).toString(),
          reason: 'Completed',
          bundleDir: `${daemon.rootDir}/containers/${id}/bundle`,
          cgroupsPath: `/kubepods/list/${id}`,
        }),
      );
      ids.push(id);
    }
    return ids;
  } finally {
    store.close();
  }
}

/** berthd's own times for `rpc` in its log since `from`. */
function serverMs(daemon: TestDaemon, from: number, rpc: string): number[] {
  return parseLog(daemon.output.slice(from)).flatMap((entry) =>
    entry.msg === 'rpc' && entry.rpc === rpc && typeof entry.ms === 'number' ? [entry.ms] : [],
  );
}

async function main(): Promise<void> {
  const n = envCount('BENCH_LIST_N', 1000);
  const calls = envCount('BENCH_CALLS', 50);
  const clients = envCount('BENCH_CLIENTS', 4);
  const daemon = await TestDaemon.create({ cni: 'bridge' });
  try {
    await daemon.stop();
    const ids = fill(daemon, n);
    await daemon.start();
    type ListReply = { containers: unknown[] };

    // Warm-up: the first calls pay for lazy work (prepared statements, caches, JIT).
    for (let i = 0; i < 5; i++) await daemon.cri.call<ListReply>('ListContainers', {});

    let from = daemon.output.length;
    const listWall: number[] = [];
    let listed = 0;
    for (let i = 0; i < calls; i++) {
      const [reply, ms] = await timed(() => daemon.cri.call<ListReply>('ListContainers', {}));
      listWall.push(ms);
      listed = reply.containers.length;
    }
    const listServer = serverMs(daemon, from, 'ListContainers');

    from = daemon.output.length;
    const labelWall: number[] = [];
    let labelled = 0;
    for (let i = 0; i < calls; i++) {
      const filter = { label_selector: { group: `g${i % 10}` } };
      const [reply, ms] = await timed(() => daemon.cri.call<ListReply>('ListContainers', { filter }));
      labelWall.push(ms);
      labelled = reply.containers.length;
    }
    const labelServer = serverMs(daemon, from, 'ListContainers');

    const status = (id: string) => daemon.cri.call('ContainerStatus', { container_id: id });
    from = daemon.output.length;
    const statusWall: number[] = [];
    for (let i = 0; i < calls; i++) statusWall.push((await timed(() => status(ids[i % n] ?? '')))[1]);
    const statusServer = serverMs(daemon, from, 'ContainerStatus');

    from = daemon.output.length;
    const concurrentWall: number[] = [];
    await Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        for (let i = 0; i < calls; i++) {
          concurrentWall.push((await timed(() => status(ids[(c * calls + i) % n] ?? '')))[1]);
        }
      }),
    );
    const concurrentServer = serverMs(daemon, from, 'ContainerStatus');

    console.log(`berth ListContainers and ContainerStatus over ${n} exited containers, ${calls} calls each`);
    console.log(line(`ListContainers (${listed}) wall`, figures(listWall)));
    console.log(line('  in berthd', figures(listServer)));
    console.log(line(`ListContainers label (${labelled})`, figures(labelWall)));
    console.log(line('  in berthd', figures(labelServer)));
    console.log(line('ContainerStatus wall', figures(statusWall)));
    console.log(line('  in berthd', figures(statusServer)));
    console.log(line(`ContainerStatus, ${clients} clients`, figures(concurrentWall)));
    console.log(line('  in berthd', figures(concurrentServer)));
  } finally {
    await daemon.destroy();
  }
}

runBench(main);
