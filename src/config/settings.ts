/**
 * Every setting of berthd, declared once: its field in BerthConfig, its key in the config file, its
 * flag, its default, its help and the kind of value it takes (which checks it). The BerthConfig type,
 * flag and file parsing, --help, the sample config/berth.toml and the README's table all come from
 * this table.
 */
import { CGROUP_DRIVERS } from '../cgroups/driver.js';
import { MONITOR_CGROUP_MODES } from '../cgroups/monitor.js';
import {
  absolutePath,
  choice,
  count,
  directoryList,
  duration,
  listenAddress,
  optionalListenAddress,
  program,
  runtimeHandlerList,
  socketPath,
  type ValueKind,
} from './values.js';

export interface Flag {
  name: string;
  /** Placeholder for the value in --help and the README. */
  arg: string;
}

export interface Setting<T> {
  /** In the config file: "key" at the top level, or "table.key". */
  key: string;
  flag?: Flag;
  kind: ValueKind<T>;
  default: NoInfer<T>;
  /** What the setting is, in one line, for --help and the sample config. */
  help: string;
  /** Said in the sample config only, after the help. */
  details?: string;
  /** Shown commented out in the sample config, for a setting that is unset by default. */
  example?: NoInfer<T>;
}

/** Infers a setting's value type from its kind, and checks its default and example against it. */
function setting<T>(declared: Setting<T>): Setting<T> {
  return declared;
}

const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

/** auto: an infra process only for pods that share a pid namespace; always: one for every pod. */
export const POD_INFRA_MODES = ['auto', 'always'] as const;

