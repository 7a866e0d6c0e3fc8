/**
 * Container figures against a real berthd (runc under conmon, bridge CNI) spoken to over its gRPC
 * socket, with a busybox image pulled from Debian's docker-registry on loopback. Prints numbers;
 * never fails on time. Usage: node dist/bench/container.js
 * Env: BENCH_N (create/start/stop/remove iterations, 30), BENCH_POD_N (pod to running container, 15),
 * BENCH_LIST_N (containers for ListContainers, 500), BENCH_LIST_PODS (pods they spread over, 10),
 * BENCH_LIST_CONCURRENCY (creates in flight while filling, 4), BENCH_MEM_N (running containers
 * whose monitors are measured, 20).
 */
import { busyboxLayer, pushImage } from '../test/harness/images.js';
import { TestDaemon } from '../test/harness/daemon.js';
import { parseLog, type LogEntry } from '../test/harness/log.js';
import { procKiB, rssKiB } from '../test/harness/memory.js';
import { containerConfig, createContainer, runPod, type Pod } from '../test/harness/pods.js';
import { inPool } from '../test/harness/pool.js';
import { startRegistry } from '../test/harness/registry.js';
import { envCount, runBench } from './run.js';
import { figures, figuresByKey, line, mean, timed, type Figures } from './stats.js';

/**
 * pid 1 of a pid namespace ignores signals it has no handler for, so the workload must trap TERM.
 * `wait` returns as soon as a trapped signal arrives, where a `sleep 0.1` loop would add up to
 * 100 ms of the workload's own latency to every stop.
 */
const TERM_HANDLING = ['/bin/sh', '-c', 'trap "exit 0" TERM; sleep 1000 & wait'];
const LIST_CALLS = 50;
/**
 * What kubelet sends for a pod without shareProcessNamespace: each container its own pid namespace,
 * so the workload is pid 1 (the proto default, POD, would make the pod's infra pid 1 instead).
 */
const NAMESPACES = { network: 'POD', pid: 'CONTAINER', ipc: 'POD' };
const SECURITY = { security_context: { namespace_options: NAMESPACES } };
/** Label values the list containers cycle through; the filtered list matches one of them. */
const LIST_GROUPS = 10;

/** The lines of berthd's log with the given msg. */
function logRecords(output: string, msg: string): LogEntry[] {
  return parseLog(output).filter((entry) => entry.msg === msg);
}

function stepsOf(output: string, msg: string): Record<string, number>[] {
  return logRecords(output, msg)
    .map((r) => r.stepsMs)
    .filter((s): s is Record<string, number> => typeof s === 'object' && s !== null);
}

/**
 * berthd's own time per rpc (its debug "rpc" lines), by rpc name. The line is written after the
 * reply, so a slice of the log can hold the previous phase's last rpc: `only` keeps the named ones.
 */
function serverRpcMs(output: string, only?: string[]): Map<string, Figures> {
  const records = logRecords(output, 'rpc').flatMap((r) =>
    typeof r.rpc === 'string' && typeof r.ms === 'number' && (!only || only.includes(r.rpc))
      ? [{ [r.rpc]: r.ms }]
      : [],
  );
  return figuresByKey(records);
}

function stepLine(label: string, byStep: Map<string, Figures>): string {
  const parts = [...byStep].map(([step, f]) => `${step} ${f.median.toFixed(1)}/${f.p99.toFixed(1)}`);
  return `${label.padEnd(26)} ${parts.join(', ')}  (median/p99 ms)`;
}

function mib(kib: number): string {
  return `${(kib / 1024).toFixed(2)} MiB`;
}

