import type { BerthConfig } from '../config/types.js';
import type { SandboxService } from '../sandbox/service.js';
import { BERTH_VERSION } from '../version.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import type { UnaryHandlers } from './handler.js';
import { jsonInfo } from './messages.js';
import { RUNTIME_HANDLERS } from './sandbox.js';

/** The CRI API version kubelet negotiates on; the first field is the kubelet API version it checks. */
const KUBELET_API_VERSION = '0.1.0';

export function runtimeHandlers(config: BerthConfig, sandboxes: SandboxService) {
  return {
    Version: async () => ({
      version: KUBELET_API_VERSION,
      runtime_name: 'berth',
      runtime_version: BERTH_VERSION,
      runtime_api_version: 'v1',
    }),
    Status: async (req) => {
      const network = await sandboxes.networkStatus();
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
        info: jsonInfo('config', req.verbose ? config : undefined),
        runtime_handlers: RUNTIME_HANDLERS.map((name) => ({
          name,
          features: { recursive_read_only_mounts: true, user_namespaces: false },
        })),
        features: { supplemental_groups_policy: false, user_namespaces_host_network: false },
      };
    },
    RuntimeConfig: async () => ({
      linux: { cgroup_driver: config.cgroupDriver === 'systemd' ? 'SYSTEMD' : 'CGROUPFS' },
    }),
  } satisfies UnaryHandlers<RuntimeServiceHandlers>;
}
