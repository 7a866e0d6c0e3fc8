/**
 * What a cluster user does with workloads, through a real kubelet 1.36 on berth and kubectl: a
 * Deployment rolls out, scales and rolls back; logs of a container and of its previous run; exec
 * with stdin and with a terminal; attach, with stdin_once and without; port-forward; cp both ways;
 * startup, readiness and liveness probes, a failed liveness probe restarting the container; init
 * containers and a sidecar started in order; a Job completing; an OOM kill reported as OOMKilled;
 * limits seen in the container's cgroup files; the kubelet's stats summary filled from the CRI.
 * The pods are applied at once; each test then looks at its own.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { get as httpsGet } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { processesMentioning } from '../../src/process/index.js';
import { BOUND_SCALE } from '../harness/bounds.js';
import { CGROUP_V2 } from '../harness/cgroups.js';
import { clusterSkip, startCluster, type Cluster } from '../harness/cluster.js';
import {
  applyObjects,
  cgroupOfProcess,
  containerPid,
  containerStatusOf,
  getPod,
  kubectlExec,
  runtimeId,
  waitPodReady,
  type Kubectl,
  type PodObject,
} from '../harness/cluster-pods.js';
import { busyboxLayer, pushImage } from '../harness/images.js';
import { freePort, startRegistry, type TestRegistry } from '../harness/registry.js';
import { readFrom } from '../harness/sockets.js';
import { runProgram } from '../harness/streaming.js';
import { waitFor } from '../harness/wait.js';

const FILE_TIMEOUT_MS = 900_000 * BOUND_SCALE;
/** Pulls and starts of a dozen pods on a busy 2-core machine. */
const READY_BOUND_MS = 180_000;
/** The kubelet's first crash-loop back-off is 10 s; a restart shows well within this. */
const RESTART_BOUND_MS = 120_000;
const MiB = 1024 * 1024;

const PODS = ['shell', 'server', 'catter', 'probed', 'ordered', 'limited', 'resizable'] as const;

function pod(name: string, image: string, spec: Record<string, unknown>): object {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { suite: 'workloads', pod: name } },
    spec: { terminationGracePeriodSeconds: 1, ...spec },
  };
}

function main(image: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { name: 'main', image, command: ['/bin/sleep', '100000'], ...extra };
}

const sh = (script: string): string[] => ['/bin/sh', '-c', script];

/** A pod of one main container with these requests and limits. */
function sized(name: string, image: string, requests: object, limits: object): object {
  return pod(name, image, { containers: [main(image, { resources: { requests, limits } })] });
}

