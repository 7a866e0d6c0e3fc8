/**
 * CNI data shapes (spec 0.3.0 – 1.1.0). Only the fields berth reads or writes are typed; plugin
 * configs and results are otherwise passed through untouched, so unknown keys survive.
 */

/** One plugin entry of a network list. Plugin-specific keys (bridge, ipam, ...) ride along. */
export interface CniPluginConf {
  type: string;
  name?: string;
  cniVersion?: string;
  /** Which runtime-supplied capability args (portMappings, dns, ...) this plugin wants. */
  capabilities?: Record<string, boolean>;
  [key: string]: unknown;
}

export interface CniNetworkList {
  cniVersion: string;
  name: string;
  plugins: CniPluginConf[];
  disableCheck?: boolean;
}

export interface CniInterface {
  name: string;
  mac?: string;
  /** Netns path for interfaces inside the sandbox; absent/empty for host-side interfaces. */
  sandbox?: string;
  /** 1.1.0 additions. */
  mtu?: number;
  socketPath?: string;
  pciID?: string;
}

export interface CniIpConfig {
  /** CIDR notation, e.g. 10.88.0.5/16. */
  address: string;
  gateway?: string;
  /** Index into `interfaces`. */
  interface?: number;
  /** Only in 0.3.x/0.4.0 results; 1.0.0 dropped it. */
  version?: '4' | '6';
}

export interface CniRoute {
  dst: string;
  gw?: string;
  /** 1.1.0 additions. */
  mtu?: number;
  advmss?: number;
  priority?: number;
  table?: number;
  scope?: number;
}

export interface CniDns {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
}

export interface CniResult {
  cniVersion: string;
  interfaces?: CniInterface[];
  ips?: CniIpConfig[];
  routes?: CniRoute[];
  dns?: CniDns;
}

/** The `portMappings` capability (CONVENTIONS.md), as consumed by the portmap plugin. */
export interface PortMappingCap {
  hostPort: number;
  containerPort: number;
  protocol: 'tcp' | 'udp' | 'sctp';
  hostIP?: string;
}

/** The `dns` capability (CONVENTIONS.md). */
export interface DnsCap {
  servers?: string[];
  searches?: string[];
  options?: string[];
}

export interface CniCapabilityArgs {
  portMappings?: PortMappingCap[];
  dns?: DnsCap;
}

/** Everything that identifies one attachment of a sandbox to a network. */
export interface CniAttachment {
  containerId: string;
  netnsPath: string;
  ifName: string;
  /** Becomes CNI_ARGS (`K=V;K=V`), e.g. K8S_POD_NAMESPACE. */
  args: Array<[string, string]>;
  capabilityArgs: CniCapabilityArgs;
}
