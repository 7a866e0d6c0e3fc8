/**
 * Rows as the daemon sees them. The SQLite column layout lives in state/; src/store maps
 * between the two so nothing else touches SQL.
 */

/** CREATING doubles as a journal entry: a row left in CREATING after a crash is rolled back at start. */
export type SandboxState = 'CREATING' | 'READY' | 'NOTREADY';

/**
 * Where the pod's CNI attachment stands. ADDING is written before the first ADD so that a crash
 * mid-ADD still leads to a DEL; TORN_DOWN only after every DEL succeeded.
 */
export type NetworkState = 'NONE' | 'ADDING' | 'READY' | 'TORN_DOWN';

export interface SandboxRow {
  id: string;
  name: string;
  namespace: string;
  uid: string;
  attempt: number;
  state: SandboxState;
  /** Name of the last RunPodSandbox step begun; for repair logs after a crash. */
  step: string;
  /** The PodSandboxConfig as received, JSON (proto-loader object form, keepCase). */
  configJson: string;
  runtimeHandler: string;
  hostNetwork: boolean;
  /** The SandboxKey: path of the pinned netns file. Null for host-network pods. */
  netnsPath: string | null;
  networkState: NetworkState;
  /** JSON: the CNI network lists and attachment used for ADD, kept so DEL works after a restart. */
  cniConfigJson: string | null;
  /** JSON: the CNI results of the ADDs (loopback and default network). */
  cniResultJson: string | null;
  ip: string;
  additionalIps: string[];
  /** Nanoseconds since the epoch, as a decimal string: int64 ns does not fit a JS number. */
  createdAt: string;
  /** Host pid of the infra process, 0 when none is running. */
  pid: number;
  cgroupParent: string;
  /** Per-sandbox directory: OCI bundle, resolv.conf, hostname. */
  sandboxDir: string;
}

/** Fields to change in a sandbox row; the id is the row's identity and never changes. */
export type SandboxPatch = Partial<Omit<SandboxRow, 'id'>>;
