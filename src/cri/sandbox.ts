import { InvalidArgumentError } from '../errors.js';
import { nowNanos } from '../time.js';
import type { ContainerService } from '../container/service.js';
import type { SandboxService } from '../sandbox/service.js';
import type { PodUserNamespaceSpec, PortMapping, Protocol, SandboxSpec } from '../model/sandbox.js';
import type { IdMapping } from '../oci/userns.js';
import type { SandboxFilter, SandboxStateName, SandboxView } from '../sandbox/types.js';
import type { RuntimeServiceHandlers } from './generated/runtime/v1/RuntimeService.js';
import { toWireContainerStatus } from './container-status.js';
import type { UnaryHandlers } from './handler.js';
import { jsonInfo, type Received, type Sent } from './messages.js';
import { toPodResources } from './sandbox-resources.js';
import { toPodUserNamespace } from './userns.js';
import {
  int64Id,
  ipAddress,
  namespaceMode,
  oneOf,
  optionalAbsolutePath,
  optionalCgroupParent,
  optionalHostname,
  port,
  boundedMap,
  requireId,
  requireSafeName,
  sysctlName,
  dnsSearchDomain,
  dnsOption,
  noControlChars,
  boundedList,
  selectorFilter,
  supplementalGroups,
  supplementalGroupsPolicy,
} from './validate.js';

export function sandboxHandlers(sandboxes: SandboxService, containers: ContainerService) {
  return {
    RunPodSandbox: async (req) => {
      // The service checks the runtime handler: it looks it up once for the whole run.
      const spec = toSandboxSpec(req, sandboxes.userNamespacePods(req.runtime_handler));
      const linux = req.config?.linux;
      const resources = toPodResources('config.linux.', linux?.resources, linux?.overhead);
      return { pod_sandbox_id: await sandboxes.run(spec, resources) };
    },
    StopPodSandbox: async (req) => {
      await sandboxes.stop(requireId('pod_sandbox_id', req.pod_sandbox_id));
      return {};
    },
    RemovePodSandbox: async (req) => {
      await sandboxes.remove(requireId('pod_sandbox_id', req.pod_sandbox_id));
      return {};
    },
    PodSandboxStatus: async (req) => {
      // Taken first, so that what is read below is at least this new: the kubelet's evented PLEG
      // keeps whichever of this answer and an event is newer.
      const timestamp = nowNanos();
      const { view, info } = await sandboxes.status(
        requireId('pod_sandbox_id', req.pod_sandbox_id),
        req.verbose,
      );
      // With a timestamp the kubelet's evented PLEG takes these as the pod's containers, all of
      // them (its GetPodStatus then asks no ContainerStatus): an empty list left every new pod
      // ContainerCreating until the kubelet's next full relist, minutes later.
      return {
        status: toWireStatus(view),
        info: jsonInfo('info', info),
        containers_statuses: containers.views.list({ podSandboxId: view.id }).map(toWireContainerStatus),
        timestamp,
      };
    },
    ListPodSandbox: async (req) => {
      const filter = toSandboxFilter(req);
      return { items: filter ? sandboxes.list(filter).map(toWireSandbox) : [] };
    },
  } satisfies UnaryHandlers<RuntimeServiceHandlers>;
}

/** What the pod's handler can run; by default, no pod of its own user namespace. */
export interface SandboxAbilities {
  userNamespaces: boolean;
  /** Why not, when it cannot (the handler's probes say). */
  reason?: string;
  /** The lowest host id a pod's namespace may map (userns_min_host_id); kubelet's 65536 by default. */
  minHostId?: number;
}

/** kubelet's allocator never maps a pod below it: 0..65535 are the host's own users. */
const KUBELET_MIN_HOST_ID = 65536;