/** In the order of --help, the sample config and the README. Top-level keys come first, as TOML needs. */
const DECLARED = {
  socket: setting({
    key: 'socket',
    flag: { name: '--socket', arg: 'PATH' },
    kind: socketPath,
    default: '/run/berth/berth.sock',
    help: 'CRI unix socket: a path or unix:///path',
    details: 'Point crictl and the kubelet here.',
  }),
  rootDir: setting({
    key: 'root',
    flag: { name: '--root', arg: 'DIR' },
    kind: absolutePath,
    default: '/var/lib/berth',
    help: 'Persistent state: SQLite database, sandbox dirs, infra rootfs',
  }),
  stateDir: setting({
    key: 'state',
    flag: { name: '--state', arg: 'DIR' },
    kind: absolutePath,
    default: '/run/berth',
    help: 'Volatile state (tmpfs): runc state, boot marker; emptied by a reboot',
    details: 'Must differ from root.',
  }),
  logLevel: setting({
    key: 'log_level',
    flag: { name: '--log-level', arg: 'LEVEL' },
    kind: choice(LOG_LEVELS),
    default: 'info',
    help: `Log level: ${LOG_LEVELS.join(', ')}`,
    details: 'Logs are JSON lines on stderr.',
  }),
  cgroupDriver: setting({
    key: 'cgroup_driver',
    flag: { name: '--cgroup-driver', arg: 'DRIVER' },
    kind: choice(CGROUP_DRIVERS),
    default: 'cgroupfs',
    help: `Cgroup driver: ${CGROUP_DRIVERS.join(' or ')}; systemd only on a host running systemd`,
    details: "Match the kubelet's setting.",
  }),
  podInfra: setting({
    key: 'pod_infra',
    flag: { name: '--pod-infra', arg: 'MODE' },
    kind: choice(POD_INFRA_MODES),
    default: 'auto',
    help: `When a pod runs an infra process: ${POD_INFRA_MODES.join(' or ')}`,
    details:
      'auto runs one only for pods that share a pid namespace and pins the ipc and uts namespaces of the others as files; always runs one for every pod.',
  }),
  usernsMinHostId: setting({
    key: 'userns_min_host_id',
    flag: { name: '--userns-min-host-id', arg: 'ID' },
    kind: count(1, 0xffff_fffe),
    // kubelet's allocator hands out 65536-aligned ranges from 65536 on, never the host's own users.
    default: 65536,
    help: "The lowest host id a pod's own user namespace may map",
    details: "Below it are the host's own users. critest maps from 1000: lower it only for such a test node.",
  }),
  shutdownTimeoutMs: setting({
    key: 'shutdown_timeout',
    flag: { name: '--shutdown-timeout', arg: 'DURATION' },
    kind: duration(0),
    // Below systemd's default TimeoutStopSec (90s), so berthd exits before systemd kills it.
    default: 30_000,
    help: 'On SIGTERM, how long calls already running may take to finish before they are cancelled',
    details:
      'berthd stops accepting calls at once, then exits once they are done or cancelled; a second SIGTERM cancels them at once. Containers keep running.',
  }),
  cniConfDir: setting({
    key: 'cni.conf_dir',
    flag: { name: '--cni-conf-dir', arg: 'DIR' },
    kind: absolutePath,
    default: '/etc/cni/net.d',
    help: 'CNI network configs (.conflist, .conf, .json)',
    details: 'The first valid one in name order is used.',
  }),
  cniBinDirs: setting({
    key: 'cni.bin_dirs',
    flag: { name: '--cni-bin-dir', arg: 'DIR' },
    kind: directoryList,
    default: ['/opt/cni/bin', '/usr/lib/cni'],
    help: 'CNI plugin dirs, searched in order; the flag is repeatable, comma- or colon-separated',
  }),
  cniTimeoutMs: setting({
    key: 'cni.timeout',
    kind: duration(1),
    default: 30_000,
    help: 'Deadline for each CNI plugin call',
  }),
  cdiSpecDirs: setting({
    key: 'cdi.spec_dirs',
    flag: { name: '--cdi-spec-dir', arg: 'DIR' },
    kind: directoryList,
    default: ['/etc/cdi', '/var/run/cdi'],
    help: 'CDI spec dirs, a later one outranking an earlier; the flag is repeatable, comma- or colon-separated',
    details: 'Read again for each container that asks for a CDI device: a spec written meanwhile applies.',
  }),
  netnsDir: setting({
    key: 'netns.dir',
    flag: { name: '--netns-dir', arg: 'DIR' },
    kind: absolutePath,
    default: '/var/run/netns',
    help: 'Where pod network namespaces are pinned',
  }),
  registryConfig: setting({
    key: 'image.registry_config',
    flag: { name: '--registry-config', arg: 'PATH' },
    kind: absolutePath,
    default: '/etc/berth/registries.toml',
    help: 'Registry mirrors, insecure hosts and credentials (TOML; a missing file is fine)',
    details:
      'See config/registries.toml. Without the file every registry is reached directly, localhost over plain HTTP.',
  }),
  registryTimeoutMs: setting({
    key: 'image.registry_timeout',
    kind: duration(1),
    default: 60_000,
    help: 'Deadline for a registry request to answer; also the longest a download may stall',
  }),
  imagePullProgressTimeoutMs: setting({
    key: 'image.pull_progress_timeout',
    flag: { name: '--image-pull-progress-timeout', arg: 'DURATION' },
    kind: duration(0),
    // containerd's image_pull_progress_timeout.
    default: 300_000,
    help: 'Cancel a pull whose downloads all received nothing for this long; 0s for never',
  }),
  runtime: setting({
    key: 'runtime.path',
    flag: { name: '--runtime', arg: 'PATH' },
    kind: program,
    default: 'runc',
    help: 'OCI runtime: an absolute path or a name looked up in PATH',
  }),
  runtimeHandlers: setting({
    key: 'runtime.handlers',
    flag: { name: '--runtime-handler', arg: 'NAME=PATH:ROOT' },
    kind: runtimeHandlerList,
    default: [],
    example: [{ name: 'other', path: '/usr/sbin/runc', root: '/run/berth/runc-other' }],
    help: 'More runtime handlers (RuntimeClass handler names) besides the default "runc"; the flag is repeatable',
    details:
      'Each is a runc-compatible binary and a root of its own. In this file: a table [runtime.handlers.NAME] with path and root.',
  }),
  monitor: setting({
    key: 'runtime.monitor',
    flag: { name: '--monitor', arg: 'PATH' },
    kind: program,
    default: 'conmon',
    help: 'Container monitor (conmon): an absolute path or a name looked up in PATH',
    details: "It holds each container's stdio, writes its CRI log and exit code, and outlives berthd.",
  }),
  monitorCgroup: setting({
    key: 'runtime.monitor_cgroup',
    flag: { name: '--monitor-cgroup', arg: 'MODE' },
    kind: choice(MONITOR_CGROUP_MODES),
    default: 'berth-monitors',
    help: `Cgroup of the container monitors: ${MONITOR_CGROUP_MODES.join(' or ')}`,
    details:
      "berth-monitors is a cgroup of their own (berth-monitors.slice with the systemd driver), so that stopping berthd's cgroup leaves them running; inherit keeps them in berthd's.",
  }),
  runtimeTimeoutMs: setting({
    key: 'runtime.timeout',
    kind: duration(1),
    default: 30_000,
    help: 'Deadline for each runtime call',
  }),
  stopGraceMs: setting({
    key: 'pod.stop_grace_period',
    kind: duration(0),
    default: 10_000,
    help: "Time between SIGTERM and SIGKILL when stopping a pod's infra process",
  }),
  streamingAddress: setting({
    key: 'streaming.address',
    flag: { name: '--streaming-address', arg: 'HOST:PORT' },
    kind: listenAddress,
    default: '127.0.0.1:0',
    help: 'Exec, attach and port-forward server; port 0 picks a free one',
    details:
      'The URLs that Exec, Attach and PortForward answer point here; kubelet proxies them. The port is logged at start-up.',
  }),
  streamingIdleTimeoutMs: setting({
    key: 'streaming.idle_timeout',
    flag: { name: '--streaming-idle-timeout', arg: 'DURATION' },
    kind: duration(0),
    // containerd's stream_idle_timeout.
    default: 4 * 3_600_000,
    help: 'Close a stream with no traffic either way after this; 0s for never',
  }),
  streamingMaxConnections: setting({
    key: 'streaming.max_connections',
    flag: { name: '--streaming-max-connections', arg: 'N' },
    kind: count(1, 1_000_000),
    default: 512,
    help: 'Open connections to the streaming server at most, streams included',
    details:
      "Past it the oldest connection that is neither streaming nor being answered is closed, else the new one. Keep it well below berthd's open-file limit.",
  }),
  streamingTlsCert: setting({
    key: 'streaming.tls_cert',
    flag: { name: '--streaming-tls-cert', arg: 'PATH' },
    kind: absolutePath,
    default: '',
    example: '/etc/berth/streaming.crt',
    help: 'PEM certificate: serve streams over HTTPS (with the key)',
    details: 'Set both the certificate and the key, or neither for plain HTTP.',
  }),
  streamingTlsKey: setting({
    key: 'streaming.tls_key',
    flag: { name: '--streaming-tls-key', arg: 'PATH' },
    kind: absolutePath,
    default: '',
    example: '/etc/berth/streaming.key',
    help: 'PEM private key of the streaming certificate',
  }),
  metricsAddress: setting({
    key: 'metrics.address',
    flag: { name: '--metrics-address', arg: 'HOST:PORT' },
    kind: optionalListenAddress,
    // 9649: no entry in /etc/services, clear of containerd's and CRI-O's metrics ports (1338, 9537).
    default: '127.0.0.1:9649',
    help: 'Prometheus /metrics and /healthz over HTTP; "" turns them off, port 0 picks a free one',
    details:
      'Loopback by default; set the node address for a Prometheus elsewhere. The URL is logged at start-up.',
  }),
  metricsMaxConnections: setting({
    key: 'metrics.max_connections',
    flag: { name: '--metrics-max-connections', arg: 'N' },
    kind: count(1, 1_000_000),
    default: 64,
    help: 'Open connections to the metrics server at most',
    details: 'Past it the oldest connection not being answered is closed, else the new one.',
  }),
};

