export type CgroupDriver = 'cgroupfs' | 'systemd';
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';

/** The daemon's whole configuration, after defaults, config file and flags are merged and checked. */
export interface BerthConfig {
  /** Path of the CRI unix socket (no `unix://` prefix). */
  socket: string;
  /** Persistent state: SQLite database, sandbox dirs, infra rootfs. */
  rootDir: string;
  /** Volatile state on tmpfs: boot marker, runc state. Emptied by a reboot. */
  stateDir: string;
  cniConfDir: string;
  cniBinDirs: string[];
  netnsDir: string;
  /** TOML file of registry mirrors, insecure hosts and credentials; a missing file means defaults. */
  registryConfig: string;
  /** Path or name of the OCI runtime binary (runc). */
  runtime: string;
  /** Path or name of the container monitor binary (conmon). */
  monitor: string;
  cgroupDriver: CgroupDriver;
  logLevel: LogLevel;
  /** Deadline for each CNI plugin exec. */
  cniTimeoutMs: number;
  /** A registry request's deadline for an answer, and the longest a download may stall. */
  registryTimeoutMs: number;
  /** Deadline for each runc exec. */
  runtimeTimeoutMs: number;
  /** Grace period between SIGTERM and SIGKILL when stopping a pod's infra process. */
  stopGraceMs: number;
  /** host:port of the streaming server (exec, attach, port-forward); port 0 picks a free one. */
  streamingAddress: string;
  /** A stream with no traffic for this long is closed; 0 for never. */
  streamingIdleTimeoutMs: number;
  /** PEM certificate and key for HTTPS streaming; both empty for plain HTTP. */
  streamingTlsCert: string;
  streamingTlsKey: string;
}
