/**
 * Pod start-up through a kubelet 1.36 on berth: the one-node cluster of the cluster suites
 * (test/harness/cluster-interim.ts), busybox from Debian's docker-registry on loopback. A Deployment
 * of BENCH_PODS replicas is applied; each pod's figure is the time from the apply until kubectl
 * first shows it Running with its container ready (kubectl is asked every POLL_MS, so a figure is
 * late by up to that and one kubectl call). Then the time until every pod is gone once the
 * Deployment is deleted. Prints numbers; never fails on time. Without the Kubernetes binaries or
 * etcd it says why and exits 0.
 * Usage: node dist/bench/kubelet.js   Env: BENCH_PODS (30), KUBERNETES_BIN.
 */
import { clusterSkip, startCluster } from '../test/harness/cluster.js';
import { applyObjects, type PodObject } from '../test/harness/cluster-pods.js';
import { busyboxLayer, pushImage } from '../test/harness/images.js';
import { startRegistry } from '../test/harness/registry.js';
import { envCount, runBench } from './run.js';
import { figures, line } from './stats.js';

const POLL_MS = 200;
/** A bound for a hang: 30 pods start in seconds on an idle 2-core host. */
const ROLLOUT_BOUND_MS = 600_000;
const LABEL = 'berth-bench';

function deployment(image: string, replicas: number): object {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: LABEL },
    spec: {
      replicas,
      selector: { matchLabels: { app: LABEL } },
      template: {
        metadata: { labels: { app: LABEL } },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [{ name: 'sleep', image, command: ['/bin/sleep', '100000'] }],
        },
      },
    },
  };
}

function isUp(pod: PodObject): boolean {
  const statuses = pod.status.containerStatuses ?? [];
  return pod.status.phase === 'Running' && statuses.length > 0 && statuses.every((c) => c.ready);
}

async function main(): Promise<void> {
  if (clusterSkip) {
    console.log(`kubelet bench skipped: ${clusterSkip}`);
    return;
  }
  const n = envCount('BENCH_PODS', 30);
  const registry = await startRegistry();
  try {
    const image = (
      await pushImage(registry, 'bench/busybox', '1', {
        layers: [await busyboxLayer()],
        config: { Cmd: ['/bin/sleep', '100000'], WorkingDir: '/' },
      })
    ).reference;
    const cluster = await startCluster();
    try {
      const { kubectl } = cluster;
      const list = async (): Promise<PodObject[]> =>
        (
          JSON.parse(await kubectl(['get', 'pods', '-l', `app=${LABEL}`, '-o', 'json'])) as {
            items: PodObject[];
          }
        ).items;
      const applied = performance.now();
      await applyObjects(kubectl, [deployment(image, n)]);
      const upAt = new Map<string, number>();
      while (upAt.size < n) {
        if (performance.now() - applied > ROLLOUT_BOUND_MS) {
          throw new Error(`only ${upAt.size} of ${n} pods Running after ${ROLLOUT_BOUND_MS / 1000} s`);
        }
        for (const pod of await list()) {
          if (isUp(pod) && !upAt.has(pod.metadata.uid))
            upAt.set(pod.metadata.uid, performance.now() - applied);
        }
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
      const samples = [...upAt.values()];
      console.log(
        `kubelet 1.36 on berth: a Deployment of ${n} pods, from kubectl apply to each pod Running and ready`,
      );
      console.log(line('pod Running', figures(samples)));
      console.log(`all ${n} Running after ${(Math.max(...samples) / 1000).toFixed(1)} s`);

      const deleted = performance.now();
      await kubectl(['delete', 'deployment', LABEL, '--wait=true'], { timeoutMs: ROLLOUT_BOUND_MS });
      while ((await list()).length > 0) {
        if (performance.now() - deleted > ROLLOUT_BOUND_MS) throw new Error('pods left after deletion');
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
      console.log(
        `all ${n} pods gone ${((performance.now() - deleted) / 1000).toFixed(1)} s after the delete`,
      );
    } finally {
      await cluster.stop();
    }
  } finally {
    await registry.stop();
  }
}

runBench(main);
