import { Cni, loopbackNetwork, podIps } from '../cni/index.js';
import type { CniAttachment, CniNetworkList, PortMappingCap } from '../cni/types.js';
import { BerthError, errorMessage } from '../errors.js';
import type { Sandbox, SandboxSpec, StoredNetworking } from '../model/sandbox.js';
import { allSettledOrThrow } from '../kit/settle.js';
import { isPinned } from '../netns/index.js';
import type { NetworkUp } from '../store/index.js';

export const POD_IFNAME = 'eth0';

export function attachmentFor(id: string, netnsPath: string, spec: SandboxSpec): CniAttachment {
  const portMappings: PortMappingCap[] = spec.portMappings
    .filter((p) => p.hostPort > 0)
    .map((p) => ({
      hostPort: p.hostPort,
      containerPort: p.containerPort,
      protocol: p.protocol.toLowerCase() as PortMappingCap['protocol'],
      ...(p.hostIp ? { hostIP: p.hostIp } : {}),
    }));
  const dns = spec.dnsConfig;
  return {
    containerId: id,
    netnsPath,
    ifName: POD_IFNAME,
    args: [
      ['IgnoreUnknown', '1'],
      ['K8S_POD_NAMESPACE', spec.metadata.namespace],
      ['K8S_POD_NAME', spec.metadata.name],
      ['K8S_POD_INFRA_CONTAINER_ID', id],
      ['K8S_POD_UID', spec.metadata.uid],
    ],
    capabilityArgs: {
      portMappings,
      ...(dns ? { dns: { servers: dns.servers, searches: dns.searches, options: dns.options } } : {}),
    },
  };
}

export function storedNetworking(
  attachment: CniAttachment,
  defaultNetwork: CniNetworkList,
): StoredNetworking {
  const networks = [loopbackNetwork(), defaultNetwork];
  return { attachment, networks, addsStarted: networks.map(() => 0) };
}

/**
 * ADD loopback and the default network. The caller has already recorded a DEL for undo, and
 * journals each plugin with `pluginStarting` (network and plugin index) before its ADD runs.
 */
export async function attach(
  cni: Cni,
  stored: StoredNetworking,
  pluginStarting: (network: number, plugin: number) => void,
): Promise<NetworkUp> {
  // loopback and the pod network touch different interfaces, so they are added side by side; both
  // settle before a failure is reported, so the caller's DEL never races an ADD still running.
  const results = await allSettledOrThrow(
    stored.networks.map((network, i) =>
      cni.add(network, stored.attachment, { beforePlugin: (plugin) => pluginStarting(i, plugin) }),
    ),
  );
  const primary = results[results.length - 1];
  const { ip, additionalIps } = primary ? podIps(primary, POD_IFNAME) : { ip: '', additionalIps: [] };
  return { results, ip, additionalIps };
}

/**
 * DEL every network with the stored config and results. Attempted even when
 * the netns is gone (after a reboot), because host-local keeps its leases on disk.
 */
export async function detach(cni: Cni, sandbox: Pick<Sandbox, 'cniConfig' | 'cniResults'>): Promise<void> {
  const stored = sandbox.cniConfig;
  if (!stored) return;
  const results = sandbox.cniResults ?? [];
  // A pin that is no longer a mount (after a reboot) is a plain file: plugins reject it as a netns
  // and would keep the lease. The spec allows an empty netns on DEL: clean the host side only.
  const netnsMounted = stored.attachment.netnsPath !== '' && (await isPinned(stored.attachment.netnsPath));
  const attachment = netnsMounted ? stored.attachment : { ...stored.attachment, netnsPath: '' };
  // Each network was attached on its own, so they are detached side by side. A plugin whose ADD
  // never started needs no DEL (its binary may be the very thing missing); one that started still
  // gets its DEL, and while that fails, so does the pod's removal, naming the plugin.
  const outcomes = await Promise.allSettled(
    stored.networks.map((network, i) =>
      cni.del(network, attachment, results[i], stored.addsStarted?.[i] ?? network.plugins.length),
    ),
  );
  const failures = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as unknown] : []));
  if (failures.length === 1) throw failures[0];
  if (failures.length > 1) throw new BerthError(failures.map(errorMessage).join('; '));
}
