import { isIP } from 'node:net';
import type { BerthConfig } from '../config/types.js';
import { InvalidArgumentError } from '../errors.js';
import type { HostFeatures } from '../host/features.js';
import type { NodeState } from '../node/state.js';
import type { RuntimeHandlers } from '../runtime/index.js';
import { BERTH_VERSION } from '../version.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import type { UnaryHandlers } from './handler.js';
import { jsonInfo, type Sent } from './messages.js';

/** The CRI API version kubelet negotiates on; the first field is the kubelet API version it checks. */
const KUBELET_API_VERSION = '0.1.0';

export function runtimeHandlers(config: BerthConfig, node: NodeState, host: HostFeatures) {
  return {
    Version: async () => ({
      version: KUBELET_API_VERSION,
      runtime_name: 'berth',
      runtime_version: BERTH_VERSION,
      runtime_api_version: 'v1',
    }),
    Status: async (req) => {
      const network = await node.networkStatus();
      return {
        status: {
          conditions: [
            { type: 'RuntimeReady', status: true, reason: '', message: '' },
            network.ready
              ? { type: 'NetworkReady', status: true, reason: '', message: '' }
              : {
                  type: 'NetworkReady',
                  status: false,
                  reason: 'NetworkPluginNotReady',
                  message: network.reason,
                },
          ],
        },
        info: req.verbose
          ? {
              ...jsonInfo('config', config),
              ...jsonInfo('podCidrs', node.podCidrs.get()),
              ...jsonInfo('probedFeatures', probedFeatures(host, node.runtimeHandlers)),
            }
          : {},
        runtime_handlers: wireHandlers(node.runtimeHandlers),
        // Strict and Merge are both berth's own reading of the image's /etc/group: any node can.
        features: { supplemental_groups_policy: true, user_namespaces_host_network: false },
      };
    },
    UpdateRuntimeConfig: async (req) => {
      const podCidr = req.runtime_config?.network_config?.pod_cidr ?? '';
      // kubelet sends nothing but a changed, non-empty value; an empty one keeps what was sent before.
      if (podCidr !== '') node.podCidrs.set(podCidrList(POD_CIDR_FIELD, podCidr));
      return {};
    },
    RuntimeConfig: async () => ({
      linux: { cgroup_driver: config.cgroupDriver === 'systemd' ? 'SYSTEMD' : 'CGROUPFS' },
    }),
  } satisfies UnaryHandlers<RuntimeServiceHandlers>;
}

const POD_CIDR_FIELD = 'runtime_config.network_config.pod_cidr';

/** kubelet joins a dual-stack node's CIDRs with commas. */
function podCidrList(field: string, value: string): string[] {
  return value.split(',').map((part) => cidr(field, part.trim()));
}

function cidr(field: string, value: string): string {
  const match = /^([^/]+)\/(\d{1,3})$/.exec(value);
  const family = match?.[1] === undefined ? 0 : isIP(match[1]);
  const maxPrefix = family === 4 ? 32 : 128;
  if (match === null || family === 0 || Number(match[2]) > maxPrefix) {
    throw new InvalidArgumentError(field, `"${value}" is not a CIDR such as 10.244.0.0/24 or fd00::/64`);
  }
  return value;
}

/**
 * Each handler with its features, and the default again under "": kubelet looks a pod's handler up
 * by exact name, and a pod without a RuntimeClass asks for "" (containerd and CRI-O list it too).
 */
function wireHandlers(handlers: RuntimeHandlers): Sent<'RuntimeHandler'>[] {
  const listed = [{ name: '', features: handlers.defaultHandler.features }, ...handlers.all()];
  return listed.map(({ name, features }) => ({
    name,
    features: {
      recursive_read_only_mounts: features.recursiveReadOnlyMounts,
      user_namespaces: features.userNamespaces,
    },
  }));
}

/** The host's features, and each runtime handler's as it probed them when it was opened. */
function probedFeatures(host: HostFeatures, handlers: RuntimeHandlers): object {
  return {
    host,
    runtimeHandlers: Object.fromEntries(handlers.all().map(({ name, features }) => [name, features])),
  };
}