async function main(): Promise<void> {
  const n = envCount('BENCH_N', 30);
  const podN = envCount('BENCH_POD_N', 15);
  const listN = envCount('BENCH_LIST_N', 500);
  const listPods = envCount('BENCH_LIST_PODS', 10);
  const listConcurrency = envCount('BENCH_LIST_CONCURRENCY', 4);
  const memN = envCount('BENCH_MEM_N', 20);

  const registry = await startRegistry();
  const daemon = await TestDaemon.create({ cni: 'bridge' });
  try {
    const cri = () => daemon.cri;
    const image = await pushImage(registry, 'bench/ctr', '1', {
      layers: [await busyboxLayer('gzip')],
      config: { Cmd: ['/bin/sleep', '1000'], WorkingDir: '/' },
    });
    await cri().callImage('PullImage', { image: { image: image.reference } });

    const runNamedPod = (name: string): Promise<Pod> => runPod(cri(), daemon.pod(name, { linux: SECURITY }));
    const create = (pod: Pod, name: string, extra: Record<string, unknown> = {}): Promise<string> => {
      const labelled = { labels: { name, bench: 'container' }, linux: SECURITY, ...extra };
      return createContainer(cri(), pod, containerConfig(name, image.reference, labelled));
    };
    const start = (id: string) => cri().call('StartContainer', { container_id: id });
    const stop = (id: string, timeout: number) => cri().call('StopContainer', { container_id: id, timeout });
    const remove = (id: string) => cri().call('RemoveContainer', { container_id: id });
    const removePod = (pod: Pod) => cri().call('RemovePodSandbox', { pod_sandbox_id: pod.id });
    const exitCode = async (id: string): Promise<number> =>
      (await cri().call<{ status: { exit_code: number } }>('ContainerStatus', { container_id: id })).status
        .exit_code;

    // --- create / start / stop / remove, one container at a time -------------------------------
    const opsPod = await runNamedPod('ops');
    // Warm-up: the first container pays for lazy work (runtime path lookup, dirs, caches).
    const warm = await create(opsPod, 'warm', { command: TERM_HANDLING });
    await start(warm);
    await stop(warm, 10);
    const warmExit = await exitCode(warm);
    await remove(warm);

    const opsLogFrom = daemon.output.length;
    const ops = {
      create: [] as number[],
      start: [] as number[],
      stop: [] as number[],
      remove: [] as number[],
    };
    for (let i = 0; i < n; i++) {
      const [id, createMs] = await timed(() => create(opsPod, `trap-${i}`, { command: TERM_HANDLING }));
      const [, startMs] = await timed(() => start(id));
      const [, stopMs] = await timed(() => stop(id, 10));
      const [, removeMs] = await timed(() => remove(id));
      ops.create.push(createMs);
      ops.start.push(startMs);
      ops.stop.push(stopMs);
      ops.remove.push(removeMs);
    }
    const opsLog = daemon.output.slice(opsLogFrom);

    const stubborn: number[] = [];
    let stubbornExit = NaN;
    for (let i = 0; i < n; i++) {
      const id = await create(opsPod, `plain-${i}`);
      await start(id);
      stubborn.push((await timed(() => stop(id, 1)))[1]);
      if (i === 0) stubbornExit = await exitCode(id);
      await remove(id);
    }
    await removePod(opsPod);

    // --- RunPodSandbox to a running container ---------------------------------------------------
    const podLogFrom = daemon.output.length;
    const fromScratch: number[] = [];
    const phases = { run: [] as number[], create: [] as number[], start: [] as number[] };
    for (let i = 0; i < podN; i++) {
      const began = process.hrtime.bigint();
      const [pod, runMs] = await timed(() => runNamedPod(`scratch-${i}`));
      const [id, createMs] = await timed(() => create(pod, 'app'));
      const [, startMs] = await timed(() => start(id));
      fromScratch.push(Number(process.hrtime.bigint() - began) / 1e6);
      phases.run.push(runMs);
      phases.create.push(createMs);
      phases.start.push(startMs);
      await removePod(pod);
    }
    const podLog = daemon.output.slice(podLogFrom);

    // --- monitor memory per running container ---------------------------------------------------
    const berthdBaseKiB = await rssKiB(daemon.proc?.pid);
    const memPod = await runNamedPod('mem');
    for (let i = 0; i < memN; i++) await start(await create(memPod, `mem-${i}`));
    const monitors = await daemon.conmonPids();
    const monitorRss = await Promise.all(monitors.map((pid) => rssKiB(pid)));
    const monitorPss = await Promise.all(monitors.map((pid) => procKiB(pid, 'smaps_rollup', 'Pss')));
    const [, removeMemPodMs] = await timed(() => removePod(memPod));

    // --- ListContainers over many created containers --------------------------------------------
    const pods: Pod[] = [];
    for (let p = 0; p < listPods; p++) pods.push(await runNamedPod(`list-${p}`));
    const listIndices = Array.from({ length: listN }, (_, i) => i);
    const listLogFrom = daemon.output.length;
    const fillLatency: number[] = [];
    const [, fillMs] = await timed(() =>
      inPool(listIndices, listConcurrency, async (i) => {
        const pod = pods[i % pods.length] as Pod;
        const labels = { name: `c-${i}`, bench: 'list', group: `g${i % LIST_GROUPS}` };
        const [id, ms] = await timed(() => create(pod, `c-${i}`, { labels }));
        fillLatency[i] = ms;
        return id;
      }),
    );
    const listLog = daemon.output.slice(listLogFrom);

    type ListReply = { containers: unknown[] };
    const listCallsLogFrom = daemon.output.length;
    const unfiltered: number[] = [];
    const filtered: number[] = [];
    let unfilteredCount = 0;
    let filteredCount = 0;
    for (let i = 0; i < LIST_CALLS; i++) {
      const [all, allMs] = await timed(() => cri().call<ListReply>('ListContainers', {}));
      const filter = { label_selector: { group: `g${i % LIST_GROUPS}` } };
      const [some, someMs] = await timed(() => cri().call<ListReply>('ListContainers', { filter }));
      unfiltered.push(allMs);
      filtered.push(someMs);
      unfilteredCount = all.containers.length;
      filteredCount = some.containers.length;
    }
    const listCallsLog = daemon.output.slice(listCallsLogFrom);
    const berthdListKiB = await rssKiB(daemon.proc?.pid);
    const createdMonitors = await daemon.conmonPids();
    const createdMonitorRss = await Promise.all(createdMonitors.map((pid) => rssKiB(pid)));

    const removePodMs: number[] = [];
    for (const pod of pods) removePodMs.push((await timed(() => removePod(pod)))[1]);
    const leftover = await cri().call<{ items: unknown[] }>('ListPodSandbox', {});

    // --- report -------------------------------------------------------------------------------
    const tenth = Math.max(1, Math.floor(listN / 10));
    console.log(`berth container benchmark: runc under conmon, bridge CNI, busybox image, ${n} iterations`);
    console.log(line('CreateContainer', figures(ops.create)));
    console.log(line('StartContainer', figures(ops.start)));
    console.log(line('StopContainer', figures(ops.stop)));
    console.log(`${''.padEnd(26)} (timeout 10; sh pid 1 traps TERM and exits; exit code ${warmExit})`);
    console.log(line('RemoveContainer', figures(ops.remove)));
    console.log(line('StopContainer, stubborn', figures(stubborn)));
    console.log(
      `${''.padEnd(26)} (timeout 1; plain sleep 1000 as pid 1 ignores TERM: SIGKILL after 1 s, exit code ${stubbornExit})`,
    );
    console.log(stepLine('  berthd create steps', figuresByKey(stepsOf(opsLog, 'container created'))));
    console.log(
      stepLine(
        '  berthd rpc time',
        serverRpcMs(opsLog, ['CreateContainer', 'StartContainer', 'StopContainer', 'RemoveContainer']),
      ),
    );
    console.log('');
    console.log(line('pod to running container', figures(fromScratch)));
    console.log(line('  RunPodSandbox', figures(phases.run)));
    console.log(line('  CreateContainer', figures(phases.create)));
    console.log(line('  StartContainer', figures(phases.start)));
    console.log(stepLine('  berthd sandbox steps', figuresByKey(stepsOf(podLog, 'pod sandbox ready'))));
    console.log(`${''.padEnd(26)} (${podN} pods, each run, created, started, then removed)`);
    console.log('');
    console.log(
      `conmon per running container: RSS ${mib(mean(monitorRss))}, PSS ${mib(mean(monitorPss))} (mean of ${monitors.length} conmons, ${memN} containers)`,
    );
    console.log(`RemovePodSandbox with ${memN} running containers: ${removeMemPodMs.toFixed(0)} ms`);
    console.log('');
    console.log(
      `fill: ${listN} containers (created, not started) in ${listPods} pods, ${listConcurrency} in flight: ` +
        `${fillMs.toFixed(0)} ms, ${((listN * 1000) / fillMs).toFixed(1)} creates/s`,
    );
    console.log(line(`  first ${tenth} creates`, figures(fillLatency.slice(0, tenth))));
    console.log(line(`  last ${tenth} creates`, figures(fillLatency.slice(-tenth))));
    console.log(stepLine('  berthd create steps', figuresByKey(stepsOf(listLog, 'container created'))));
    console.log(line(`ListContainers (${unfilteredCount})`, figures(unfiltered)));
    console.log(line(`ListContainers label (${filteredCount})`, figures(filtered)));
    console.log(stepLine('  berthd rpc time', serverRpcMs(listCallsLog, ['ListContainers'])));
    console.log(
      `berthd RSS: ${mib(berthdBaseKiB)} idle, ${mib(berthdListKiB)} with ${listN} containers; ` +
        `${createdMonitors.length} conmons of created containers, RSS ${mib(mean(createdMonitorRss))} each`,
    );
    console.log(line(`RemovePodSandbox (${Math.round(listN / listPods)} ctrs)`, figures(removePodMs)));
    console.log('');
    console.log(
      'reference (containerd 1.6, same kind of machine): CreateContainer 9 ms, StartContainer 58 ms, ' +
        'StopContainer 52 ms, RemoveContainer 3 ms (medians); pod and container from scratch about 276 ms; ' +
        'shim about 10 MB per pod',
    );
    if (leftover.items.length > 0) throw new Error(`${leftover.items.length} pods left after removal`);
  } finally {
    await daemon.destroy();
    await registry.stop();
  }
}

runBench(main);
