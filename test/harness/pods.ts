/**
 * The CRI calls tests make over and over to set up and look at pods and containers, each with the
 * checks every caller wants (an id of berth's form, a verbose status that has its info).
 */
import assert from 'node:assert/strict';
import type { ContainerVerboseInfo } from '../../src/container/types.js';
import type { SandboxVerboseInfo } from '../../src/sandbox/types.js';
import type { CriClient } from './client.js';
import { BOUND_SCALE } from './bounds.js';
import { waitFor } from './wait.js';
import type { ExecResponse, WireContainerStatus } from './wire.js';

/** berth's pod and container ids: 64 hex digits. */
const ID = /^[0-9a-f]{64}$/;

/** A running pod and the config that made it, which CreateContainer wants again. */
export interface Pod {
  id: string;
  config: Record<string, unknown>;
}

/** RunPodSandbox; the new pod's id. */
export async function runPodSandbox(
  cri: CriClient,
  config: Record<string, unknown>,
  runtimeHandler = '',
): Promise<string> {
  const res = await cri.call<{ pod_sandbox_id: string }>('RunPodSandbox', {
    config,
    runtime_handler: runtimeHandler,
  });
  assert.match(res.pod_sandbox_id, ID);
  return res.pod_sandbox_id;
}

export async function runPod(cri: CriClient, config: Record<string, unknown>): Promise<Pod> {
  return { id: await runPodSandbox(cri, config), config };
}

/** The JSON berth puts under info["info"] of a verbose status; `what` names the status in a failure. */
export function verboseInfoOf<Info>(res: { info: Record<string, string> }, what: string): Info {
  const info = res.info.info;
  assert.ok(info, `verbose ${what} has no info`);
  return JSON.parse(info) as Info;
}

/** A verbose PodSandboxStatus: the status as the caller reads it, and berth's info. */
export async function podStatus<Status>(
  cri: CriClient,
  id: string,
): Promise<{ status: Status; info: SandboxVerboseInfo }> {
  const res = await cri.call<{ status: Status; info: Record<string, string> }>('PodSandboxStatus', {
    pod_sandbox_id: id,
    verbose: true,
  });
  return { status: res.status, info: verboseInfoOf<SandboxVerboseInfo>(res, 'PodSandboxStatus') };
}

export async function stopAndRemovePod(cri: CriClient, id: string): Promise<void> {
  await cri.call('StopPodSandbox', { pod_sandbox_id: id });
  await cri.call('RemovePodSandbox', { pod_sandbox_id: id });
}

/** A ContainerConfig of `name` running `image`, logging to `<name>/0.log` in the pod's log dir. */
export function containerConfig(
  name: string,
  image: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return { metadata: { name, attempt: 0 }, image: { image }, log_path: `${name}/0.log`, ...extra };
}

export async function createContainer(
  cri: CriClient,
  pod: Pod,
  config: Record<string, unknown>,
): Promise<string> {
  const res = await cri.call<{ container_id: string }>('CreateContainer', {
    pod_sandbox_id: pod.id,
    config,
    sandbox_config: pod.config,
  });
  assert.match(res.container_id, ID);
  return res.container_id;
}

/** CreateContainer, then StartContainer. */
export async function startContainer(
  cri: CriClient,
  pod: Pod,
  config: Record<string, unknown>,
): Promise<string> {
  const id = await createContainer(cri, pod, config);
  await cri.call('StartContainer', { container_id: id });
  return id;
}

export async function containerStatus(
  cri: CriClient,
  id: string,
  verbose = false,
): Promise<WireContainerStatus> {
  const res = await cri.call<{ status: WireContainerStatus }>('ContainerStatus', {
    container_id: id,
    verbose,
  });
  return res.status;
}

export async function containerInfo(cri: CriClient, id: string): Promise<ContainerVerboseInfo> {
  const res = await cri.call<{ info: Record<string, string> }>('ContainerStatus', {
    container_id: id,
    verbose: true,
  });
  return verboseInfoOf<ContainerVerboseInfo>(res, 'ContainerStatus');
}

/** Polls ContainerStatus until the container is in `state`; returns that status. */
export async function waitContainerState(
  cri: CriClient,
  id: string,
  state: string,
  timeoutMs = 20_000,
): Promise<WireContainerStatus> {
  let last: WireContainerStatus | undefined;
  await waitFor(async () => {
    last = await containerStatus(cri, id);
    return last.state === state;
  }, timeoutMs).catch((err: unknown) => {
    throw new Error(`${id} not ${state} (last: ${JSON.stringify(last)}): ${String(err)}`);
  });
  assert.ok(last);
  return last;
}

/** ExecSync with a timeout in seconds (10 by default). */
/** `timeout` (s) bounds a hang; by default 10 s, scaled as every bound is in the emulated VM. */
export function execSync(
  cri: CriClient,
  id: string,
  cmd: string[],
  timeout = 10 * BOUND_SCALE,
): Promise<ExecResponse> {
  return cri.call<ExecResponse>('ExecSync', { container_id: id, cmd, timeout });
}

/** What `cmd` wrote to stdout; it must exit 0. */
export async function execText(cri: CriClient, id: string, cmd: string[]): Promise<string> {
  const res = await execSync(cri, id, cmd);
  assert.equal(res.exit_code, 0, `${cmd.join(' ')}: ${res.stderr.toString()}`);
  return res.stdout.toString();
}

/** The ids a test's hostUsers: false pod maps: kubelet gives each such pod 65536. */
export const USERNS_LENGTH = 65536;

export interface UsernsIdMapping {
  container_id: number;
  host_id: number;
  length: number;
}

/** kubelet's one range for such a pod: its ids 0..65535 are the host's from `hostId`. */
export const usernsIdMapping = (hostId: number): UsernsIdMapping[] => [
  { container_id: 0, host_id: hostId, length: USERNS_LENGTH },
];

/** kubelet's namespace options for a hostUsers: false pod, which it copies into each container's config. */
export function usernsNamespaceOptions(hostId: number, pid = 'CONTAINER'): Record<string, unknown> {
  return {
    network: 'POD',
    pid,
    ipc: 'POD',
    userns_options: { mode: 'POD', uids: usernsIdMapping(hostId), gids: usernsIdMapping(hostId) },
  };
}