export function toSandboxSpec(
  req: Received<'RunPodSandboxRequest'>,
  can: SandboxAbilities = { userNamespaces: false },
): SandboxSpec {
  const config = req.config;
  if (!config) throw new InvalidArgumentError('config', 'is required');
  const md = config.metadata;
  if (!md) throw new InvalidArgumentError('config.metadata', 'is required');
  const linux = config.linux;
  const security = linux?.security_context ?? null;
  const namespaces = toNamespaces(security?.namespace_options ?? null);
  const userNamespace = toPodUserNamespace(NAMESPACE_OPTIONS, security?.namespace_options?.userns_options);
  if (userNamespace !== null && namespaces.network === 'NODE') {
    throw new InvalidArgumentError(
      `${NAMESPACE_OPTIONS}.network`,
      'NODE with a user namespace of its own: berth cannot run those (features.user_namespaces_host_network is false)',
    );
  }
  // Refused rather than run in the host's: that would drop the isolation the pod asked for.
  if (userNamespace !== null && !can.userNamespaces) {
    throw new InvalidArgumentError(
      `${NAMESPACE_OPTIONS}.userns_options.mode`,
      `POD asks for a user namespace of its own, and runtime handler "${req.runtime_handler}" cannot run pods in one (its features.user_namespaces is false${can.reason === undefined ? '' : `: ${can.reason}`})`,
    );
  }
  if (userNamespace !== null) aboveHostUsers(userNamespace, can.minHostId ?? KUBELET_MIN_HOST_ID);
  const runAsGroup = security?.run_as_group
    ? int64Id('config.linux.security_context.run_as_group.value', security.run_as_group.value)
    : null;
  const runAsUser = security?.run_as_user
    ? int64Id('config.linux.security_context.run_as_user.value', security.run_as_user.value)
    : null;
  // Checked, not kept: the infra runs no image's user, and kubelet copies the policy into each
  // container's own context, which decides.
  supplementalGroupsPolicy(
    'config.linux.security_context.supplemental_groups_policy',
    security?.supplemental_groups_policy ?? 'Merge',
  );
  return {
    metadata: {
      name: requireSafeName('config.metadata.name', md.name),
      namespace: requireSafeName('config.metadata.namespace', md.namespace),
      uid: requireSafeName('config.metadata.uid', md.uid),
      attempt: md.attempt,
    },
    hostname: optionalHostname('config.hostname', config.hostname),
    logDirectory: optionalAbsolutePath('config.log_directory', config.log_directory),
    dnsConfig: toDns(config),
    portMappings: toPortMappings(config.port_mappings),
    labels: boundedMap('config.labels', config.labels),
    annotations: boundedMap('config.annotations', config.annotations),
    runtimeHandler: req.runtime_handler,
    cgroupParent: optionalCgroupParent('config.linux.cgroup_parent', linux?.cgroup_parent ?? ''),
    sysctls: toSysctls(linux?.sysctls ?? {}, namespaces),
    namespaces,
    userNamespace,
    security: {
      runAsUser,
      runAsGroup,
      supplementalGroups: supplementalGroups(
        'config.linux.security_context.supplemental_groups',
        security?.supplemental_groups ?? [],
      ),
      privileged: security?.privileged ?? false,
      readonlyRootfs: security?.readonly_rootfs ?? false,
    },
  };
}

const NAMESPACE_OPTIONS = 'config.linux.security_context.namespace_options';

/**
 * A pod's host ids start at `minHostId` or above: below are the host's own users, whose files the
 * pod's root would own. Checked here, not in cri/userns.ts, since a container's copy of the options
 * is only compared with its pod's.
 */
function aboveHostUsers(userns: PodUserNamespaceSpec, minHostId: number): void {
  for (const kind of ['uids', 'gids'] as const) {
    const hostId = userns[kind][0]?.hostId ?? minHostId;
    if (hostId < minHostId) {
      throw new InvalidArgumentError(
        `${NAMESPACE_OPTIONS}.userns_options.${kind}[0].host_id`,
        `${hostId} is below ${minHostId}: host ids below it are the host's own users (userns_min_host_id)`,
      );
    }
  }
}

function toNamespaces(options: Received<'NamespaceOption'> | null): SandboxSpec['namespaces'] {
  const base = NAMESPACE_OPTIONS;
  const mode = (name: 'network' | 'pid' | 'ipc') => {
    const m = namespaceMode(`${base}.${name}`, options?.[name] ?? '');
    // A pod's sandbox is the target that TARGET refers to; it cannot itself target something.
    if (m === 'TARGET') {
      throw new InvalidArgumentError(`${base}.${name}`, 'TARGET is only valid for containers');
    }
    return m;
  };
  return {
    network: mode('network'),
    pid: mode('pid'),
    ipc: mode('ipc'),
    targetId: options?.target_id ?? '',
  };
}

function toDns(config: Received<'PodSandboxConfig'>): SandboxSpec['dnsConfig'] {
  const dns = config.dns_config;
  if (!dns) return null;
  // resolv.conf itself reads 3 nameservers and 6 search domains (glibc before 2.26); these bounds
  // are far above any real pod's and keep one pod's file small.
  type Check = (field: string, value: string) => string;
  const list = (key: string, values: string[], max: number, check: Check) =>
    boundedList(`config.dns_config.${key}`, values, max).map((v, i) =>
      check(`config.dns_config.${key}[${i}]`, v),
    );
  return {
    servers: list('servers', dns.servers, 16, ipAddress),
    searches: list('searches', dns.searches, 64, dnsSearchDomain),
    options: list('options', dns.options, 64, dnsOption),
  };
}

const PROTOCOLS: readonly Protocol[] = ['TCP', 'UDP', 'SCTP'];

