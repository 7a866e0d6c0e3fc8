/**
 * A test process that is killed with its cluster up (cluster-faults' sweep scenario): it starts a
 * cluster, runs one pod of the image its argument names, prints `up <cluster dir>` and waits to
 * be killed, leaving everything running for the next start's sweep.
 */
import { startCluster } from './cluster.js';
import { applyObjects, waitPodReady } from './cluster-pods.js';

const image = process.argv[2];
if (!image) throw new Error('usage: cluster-child.js <image reference>');
const cluster = await startCluster();
await applyObjects(cluster.kubectl, [
  {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'left' },
    spec: {
      terminationGracePeriodSeconds: 1,
      volumes: [{ name: 'd', emptyDir: {} }],
      containers: [
        {
          name: 'main',
          image,
          command: ['/bin/sleep', '100000'],
          volumeMounts: [{ name: 'd', mountPath: '/d' }],
        },
      ],
    },
  },
]);
await waitPodReady(cluster.kubectl, 'left', 180_000);
process.stdout.write(`up ${cluster.dir}\n`);
setInterval(() => undefined, 60_000);
