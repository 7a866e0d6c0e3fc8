/** What the sandbox service reports and filters by; the stored pod itself is src/model/sandbox.ts. */
import type { NamespaceOptions, PodMetadata, PodResources, PodUserNamespaceSpec } from '../model/sandbox.js';

export type SandboxStateName = 'SANDBOX_READY' | 'SANDBOX_NOTREADY';

/** What PodSandboxStatus and ListPodSandbox report; src/cri maps it to the wire form. */
export interface SandboxView {
  id: string;
  metadata: PodMetadata;
  state: SandboxStateName;
  createdAt: string;
  ip: string;
  additionalIps: string[];
  namespaces: NamespaceOptions;
  /** The pod's own user namespace's mappings; null: the host's. */
  userNamespace: PodUserNamespaceSpec | null;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  runtimeHandler: string;
}

export interface SandboxVerboseInfo {
  sandboxKey: string | null;
  pid: number;
  /** The infra's start time (clock ticks after boot), which with `pid` names it; 0 without one. */
  infraStartTime: number;
  /** Why the pod went NOTREADY though no StopPodSandbox asked (its infra died); '' otherwise. */
  reason: string;
  hostNetwork: boolean;
  networkState: string;
  cniResult: unknown;
  sandboxDir: string;
  cgroupParent: string;
  /** The cgroup parent berth made for the pod; '' when kubelet gave one (or for older pods). */
  podCgroup: string;
  /** What the pod last asked for its cgroup (PodSandboxStatus has no field for it). */
  resources: PodResources | null;
}

export interface SandboxFilter {
  id?: string;
  state?: SandboxStateName;
  labelSelector?: Record<string, string>;
}
