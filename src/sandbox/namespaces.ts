/**
 * Which namespaces a pod holds and where: an infra process holds them when the pod runs one;
 * otherwise its ipc and uts namespaces are pinned as files in the sandbox dir (and its netns in
 * the netns dir, as for every pod). A pod of its own user namespace has it pinned there too. Every path is derived from the record, so the teardown of a
 * crashed start finds what it must unmount without anything else having been written.
 */
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { BerthConfig } from '../config/types.js';
import type { Sandbox, SandboxSpec } from '../model/sandbox.js';
import type { PodNamespacePaths } from '../oci/container-input.js';

const PIN_DIR = 'ns';

/** Names of berth's netns pins start with this, so restart repair can tell ours from others'. */
export const NETNS_PREFIX = 'berth-';

type PinOwner = Pick<Sandbox, 'infra' | 'hostNetwork' | 'sandboxDir' | 'spec'>;

/**
 * An infra process only where the pod needs one: a pid namespace its containers share must have a
 * process to live in. `always` keeps one for every pod, as berth did before it could pin them.
 */
export function needsInfra(mode: BerthConfig['podInfra'], spec: SandboxSpec): boolean {
  return mode === 'always' || spec.namespaces.pid === 'POD';
}

/**
 * The pod's user namespace pin, and the ipc and uts pins of a pod without infra; null where it has
 * the host's namespace or an infra.
 */
export function namespacePins(sandbox: PinOwner): {
  user: string | null;
  ipc: string | null;
  uts: string | null;
} {
  const dir = join(sandbox.sandboxDir, PIN_DIR);
  const user = sandbox.spec.userNamespace === null ? null : join(dir, 'user');
  if (sandbox.infra) return { user, ipc: null, uts: null };
  return {
    user,
    ipc: sandbox.spec.namespaces.ipc === 'NODE' ? null : join(dir, 'ipc'),
    // A host-network pod keeps the host's uts namespace, as with an infra: its hostname is the node's.
    uts: sandbox.hostNetwork ? null : join(dir, 'uts'),
  };
}

/** Every pin in the sandbox dir, for teardown and liveness checks. */
export function pinPaths(sandbox: PinOwner): string[] {
  const pins = namespacePins(sandbox);
  return [pins.ipc, pins.uts, pins.user].filter((path): path is string => path !== null);
}

/**
 * Every namespace pin of the pod that is a mount while it runs: its netns, its user namespace
 * and, without infra, ipc and uts.
 */
export function namespaceMounts(sandbox: PinOwner & Pick<Sandbox, 'netnsPath'>): string[] {
  return sandbox.netnsPath === null ? pinPaths(sandbox) : [sandbox.netnsPath, ...pinPaths(sandbox)];
}

/** Where the pin files go; made before they are. */
export function pinDir(sandboxDir: string): string {
  return join(sandboxDir, PIN_DIR);
}

/**
 * A pod of its own network always gets its own UTS namespace, named like the host when kubelet
 * sends no hostname: its containers must never be able to rename the node. '' for host network.
 */
export function podHostname(sandbox: Pick<Sandbox, 'hostNetwork' | 'spec'>): string {
  return sandbox.hostNetwork ? '' : sandbox.spec.hostname || hostname();
}

/** What the pod's containers join: the infra's /proc entries, or the pins. */
export function podNamespacePaths(sandbox: PinOwner & Pick<Sandbox, 'pid' | 'netnsPath'>): PodNamespacePaths {
  const pins = namespacePins(sandbox);
  const mappings = sandbox.spec.userNamespace;
  // The pin, also with an infra (which joined it): one path for every container of the pod.
  const user = pins.user === null || mappings === null ? null : { path: pins.user, ...mappings };
  if (sandbox.infra) {
    const infra = (type: string): string => `/proc/${sandbox.pid}/ns/${type}`;
    return { network: sandbox.netnsPath, ipc: infra('ipc'), uts: infra('uts'), pid: infra('pid'), user };
  }
  return { network: sandbox.netnsPath, ipc: pins.ipc, uts: pins.uts, pid: null, user };
}
