/**
 * What the hostile CRI suites' rpc tables are made of (test/e2e/hostile-cri-*.test.ts, run by
 * hostile-fuzz.ts): the fields of each rpc and what they must refuse, which file fuzzes which rpcs,
 * and what an accepted pod or container must echo before it goes away.
 */
import type { status } from '@grpc/grpc-js';
import { summarize, type CallOutcome } from './hostile.js';
import type { HostileCri, WireCtr, WirePod } from './hostile-cri.js';

/** Which test file fuzzes which rpcs. Every rpc the proto declares is in exactly one group. */
export const HOSTILE_RPC_GROUPS = {
  sandbox: [
    'Version',
    'Status',
    'RuntimeConfig',
    'UpdateRuntimeConfig',
    'RunPodSandbox',
    'PodSandboxStatus',
    'ListPodSandbox',
    'StreamPodSandboxes',
    'PodSandboxStats',
    'ListPodSandboxStats',
    'StreamPodSandboxStats',
    'UpdatePodSandboxResources',
    'ListMetricDescriptors',
    'ListPodSandboxMetrics',
    'StreamPodSandboxMetrics',
    'GetContainerEvents',
    'StopPodSandbox',
    'RemovePodSandbox',
  ],
  container: [
    'CreateContainer',
    'StartContainer',
    'StopContainer',
    'RemoveContainer',
    'ListContainers',
    'StreamContainers',
    'ContainerStatus',
    'UpdateContainerResources',
    'ReopenContainerLog',
    'ContainerStats',
    'ListContainerStats',
    'StreamContainerStats',
    'CheckpointContainer',
  ],
  exec: ['ExecSync', 'Exec', 'Attach', 'PortForward'],
  image: ['ImageStatus', 'ListImages', 'StreamImages', 'PullImage', 'RemoveImage', 'ImageFsInfo'],
} as const;
export type HostileGroup = keyof typeof HOSTILE_RPC_GROUPS;

export type Kind =
  | 'string'
  | 'podId'
  | 'ctrId'
  /** An image berthd looks up locally (status, list, remove, a container's image). */
  | 'imageLocal'
  /** An image berthd would pull: only references to 127.0.0.1 or malformed ones. */
  | 'imagePull'
  | 'int64'
  | 'int32'
  | 'uint32'
  | 'enum'
  | 'bool'
  | 'bytes'
  | 'mapKey'
  | 'mapValue'
  | 'map'
  | 'list';

export interface FieldSpec {
  path: string;
  kind: Kind;
  /** Values this field must never accept: an OK for one of them is a failure. */
  mustReject?: (value: unknown) => boolean;
  /** For 'list': the element repeated. */
  item?: unknown;
  /** Codes this field's cases may answer besides TYPED_CODES and the rpc's own. */
  extraCodes?: readonly status[];
  /** Stored or ignored by berth, in an rpc where each accepted value costs a pod: a few strings. */
  light?: boolean;
  /** A path set to null in the base first: a legacy field only counts without its successor. */
  unset?: string;
}

export interface RpcSpec {
  rpc: string;
  /** A valid request; called for every case, so names stay unique. */
  base: () => Record<string, unknown>;
  fields: FieldSpec[];
  /** An accepted value costs a pod or a container: the reduced string set, fewer at once. */
  costly?: boolean;
  /** May stop or remove the targets: one case at a time, targets rebuilt after each. */
  destructive?: boolean;
  /** One case at a time: concurrent cases would share work and so each other's outcomes. */
  serial?: boolean;
  /** Codes this rpc may answer besides TYPED_CODES. */
  extraCodes?: readonly status[];
  setup?: () => Promise<void>;
  teardown?: () => Promise<void>;
  /** Before every case of a field: e.g. a fresh running victim for StopContainer's timeout. */
  beforeCase?: (field: FieldSpec | null) => Promise<void>;
  /**
   * After an OK: remove what the request created, check it round-trips. Returns the problems
   * found; it throws when the cleanup itself failed.
   */
  accepted?: (req: Record<string, unknown>, out: CallOutcome) => Promise<string[]>;
}

export interface CaseRef {
  rpc: string;
  field: string;
  value: string;
}

// --- Predicates for mustReject -----------------------------------------------------------------

export const str = (v: unknown): string => (typeof v === 'string' ? v : '');
export const hasControl = (v: string): boolean => [...v].some((c) => c.charCodeAt(0) < 0x20 || c === '\x7f');
/** Lone surrogates do not survive UTF-8 on the wire; comparing them would blame the transport. */
const wellFormed = (v: string): boolean =>
  !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(v);
export const notAbsoluteClean = (v: unknown): boolean =>
  str(v) !== '' && (!str(v).startsWith('/') || str(v).split('/').includes('..') || hasControl(str(v)));
/** What no pod's or container's metadata.name may be: it names a directory. */
export const badName = (v: unknown): boolean =>
  str(v) === '' || hasControl(str(v)) || /[/\\]/.test(str(v)) || v === '.' || v === '..';

export const SECURITY_CONTEXT = 'config.linux.security_context';

// --- What accepted requests created ------------------------------------------------------------

/** The parts of a pod or container config that status calls echo. */
interface Echo {
  metadata: { name: string };
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

const sameMap = (a: Record<string, string>, b: Record<string, string>): boolean =>
  JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort());
const comparable = (m: Record<string, string>): boolean =>
  Object.entries(m).every(([k, v]) => k !== '__proto__' && wellFormed(k) && wellFormed(v));

/** What a created pod or container reports back must be what the request sent. */
function compareEcho(rpc: string, sent: Partial<Echo> | undefined, got: Echo): string[] {
  // Raw wire bytes that happened to decode to a valid request carry nothing to compare.
  if (!sent) return [];
  const problems: string[] = [];
  for (const key of ['labels', 'annotations'] as const) {
    const map = sent[key] ?? {};
    if (comparable(map) && !sameMap(map, got[key])) problems.push(`${rpc} ${key} differ from the request's`);
  }
  const name = sent.metadata?.name ?? '';
  if (wellFormed(name) && got.metadata.name !== name) {
    problems.push(`${rpc} metadata.name is ${summarize(got.metadata.name)}`);
  }
  return problems;
}

/** RunPodSandbox's `accepted`: the pod echoes its config and goes away through the API. */
export function podRoundTrip(cri: HostileCri): NonNullable<RpcSpec['accepted']> {
  return async (req, out) => {
    const id = (out.response as { pod_sandbox_id: string }).pod_sandbox_id;
    const got = await cri.must<{ status: WirePod }>('PodSandboxStatus', { pod_sandbox_id: id });
    const problems = compareEcho('PodSandboxStatus', req.config as Partial<Echo> | undefined, got.status);
    await cri.must('RemovePodSandbox', { pod_sandbox_id: id });
    if (await cri.maybe('PodSandboxStatus', { pod_sandbox_id: id }))
      problems.push('pod still there after RemovePodSandbox');
    return problems;
  };
}

/** CreateContainer's `accepted`: the container echoes its config and goes away through the API. */
export function containerRoundTrip(cri: HostileCri): NonNullable<RpcSpec['accepted']> {
  return async (req, out) => {
    const id = (out.response as { container_id: string }).container_id;
    const got = await cri.must<{ status: WireCtr }>('ContainerStatus', { container_id: id });
    const problems = compareEcho('ContainerStatus', req.config as Partial<Echo> | undefined, got.status);
    await cri.must('RemoveContainer', { container_id: id });
    if (await cri.maybe('ContainerStatus', { container_id: id }))
      problems.push('container still there after RemoveContainer');
    return problems;
  };
}