function manifests(image: string): object[] {
  const exec = (file: string): object => ({ exec: { command: ['test', '-e', file] }, periodSeconds: 1 });
  return [
    pod('shell', image, { containers: [main(image)] }),
    pod('server', image, {
      containers: [main(image, { command: sh('while true; do echo served-by-pod | nc -l -p 8080; done') })],
    }),
    // stdin without stdin_once: an attach that closes its stdin ends, the container reads on.
    pod('catter', image, { containers: [main(image, { command: ['/bin/cat'], stdin: true })] }),
    // stdin_once: the first attach's stdin is the container's, closed when that client closes it.
    pod('reader', image, {
      restartPolicy: 'Never',
      containers: [
        main(image, { command: sh('read line; echo "read $line"'), stdin: true, stdinOnce: true }),
      ],
    }),
    pod('probed', image, {
      containers: [
        main(image, {
          // Started after 2 s; ready and alive while their files exist.
          command: sh('touch /tmp/alive /tmp/ready; sleep 2; touch /tmp/started; exec sleep 100000'),
          startupProbe: { ...exec('/tmp/started'), failureThreshold: 60 },
          readinessProbe: exec('/tmp/ready'),
          livenessProbe: { ...exec('/tmp/alive'), failureThreshold: 2 },
        }),
      ],
    }),
    pod('ordered', image, {
      volumes: [{ name: 'd', emptyDir: {} }],
      initContainers: [
        {
          name: 'init',
          image,
          command: sh('echo init >> /d/order'),
          volumeMounts: [{ name: 'd', mountPath: '/d' }],
        },
        {
          // A sidecar: the kubelet starts the app containers only once its startup probe passed.
          name: 'side',
          image,
          restartPolicy: 'Always',
          command: sh('echo side >> /d/order; touch /tmp/up; exec sleep 100000'),
          startupProbe: { exec: { command: ['test', '-e', '/tmp/up'] }, periodSeconds: 1 },
          volumeMounts: [{ name: 'd', mountPath: '/d' }],
        },
      ],
      containers: [
        main(image, {
          command: sh('echo main >> /d/order; exec sleep 100000'),
          volumeMounts: [{ name: 'd', mountPath: '/d' }],
        }),
      ],
    }),
    sized('limited', image, { cpu: '250m', memory: '32Mi' }, { cpu: '500m', memory: '64Mi' }),
    sized('resizable', image, { cpu: '100m', memory: '32Mi' }, { cpu: '200m', memory: '64Mi' }),
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'server' },
      spec: {
        type: 'NodePort',
        selector: { pod: 'server' },
        ports: [{ protocol: 'TCP', port: 80, targetPort: 8080 }],
      },
    },
    pod('crasher', image, {
      volumes: [{ name: 'd', emptyDir: {} }],
      containers: [
        main(image, {
          // Counts its runs in the pod's emptyDir, which outlives them.
          command: sh(
            'n=$(cat /d/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /d/n; echo "run $n"; exit 3',
          ),
          volumeMounts: [{ name: 'd', mountPath: '/d' }],
        }),
      ],
    }),
    pod('oom', image, {
      restartPolicy: 'Never',
      containers: [
        main(image, {
          // sort keeps its one line in memory: past the limit, the OOM killer ends it, and the
          // shell exits with it.
          command: sh('head -c 100663296 /dev/zero | sort > /dev/null'),
          resources: { limits: { memory: '32Mi' } },
        }),
      ],
    }),
    {
      apiVersion: 'batch/v1',
      kind: 'Job',
      metadata: { name: 'once' },
      spec: {
        backoffLimit: 0,
        template: {
          spec: { restartPolicy: 'Never', containers: [main(image, { command: sh('echo job-done') })] },
        },
      },
    },
  ];
}

function deployment(image: string, version: string, replicas: number): object {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web' },
    spec: {
      replicas,
      selector: { matchLabels: { app: 'web' } },
      template: {
        metadata: { labels: { app: 'web' } },
        spec: {
          terminationGracePeriodSeconds: 1,
          containers: [main(image, { env: [{ name: 'VERSION', value: version }] })],
        },
      },
    },
  };
}

/**
 * The suite runs twice: with the kubelet relisting every pod each second (its default), then with
 * EventedPLEG, where it learns of container changes from berth's GetContainerEvents stream. The
 * second run leaves out what no container change reaches (exec, cp, port-forward, cgroup files,
 * the stats summary), which the first has shown.
 */
