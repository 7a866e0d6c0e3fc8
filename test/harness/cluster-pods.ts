/**
 * What the cluster scenario files do through kubectl and, beside it, through berth's own socket:
 * apply objects, wait for pods, exec in them, and find a pod's sandbox and containers in berth.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import type { CriClient } from './client.js';
import { waitFor } from './wait.js';

/** kubectl against the cluster: its stdout; it must exit 0. */
export type Kubectl = (args: string[], opts?: { input?: string; timeoutMs?: number }) => Promise<string>;

/** As much of a Pod as the scenarios read. */
export interface PodObject {
  metadata: { name: string; namespace: string; uid: string };
  status: {
    phase?: string;
    containerStatuses?: ContainerStatusObject[];
    conditions?: { type: string; status: string }[];
  };
}

export interface ContainerStatusObject {
  name: string;
  restartCount: number;
  containerID?: string;
  ready: boolean;
  state?: { running?: object; waiting?: { reason?: string }; terminated?: { reason?: string } };
  user?: { linux?: { uid: number; gid: number; supplementalGroups?: number[] } };
  /** What the kubelet last saw applied to the running container (in-place resize). */
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
}

/** Applies `objects` in one call (a v1 List), as a user's `kubectl apply -f` of a manifest does. */
export async function applyObjects(kubectl: Kubectl, objects: readonly object[]): Promise<void> {
  await kubectl(['apply', '-f', '-'], {
    input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }),
  });
}

export async function getPod(kubectl: Kubectl, name: string, namespace = 'default'): Promise<PodObject> {
  return JSON.parse(await kubectl(['get', 'pod', name, '-n', namespace, '-o', 'json'])) as PodObject;
}

/**
 * Waits until pod `name` is Running with every container ready; a pod stuck (ImagePullBackOff,
 * CreateContainerError) fails with its status and events, which say why.
 */
export async function waitPodReady(
  kubectl: Kubectl,
  name: string,
  timeoutMs: number,
  namespace = 'default',
): Promise<PodObject> {
  let last: PodObject | undefined;
  await waitFor(
    async () => {
      last = await getPod(kubectl, name, namespace).catch(() => undefined);
      const statuses = last?.status.containerStatuses ?? [];
      return last?.status.phase === 'Running' && statuses.length > 0 && statuses.every((c) => c.ready);
    },
    timeoutMs,
    { pollMs: 500, what: `pod ${name} Running and ready` },
  ).catch(async (err: unknown) => {
    const events = await kubectl([
      'get',
      'events',
      '-n',
      namespace,
      '--field-selector',
      `involvedObject.name=${name}`,
      '-o',
      'custom-columns=REASON:.reason,MESSAGE:.message',
    ]).catch((e: unknown) => String(e));
    throw new Error(`${String(err)}; status: ${JSON.stringify(last?.status)}; events:\n${events}`);
  });
  assert.ok(last);
  return last;
}

/** `kubectl exec` of `cmd` (no shell unless `cmd` starts one); its stdout. */
export function kubectlExec(
  kubectl: Kubectl,
  pod: string,
  cmd: readonly string[],
  opts: { container?: string; namespace?: string } = {},
): Promise<string> {
  const container = opts.container === undefined ? [] : ['-c', opts.container];
  return kubectl(['exec', '-n', opts.namespace ?? 'default', pod, ...container, '--', ...cmd]);
}

/** A field of /proc/self/status in a container (`CapEff`, `Seccomp`), as the container sees it. */
export async function procStatusField(
  kubectl: Kubectl,
  pod: string,
  field: string,
  container?: string,
): Promise<string> {
  const text = await kubectlExec(kubectl, pod, ['cat', '/proc/self/status'], { container });
  const line = text.split('\n').find((l) => l.startsWith(`${field}:`));
  assert.ok(line, `no ${field} in /proc/self/status of ${pod}:\n${text}`);
  return line.slice(field.length + 1).trim();
}

/** The runtime's id of a container from its kubelet status (`berth://<id>`). */
export function runtimeId(status: ContainerStatusObject): string {
  const id = status.containerID ?? '';
  const at = id.indexOf('://');
  assert.ok(at > 0, `container ${status.name} has no runtime id yet: ${JSON.stringify(status)}`);
  return id.slice(at + 3);
}

export function containerStatusOf(pod: PodObject, name: string): ContainerStatusObject {
  const found = pod.status.containerStatuses?.find((c) => c.name === name);
  assert.ok(found, `pod ${pod.metadata.name} has no status of container ${name}`);
  return found;
}

export interface BerthSandbox {
  id: string;
  state: string;
  runtime_handler: string;
  metadata: { name: string; attempt: number };
}

export interface BerthContainer {
  id: string;
  pod_sandbox_id: string;
  state: string;
  metadata: { name: string; attempt: number };
}

/** The sandboxes berth has for the pod of kubelet uid `uid`, ready or not. */
export async function sandboxesOf(cri: CriClient, uid: string): Promise<BerthSandbox[]> {
  const res = await cri.call<{ items: BerthSandbox[] }>('ListPodSandbox', {
    filter: { label_selector: { 'io.kubernetes.pod.uid': uid } },
  });
  return res.items;
}

/** The containers berth has for the pod of kubelet uid `uid`, in any state. */
export async function containersOf(cri: CriClient, uid: string): Promise<BerthContainer[]> {
  const res = await cri.call<{ containers: BerthContainer[] }>('ListContainers', {
    filter: { label_selector: { 'io.kubernetes.pod.uid': uid } },
  });
  return res.containers;
}

/** A container's pid on the host, from berth's verbose ContainerStatus. */
export async function containerPid(cri: CriClient, id: string): Promise<number> {
  const res = await cri.call<{ info: Record<string, string> }>('ContainerStatus', {
    container_id: id,
    verbose: true,
  });
  const pid = (JSON.parse(res.info.info ?? '{}') as { pid?: number }).pid ?? 0;
  assert.ok(pid > 0, `container ${id} has no pid: ${res.info.info}`);
  return pid;
}

/**
 * The cgroup of process `pid` in `controller`'s hierarchy (v1) or the unified one: its path below
 * the hierarchy's root, from /proc/<pid>/cgroup.
 */
export async function cgroupOfProcess(pid: number, controller: string): Promise<string> {
  const lines = (await readFile(`/proc/${pid}/cgroup`, 'utf8')).trim().split('\n');
  const parts = lines.map((l) => l.split(':'));
  const v1 = parts.find(([, controllers]) => (controllers ?? '').split(',').includes(controller));
  const v2 = parts.find(([hid]) => hid === '0');
  const path = (v1 ?? v2)?.[2];
  assert.ok(path, `process ${pid} is in no ${controller} cgroup: ${lines.join('; ')}`);
  return path;
}