function toPortMapping(field: string, p: Received<'PortMapping'>): PortMapping {
  const protocol = oneOf(`${field}.protocol`, p.protocol || 'TCP', PROTOCOLS, 'protocol');
  const containerPort = port(`${field}.container_port`, p.container_port);
  const hostPort = port(`${field}.host_port`, p.host_port);
  if (hostPort > 0 && containerPort === 0) {
    throw new InvalidArgumentError(`${field}.container_port`, 'is required when host_port is set');
  }
  return {
    protocol,
    containerPort,
    hostPort,
    hostIp: p.host_ip ? ipAddress(`${field}.host_ip`, p.host_ip) : '',
  };
}

const IPC_SYSCTLS = new Set([
  'kernel.msgmax',
  'kernel.msgmnb',
  'kernel.msgmni',
  'kernel.sem',
  'kernel.shmall',
  'kernel.shmmax',
  'kernel.shmmni',
  'kernel.shm_rmid_forced',
]);
const UTS_SYSCTLS = new Set(['kernel.domainname', 'kernel.hostname']);

/** More than any pod declares; each mapping becomes iptables rules on the node. */
const MAX_PORT_MAPPINGS = 1024;

function toPortMappings(mappings: Received<'PortMapping'>[]): SandboxSpec['portMappings'] {
  return boundedList('config.port_mappings', mappings, MAX_PORT_MAPPINGS).map((p, i) =>
    toPortMapping(`config.port_mappings[${i}]`, p),
  );
}

/**
 * Only sysctls of a namespace the pod has of its own may be set, as runc checks them: anything
 * else would change the node (kernel.sysrq) and runc refuses it. Refused here, naming the sysctl,
 * rather than as an UNKNOWN failure of the infra container.
 */
function toSysctls(
  sysctls: Record<string, string>,
  namespaces: SandboxSpec['namespaces'],
): Record<string, string> {
  const ownNetwork = namespaces.network !== 'NODE';
  for (const [name, value] of Object.entries(boundedMap('config.linux.sysctls', sysctls))) {
    const field = `config.linux.sysctls["${name}"]`;
    sysctlName(field, name);
    noControlChars(field, value);
    const dotted = name.replaceAll('/', '.');
    const namespaced =
      IPC_SYSCTLS.has(dotted) || dotted.startsWith('fs.mqueue.')
        ? namespaces.ipc !== 'NODE' || `it needs the pod's own IPC namespace`
        : dotted.startsWith('net.')
          ? ownNetwork || `it needs the pod's own network namespace`
          : UTS_SYSCTLS.has(dotted)
            ? ownNetwork || `it needs the pod's own UTS namespace`
            : 'it is not namespaced: setting it would change the node';
    if (namespaced !== true) throw new InvalidArgumentError(field, `cannot be set for a pod: ${namespaced}`);
  }
  return sysctls;
}

const SANDBOX_STATES: readonly SandboxStateName[] = ['SANDBOX_READY', 'SANDBOX_NOTREADY'];

/** null: the filter names a state no pod can be in, so it matches none. */
export function toSandboxFilter(req: Received<'ListPodSandboxRequest'>): SandboxFilter | null {
  const f = req.filter;
  if (!f) return {};
  const selector = selectorFilter(f.label_selector);
  const wanted = f.state?.state;
  const state = SANDBOX_STATES.find((s) => s === wanted);
  if (wanted !== undefined && state === undefined) return null;
  return {
    ...(f.id ? { id: f.id } : {}),
    ...(state ? { state } : {}),
    ...selector,
  };
}

function wireNamespaces(view: SandboxView) {
  return {
    options: {
      network: view.namespaces.network,
      pid: view.namespaces.pid,
      ipc: view.namespaces.ipc,
      target_id: view.namespaces.targetId,
      userns_options: wireUserNamespace(view.userNamespace),
    },
  };
}

/** As kubelet sent it: mode POD with the pod's mappings, or NODE for the host's. */
function wireUserNamespace(userns: SandboxView['userNamespace']) {
  const wire = (mappings: readonly IdMapping[]) =>
    mappings.map((m) => ({ container_id: m.containerId, host_id: m.hostId, length: m.length }));
  return userns === null
    ? { mode: 'NODE' as const, uids: [], gids: [] }
    : { mode: 'POD' as const, uids: wire(userns.uids), gids: wire(userns.gids) };
}

export function toWireStatus(view: SandboxView) {
  return {
    ...toWireSandbox(view),
    network: { ip: view.ip, additional_ips: view.additionalIps.map((ip) => ({ ip })) },
    linux: { namespaces: wireNamespaces(view) },
  } satisfies Sent<'PodSandboxStatus'>;
}

function toWireSandbox(view: SandboxView) {
  return {
    id: view.id,
    metadata: view.metadata,
    state: view.state,
    created_at: view.createdAt,
    labels: view.labels,
    annotations: view.annotations,
    runtime_handler: view.runtimeHandler,
  } satisfies Sent<'PodSandbox'>;
}