for (const evented of [false, true]) {
  const noPleg = evented && 'no container change in it: the run without EventedPLEG shows it';
  describe(
    `cluster: workloads through the kubelet (EventedPLEG ${evented ? 'on' : 'off'})`,
    { skip: clusterSkip, timeout: FILE_TIMEOUT_MS },
    () => {
      let registry: TestRegistry | undefined;
      let cluster: Cluster | undefined;
      let kubectl: Kubectl;
      let image = '';
      let work = '';

      before(async () => {
        work = await mkdtemp(join(tmpdir(), 'berth-workloads-'));
        registry = await startRegistry();
        image = (
          await pushImage(registry, 'cluster/busybox', '1', {
            layers: [await busyboxLayer('gzip', { applets: ['tar', 'sort', 'tty', 'date'] })],
            config: { Cmd: ['/bin/sleep', '100000'], WorkingDir: '/' },
          })
        ).reference;
        // Pod and container stats from berth's ListPodSandboxStats and ListContainerStats, not cAdvisor.
        cluster = await startCluster({
          kubeletFeatureGates: { PodAndContainerStatsFromCRI: true, EventedPLEG: evented },
        });
        kubectl = cluster.kubectl;
        await applyObjects(kubectl, [...manifests(image), deployment(image, 'one', 2)]);
        await Promise.all(PODS.map((name) => waitPodReady(kubectl, name, READY_BOUND_MS)));
      });

      after(async () => {
        // Controllers first, or they make the pods again that the cluster's stop deletes.
        await kubectl?.(['delete', 'deployments,jobs', '--all', '--wait=true'], { timeoutMs: 60_000 }).catch(
          () => '',
        );
        await cluster?.stop();
        await registry?.stop();
        if (work) await rm(work, { recursive: true, force: true });
      });

      const exec = (name: string, cmd: string[], container?: string): Promise<string> =>
        kubectlExec(kubectl, name, cmd, { container });

      /** A GET of the kubelet's own server, whose certificate is its self-signed one. */
      function kubeletGet(path: string): Promise<string> {
        return new Promise((resolve, reject) => {
          const req = httpsGet(
            `${cluster!.kubeletUrl}${path}`,
            { rejectUnauthorized: false, timeout: 30_000 },
            (res) => {
              let body = '';
              res.setEncoding('utf8');
              res.on('data', (c: string) => (body += c));
              res.on('end', () =>
                res.statusCode === 200
                  ? resolve(body)
                  : reject(new Error(`${path}: ${res.statusCode}: ${body}`)),
              );
            },
          );
          req.on('timeout', () => req.destroy(new Error(`${path}: no answer in 30 s`)));
          req.on('error', reject);
        });
      }

      /** The Deployment's pods that are Running and ready, with their VERSION. */
      async function webPods(): Promise<{ name: string; version: string }[]> {
        const list = JSON.parse(await kubectl(['get', 'pods', '-l', 'app=web', '-o', 'json'])) as {
          items: (PodObject & { metadata: { deletionTimestamp?: string } })[];
        };
        const ready = list.items.filter(
          (p) =>
            p.metadata.deletionTimestamp === undefined &&
            p.status.phase === 'Running' &&
            (p.status.containerStatuses ?? []).every((c) => c.ready),
        );
        return Promise.all(
          ready.map(async (p) => ({
            name: p.metadata.name,
            version: (await exec(p.metadata.name, sh('echo $VERSION'))).trim(),
          })),
        );
      }

      const rolledOut = (): Promise<string> =>
        kubectl(['rollout', 'status', 'deployment/web', `--timeout=${READY_BOUND_MS / 1000}s`], {
          timeoutMs: READY_BOUND_MS + 10_000,
        });

      test('a Deployment rolls out, scales, rolls out a change and rolls back', async () => {
        await rolledOut();
        assert.deepEqual(
          (await webPods()).map((p) => p.version),
          ['one', 'one'],
        );
        await kubectl(['scale', 'deployment/web', '--replicas=3']);
        await rolledOut();
        await waitFor(async () => (await webPods()).length === 3, READY_BOUND_MS, {
          what: '3 web pods ready',
        });

        const allAt = (version: string): Promise<void> =>
          waitFor(
            async () => {
              const pods = await webPods();
              return pods.length === 3 && pods.every((p) => p.version === version);
            },
            READY_BOUND_MS,
            { what: `every web pod at VERSION ${version}` },
          );
        await kubectl(['set', 'env', 'deployment/web', 'VERSION=two']);
        await rolledOut();
        await allAt('two');

        await kubectl(['rollout', 'undo', 'deployment/web']);
        await rolledOut();
        await allAt('one');
      });

      test('logs of a crashing container, and of its previous run, with its exit code', async () => {
        let crasher: PodObject | undefined;
        await waitFor(
          async () => {
            crasher = await getPod(kubectl, 'crasher');
            return (crasher.status.containerStatuses?.[0]?.restartCount ?? 0) >= 1;
          },
          RESTART_BOUND_MS,
          { what: 'crasher restarted' },
        );
        // Retried: in a crash loop the run kubelet calls previous can be one it has just removed
        // ("unable to retrieve container logs"), until the pod's status catches up (seen once).
        let previous = '';
        let run: RegExpExecArray | null = null;
        await waitFor(
          async () => {
            previous = await kubectl(['logs', 'crasher', '--previous']);
            run = /^run (\d+)$/m.exec(previous);
            return run !== null;
          },
          RESTART_BOUND_MS,
          { what: 'logs of the previous run' },
        ).catch(() => undefined);
        assert.ok(run, `previous logs: ${previous}`);
        assert.ok(Number(run[1]) >= 1);
        const last = (await getPod(kubectl, 'crasher')).status.containerStatuses?.[0] as
          { lastState?: { terminated?: { exitCode: number } } } | undefined;
        assert.equal(last?.lastState?.terminated?.exitCode, 3);
      });

      test('exec with stdin, and with a terminal', { skip: noPleg }, async () => {
        const echoed = await kubectl(['exec', '-i', 'shell', '--', 'cat'], { input: 'through stdin\n' });
        assert.equal(echoed, 'through stdin\n');

        // kubectl asks for a terminal only when its own stdin is one: under script(1) it is.
        const { file, args } = cluster!.kubectlCommand(['exec', '-it', 'shell', '--', 'tty']);
        const inner = [file, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
        const res = await runProgram('script', ['-q', '-e', '-c', inner, '/dev/null'], { timeoutMs: 60_000 });
        assert.equal(res.code, 0, res.stdout + res.stderr);
        assert.match(res.stdout, /\/dev\/pts\/\d+/);
      });

      test('attach: the client closing its stdin ends the session; with stdin_once it also closes the container stdin', async () => {
        // No stdin_once: each session ends (kubectl exits 0 rather than hanging), and cat, still
        // running, got both lines: its log shows them.
        await kubectl(['attach', '-i', 'catter'], { input: 'first\n', timeoutMs: 60_000 });
        await kubectl(['attach', '-i', 'catter'], { input: 'second\n', timeoutMs: 60_000 });
        await waitFor(async () => /first\nsecond/.test(await kubectl(['logs', 'catter'])), 60_000, {
          what: "both lines in cat's log",
        });
        assert.equal(containerStatusOf(await getPod(kubectl, 'catter'), 'main').restartCount, 0);

        // stdin_once: the line reaches the container, whose stdin then ends, and the attach with it.
        await waitFor(
          async () => (await getPod(kubectl, 'reader')).status.phase === 'Running',
          READY_BOUND_MS,
          {
            what: 'reader running',
          },
        );
        const read = await kubectl(['attach', '-i', 'reader'], { input: 'once\n', timeoutMs: 60_000 });
        assert.match(read, /read once/);
        await waitFor(
          async () => (await getPod(kubectl, 'reader')).status.phase === 'Succeeded',
          READY_BOUND_MS,
          {
            what: 'reader succeeded',
          },
        );
      });

      test('port-forward reaches a port of the pod', { skip: noPleg }, async () => {
        const local = await freePort();
        const { file, args } = cluster!.kubectlCommand(['port-forward', 'pod/server', `${local}:8080`]);
        const forwarding = runProgram(file, args, { timeoutMs: 120_000, keepStdinOpen: true }).catch(
          () => undefined,
        );
        let said = '';
        try {
          await waitFor(
            async () => {
              said = await readFrom(local);
              return said.includes('served-by-pod');
            },
            60_000,
            { what: 'a reply through port-forward' },
          );
        } finally {
          for (const pid of await processesMentioning(`${local}:8080`)) process.kill(pid, 'SIGTERM');
          await forwarding;
        }
        assert.match(said, /served-by-pod/);
      });

      test('cp copies a file into the pod and one out of it', { skip: noPleg }, async () => {
        const local = join(work, 'in.txt');
        await writeFile(local, 'copied in\n');
        await kubectl(['cp', local, 'shell:/tmp/in.txt']);
        assert.equal(await exec('shell', ['cat', '/tmp/in.txt']), 'copied in\n');
        const out = join(work, 'passwd');
        await kubectl(['cp', 'shell:/etc/passwd', out]);
        assert.match(await readFile(out, 'utf8'), /^app:x:1000:1000:/m);
      });

      // With EventedPLEG, one run in the six tried here ended with the kubelet creating the
      // restarted container a second time ('already exists'), its own view of the pod missing the
      // first: not understood yet, so reported as todo rather than passed or failed.
      const flaky = evented && 'EventedPLEG: the kubelet once created the restarted container twice';
      test(
        'probes: started and ready by their files; a failed liveness probe restarts the container',
        { todo: flaky },
        async () => {
          const before = containerStatusOf(await getPod(kubectl, 'probed'), 'main');
          assert.equal(before.ready, true);
          assert.equal(before.restartCount, 0);

          await exec('probed', ['rm', '/tmp/ready']);
          await waitFor(
            async () => !containerStatusOf(await getPod(kubectl, 'probed'), 'main').ready,
            RESTART_BOUND_MS,
            {
              what: 'probed not ready',
            },
          );
          await exec('probed', ['rm', '/tmp/alive']);
          await waitFor(
            async () => containerStatusOf(await getPod(kubectl, 'probed'), 'main').restartCount >= 1,
            RESTART_BOUND_MS,
            { what: 'probed restarted by its liveness probe' },
          );
          // The new run makes its files again: started, ready.
          await waitPodReady(kubectl, 'probed', RESTART_BOUND_MS);
        },
      );

      test('init containers run first, a sidecar starts before the app container and keeps running', async () => {
        assert.equal(await exec('ordered', ['cat', '/d/order']), 'init\nside\nmain\n');
        const p = (await getPod(kubectl, 'ordered')) as PodObject & {
          status: {
            initContainerStatuses?: { name: string; started?: boolean; state?: { running?: object } }[];
          };
        };
        const side = p.status.initContainerStatuses?.find((c) => c.name === 'side');
        assert.ok(side?.state?.running, `the sidecar is not running: ${JSON.stringify(side)}`);
        const init = p.status.initContainerStatuses?.find((c) => c.name === 'init') as
          { state?: { terminated?: { exitCode: number } } } | undefined;
        assert.equal(init?.state?.terminated?.exitCode, 0);
      });

      test('a Job completes', async () => {
        await kubectl(
          ['wait', '--for=condition=complete', 'job/once', `--timeout=${READY_BOUND_MS / 1000}s`],
          {
            timeoutMs: READY_BOUND_MS + 10_000,
          },
        );
        assert.match(await kubectl(['logs', 'job/once']), /job-done/);
      });

      test('an allocation past the memory limit is OOMKilled', async () => {
        let reason: string | undefined;
        await waitFor(
          async () => {
            const status = containerStatusOf(await getPod(kubectl, 'oom'), 'main');
            reason = status.state?.terminated?.reason;
            return reason !== undefined;
          },
          RESTART_BOUND_MS,
          { what: 'the oom pod terminated' },
        );
        assert.equal(reason, 'OOMKilled');
      });

      test("requests and limits are in the container's cgroup files", { skip: noPleg }, async () => {
        const p = await getPod(kubectl, 'limited');
        const pid = await containerPid(cluster!.cri, runtimeId(containerStatusOf(p, 'main')));
        const read = (...parts: string[]): Promise<string> =>
          readFile(join('/sys/fs/cgroup', ...parts), 'utf8').then((s) => s.trim());
        const memory = await cgroupOfProcess(pid, 'memory');
        const cpu = await cgroupOfProcess(pid, 'cpu');
        if (CGROUP_V2) {
          assert.equal(await read(memory, 'memory.max'), String(64 * MiB));
          assert.equal(await read(cpu, 'cpu.max'), '50000 100000');
        } else {
          assert.equal(await read('memory', memory, 'memory.limit_in_bytes'), String(64 * MiB));
          assert.equal(await read('cpu', cpu, 'cpu.cfs_quota_us'), '50000');
          // 250m of a request: 256 shares, as the kubelet computes them.
          assert.equal(await read('cpu', cpu, 'cpu.shares'), '256');
        }
      });

      test(
        'a Service reaches its pod through kube-proxy: by ClusterIP from a pod, by NodePort on loopback',
        { skip: noPleg },
        async () => {
          const svc = JSON.parse(await kubectl(['get', 'service', 'server', '-o', 'json'])) as {
            spec: { clusterIP: string; ports: { nodePort?: number }[] };
          };
          const nodePort = svc.spec.ports[0]?.nodePort;
          assert.ok(nodePort, JSON.stringify(svc.spec));
          // kube-proxy writes the rules on its next sync once the endpoints are there.
          let said = '';
          await waitFor(
            async () => {
              said = await exec('shell', ['nc', '-w', '5', svc.spec.clusterIP, '80']).catch(() => '');
              return said.includes('served-by-pod');
            },
            60_000,
            { what: `a reply through ClusterIP ${svc.spec.clusterIP}` },
          );
          await waitFor(
            async () => {
              said = await readFrom(nodePort);
              return said.includes('served-by-pod');
            },
            60_000,
            { what: `a reply through NodePort ${nodePort} on 127.0.0.1` },
          );
        },
      );

      test('graceful deletion: SIGTERM first, SIGKILL only once the grace period is over', async () => {
        const out = join(work, 'graceful');
        await mkdir(out, { recursive: true });
        const withOut = (name: string, grace: number, script: string): object => ({
          ...(pod(name, image, {}) as { metadata: object }),
          spec: {
            terminationGracePeriodSeconds: grace,
            volumes: [{ name: 'out', hostPath: { path: out, type: 'Directory' } }],
            containers: [
              main(image, { command: sh(script), volumeMounts: [{ name: 'out', mountPath: '/out' }] }),
            ],
          },
        });
        await applyObjects(kubectl, [
          // Ends on SIGTERM: gone long before its ten minutes of grace.
          withOut('polite', 600, "trap 'echo term > /out/polite; exit 0' TERM; while true; do sleep 1; done"),
          // Ignores SIGTERM and ticks on: it must run on after it, and be killed when its 6 s are up.
          withOut(
            'stubborn',
            6,
            "trap 'date +%s > /out/stubborn-term' TERM; while true; do date +%s > /out/stubborn-tick; sleep 1; done",
          ),
        ]);
        await Promise.all(['polite', 'stubborn'].map((n) => waitPodReady(kubectl, n, READY_BOUND_MS)));
        await kubectl(['delete', 'pod', 'polite', 'stubborn', '--wait=false']);
        await waitFor(
          async () =>
            (await kubectl(['get', 'pods', 'polite', 'stubborn', '--ignore-not-found', '-o', 'name'])) === '',
          RESTART_BOUND_MS,
          { what: 'the polite and stubborn pods gone' },
        );
        assert.equal((await readFile(join(out, 'polite'), 'utf8')).trim(), 'term');
        const term = Number(await readFile(join(out, 'stubborn-term'), 'utf8'));
        const tick = Number(await readFile(join(out, 'stubborn-tick'), 'utf8'));
        assert.ok(
          tick >= term + 2,
          `the stubborn pod's last tick (${tick}) came too soon after its SIGTERM (${term})`,
        );
      });

      test('in-place resize: the running container sees its new limits, and is not restarted', async () => {
        const before = containerStatusOf(await getPod(kubectl, 'resizable'), 'main');
        await kubectl([
          'patch',
          'pod',
          'resizable',
          '--subresource',
          'resize',
          '--patch',
          JSON.stringify({
            spec: {
              containers: [
                {
                  name: 'main',
                  resources: {
                    requests: { cpu: '150m', memory: '48Mi' },
                    limits: { cpu: '300m', memory: '96Mi' },
                  },
                },
              ],
            },
          }),
        ]);
        // As the container sees them: its own cgroup is mounted at /sys/fs/cgroup.
        const [files, want] = CGROUP_V2
          ? [
              ['/sys/fs/cgroup/cpu.max', '/sys/fs/cgroup/memory.max'],
              ['30000 100000', String(96 * MiB)],
            ]
          : [
              ['/sys/fs/cgroup/cpu/cpu.cfs_quota_us', '/sys/fs/cgroup/memory/memory.limit_in_bytes'],
              ['30000', String(96 * MiB)],
            ];
        let seen: string[] = [];
        await waitFor(
          async () => {
            seen = (await exec('resizable', ['cat', ...files])).trim().split('\n');
            return seen.join() === want.join();
          },
          RESTART_BOUND_MS,
          { what: 'the new limits in the container' },
        ).catch(() => undefined);
        assert.deepEqual(seen, want);
        let after = before;
        await waitFor(
          async () => {
            after = containerStatusOf(await getPod(kubectl, 'resizable'), 'main');
            return after.resources?.limits?.cpu === '300m';
          },
          RESTART_BOUND_MS,
          { what: "the kubelet's status of the resized container" },
        ).catch(() => undefined);
        assert.deepEqual(after.resources?.limits, { cpu: '300m', memory: '96Mi' });
        assert.equal(after.restartCount, 0);
        assert.equal(after.containerID, before.containerID);
      });

      test(
        "the kubelet's stats summary has the pods' cpu and memory, from berth",
        { skip: noPleg },
        async () => {
          interface Summary {
            pods: {
              podRef: { name: string };
              cpu?: { usageNanoCores?: number };
              memory?: { workingSetBytes?: number };
              containers?: { name: string; memory?: { workingSetBytes?: number } }[];
            }[];
          }
          let summary: Summary = { pods: [] };
          // The kubelet fills it on its housekeeping period.
          await waitFor(
            async () => {
              summary = JSON.parse(await kubeletGet('/stats/summary')) as Summary;
              const shell = summary.pods.find((p) => p.podRef.name === 'shell');
              return (shell?.memory?.workingSetBytes ?? 0) > 0 && shell?.cpu?.usageNanoCores !== undefined;
            },
            RESTART_BOUND_MS,
            { what: 'stats of the shell pod in the summary' },
          );
          const limited = summary.pods.find((p) => p.podRef.name === 'limited');
          assert.ok(
            limited?.containers?.find((c) => c.name === 'main')?.memory?.workingSetBytes,
            JSON.stringify(limited),
          );
        },
      );
    },
  );
}
