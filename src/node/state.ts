/**
 * What berth knows of the node rather than of any pod: the pod CIDRs kubelet sent, the runtime
 * handlers pods may name, and whether the pod network is ready. CRI's Status and
 * UpdateRuntimeConfig read and set it; no service holds it.
 */
import { loadUsableNetwork } from '../cni/readiness.js';
import type { BerthConfig } from '../config/types.js';
import type { Logger } from '../log.js';
import type { RuntimeHandlers } from '../runtime/index.js';

export type NetworkStatus = { ready: true } | { ready: false; reason: string };

/**
 * The node's pod CIDRs as kubelet last sent them (UpdateRuntimeConfig). Only recorded and shown:
 * the CNI config in the conf dir, not berth, decides pod addresses.
 */
export class PodCidrs {
  private current: readonly string[] = [];

  constructor(private readonly logger: Logger) {}

  get(): readonly string[] {
    return this.current;
  }

  set(cidrs: readonly string[]): void {
    this.current = [...cidrs];
    this.logger.info({ podCidrs: this.current }, 'pod CIDR updated');
  }
}

export class NodeState {
  /** What kubelet sent with UpdateRuntimeConfig. */
  readonly podCidrs: PodCidrs;

  constructor(
    private readonly config: Pick<BerthConfig, 'cniConfDir' | 'cniBinDirs'>,
    /** The configured runtime handlers; a pod may name any of them, or "" for the default. */
    readonly runtimeHandlers: RuntimeHandlers,
    logger: Logger,
  ) {
    this.podCidrs = new PodCidrs(logger);
  }

  /**
   * Ready when a default CNI network loads from the conf dir and every plugin it runs is installed:
   * the rule RunPodSandbox applies before it attaches a pod.
   */
  async networkStatus(): Promise<NetworkStatus> {
    const loaded = await loadUsableNetwork(this.config.cniConfDir, this.config.cniBinDirs);
    return loaded.network ? { ready: true } : { ready: false, reason: loaded.reason };
  }
}
