/**
 * What the tests of berthd's HTTP listeners share: a daemon with a running container to exec
 * into, its streaming and metrics ports, a CRI client with deadlines to check that berthd still
 * answers, and idle TCP connections held open on loopback.
 */
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { after, before } from 'node:test';
import { status } from '@grpc/grpc-js';
import { TestDaemon, type TestDaemonOptions } from './daemon.js';
import { DeadlineClient } from './hostile.js';
import { busyboxLayer, pushImage } from './images.js';
import { parseLog } from './log.js';
import { containerConfig, runPod, startContainer } from './pods.js';
import { startRegistry, type TestRegistry } from './registry.js';

/** A Version call's deadline: a bound for a hang on a busy machine, not a speed check. */
export const ANSWER_DEADLINE_MS = 30_000;

export interface ListenerTarget {
  daemon: TestDaemon;
  /** A CRI client of its own, every call with a deadline. */
  cri: DeadlineClient;
  /** A running container of busybox (sleep, sh, cat...). */
  containerId: string;
  podId: string;
  streamingPort: number;
  metricsPort: number;
  /** An Exec URL for `cmd` in the container (a fresh single-use token). */
  execUrl(cmd: string[], flags?: Record<string, boolean>): Promise<string>;
  /** PortForward URL for `ports` of the pod. */
  portForwardUrl(ports: number[]): Promise<string>;
  /** Fails unless berthd runs and answers Version within ANSWER_DEADLINE_MS; `where` names the case. */
  assertServing(where: string): Promise<void>;
  /** berthd's open file descriptors. */
  openFds(): Promise<number>;
}

/**
 * A berthd for the enclosing describe block with a pod and a running container, made in its before
 * hook and destroyed after it. `options` are the daemon's (e.g. extra flags).
 */
export function useListenerTarget(options: TestDaemonOptions = {}): () => ListenerTarget {
  let registry: TestRegistry | undefined;
  let target: ListenerTarget | undefined;
  before(async () => {
    registry = await startRegistry();
    const image = await pushImage(registry, 'berth/listeners', '1', {
      layers: [await busyboxLayer()],
      config: { Cmd: ['/bin/sleep', '100000'], WorkingDir: '/', Env: ['PATH=/bin'] },
    });
    const daemon = await TestDaemon.create({ cni: 'bridge', ...options });
    const cri = new DeadlineClient(daemon.socket);
    try {
      target = await prepare(daemon, cri, image.reference);
    } catch (err) {
      cri.close();
      await daemon.destroy();
      throw err;
    }
  });
  after(async () => {
    target?.cri.close();
    await target?.daemon.destroy();
    await registry?.stop();
  });
  return () => {
    assert.ok(target, 'listener target not made');
    return target;
  };
}

async function prepare(daemon: TestDaemon, cri: DeadlineClient, image: string): Promise<ListenerTarget> {
  await daemon.cri.callImage('PullImage', { image: { image } });
  const pod = await runPod(daemon.cri, daemon.pod('listeners'));
  const containerId = await startContainer(daemon.cri, pod, containerConfig('target', image));
  const must = async <T>(rpc: string, req: object): Promise<T> => {
    const out = await cri.call(rpc, req, ANSWER_DEADLINE_MS);
    assert.equal(out.code, status.OK, `${rpc}: ${status[out.code]} ${out.details}`);
    return out.response as T;
  };
  const execUrl = async (cmd: string[], flags: Record<string, boolean> = {}): Promise<string> =>
    (
      await must<{ url: string }>('Exec', {
        container_id: containerId,
        cmd,
        stdout: true,
        ...flags,
      })
    ).url;
  const streamingPort = Number(new URL(await execUrl(['true'])).port);
  const metricsUrl = parseLog(daemon.output)
    .filter((e) => e.msg === 'serving metrics')
    .at(-1)?.url;
  assert.equal(typeof metricsUrl, 'string', 'berthd logged no "serving metrics" line');
  return {
    daemon,
    cri,
    containerId,
    podId: pod.id,
    streamingPort,
    metricsPort: Number(new URL(String(metricsUrl)).port),
    execUrl,
    portForwardUrl: async (ports) =>
      (await must<{ url: string }>('PortForward', { pod_sandbox_id: pod.id, port: ports })).url,
    assertServing: async (where) => {
      const proc = daemon.proc;
      assert.ok(proc && proc.exitCode === null && proc.signalCode === null, `berthd is gone after ${where}`);
      const out = await cri.call('Version', {}, ANSWER_DEADLINE_MS);
      if (out.noAnswer) cri.reconnect();
      assert.equal(out.code, status.OK, `Version after ${where}: ${status[out.code]} ${out.details}`);
    },
    openFds: async () => (await readdir(`/proc/${daemon.proc?.pid ?? 0}/fd`).catch(() => [])).length,
  };
}

/**
 * `count` TCP connections to 127.0.0.1:`port` that send nothing, opened a few at a time; those the
 * server refuses or closes are counted as such, not retried. Close them with closeAll.
 */
export async function holdConnections(port: number, count: number): Promise<Socket[]> {
  const sockets: Socket[] = [];
  const batch = 50;
  for (let i = 0; i < count; i += batch) {
    const opened = Array.from(
      { length: Math.min(batch, count - i) },
      () =>
        new Promise<Socket>((resolve) => {
          const socket = connect(port, '127.0.0.1');
          socket.on('error', () => undefined);
          socket.once('connect', () => resolve(socket));
          socket.once('close', () => resolve(socket));
        }),
    );
    sockets.push(...(await Promise.all(opened)));
  }
  return sockets;
}

export function closeAll(sockets: readonly Socket[]): void {
  for (const socket of sockets) socket.destroy();
}