type ValueOf<S> = S extends Setting<infer T> ? T : never;

/** The daemon's whole configuration, after defaults, config file and flags are merged and checked. */
export type BerthConfig = { [F in keyof typeof DECLARED]: ValueOf<(typeof DECLARED)[F]> };
export type Field = keyof BerthConfig;

/**
 * The same table, typed so that code generic over a field keeps the field and its value type
 * linked (`SETTINGS[field].kind` reads a `BerthConfig[field]`).
 */
export const SETTINGS: { readonly [F in Field]: Setting<BerthConfig[F]> } = DECLARED;

function isField(name: string): name is Field {
  return Object.hasOwn(SETTINGS, name);
}

/** In declaration order. */
export const FIELDS: readonly Field[] = Object.keys(SETTINGS).filter(isField);

/** The flag naming the config file: a flag only, as the file cannot name itself. */
export const CONFIG_FILE: { flag: Flag; default: string; help: string } = {
  flag: { name: '--config', arg: 'PATH' },
  default: '/etc/berth/berth.toml',
  help: 'TOML config file; a missing default file is fine',
};

/**
 * The config file's layout: each table ('' for the top level, which comes first as TOML needs) to
 * its keys and their fields, in declaration order.
 */
export const TOML_LAYOUT: ReadonlyMap<string, ReadonlyMap<string, Field>> = (() => {
  const layout = new Map<string, Map<string, Field>>([['', new Map()]]);
  for (const field of FIELDS) {
    const key = SETTINGS[field].key;
    const dot = key.indexOf('.');
    const table = dot === -1 ? '' : key.slice(0, dot);
    const keys = layout.get(table) ?? new Map<string, Field>();
    layout.set(table, keys.set(key.slice(dot + 1), field));
  }
  return layout;
})();

/** A setting's default as text. */
export interface DefaultText {
  /** As --help and the README show it; '' when the setting is unset by default. */
  shown: string;
  /** The TOML literal of the default, or of the example when it is unset. */
  toml: string;
}

export function defaultText<F extends Field>(field: F): DefaultText {
  const { kind, default: value, example } = SETTINGS[field];
  return { shown: kind.show(value), toml: kind.toToml(example ?? value) };
}

/** A fresh copy of the built-in defaults: callers may change it. */
export function defaultConfig(): BerthConfig {
  const config: Partial<BerthConfig> = {};
  for (const field of FIELDS) copyDefault(config, field);
  if (!isComplete(config)) throw new Error('a setting of the table has no default');
  return config;
}

function copyDefault<F extends Field>(config: Partial<BerthConfig>, field: F): void {
  config[field] = structuredClone(SETTINGS[field].default);
}

function isComplete(config: Partial<BerthConfig>): config is BerthConfig {
  return FIELDS.every((field) => config[field] !== undefined);
}
