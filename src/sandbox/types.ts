/** What the sandbox service reports and filters by; the stored pod itself is src/model/sandbox.ts. */
import type { NamespaceOptions, PodMetadata, PodUserNamespaceSpec } from '../model/sandbox.js';

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
  hostNetwork: boolean;
  networkState: string;
  cniResult: unknown;
  sandboxDir: string;
  cgroupParent: string;
}

export interface SandboxFilter {
  id?: string;
  state?: SandboxStateName;
  labelSelector?: Record<string, string>;
}
