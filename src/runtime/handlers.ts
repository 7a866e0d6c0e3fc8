/**
 * Runtime handlers: the OCI runtimes a pod may ask for by name (kubelet's RuntimeClass handler).
 * Each has its own runc binary and root, and the conmon that runs containers with them; a pod's
 * infra and its containers all run under the pod's handler. Each is opened once, at start-up.
 */
import { ConfigError } from '../config/error.js';
import { FailedPreconditionError } from '../errors.js';
import { findProgram } from '../exec.js';
import { Conmon, isConmonOf, type ConmonOptions } from './conmon.js';
import { hasCheckpointCommand } from './checkpoint.js';
import { Runc } from './runc.js';
import { RuncConmonHandler } from './runc-conmon.js';
import type { HandlerFeatures, OptionalFeature, RuntimeHandler } from './runtime.js';
import { weightConversionOf } from './weight-conversion.js';
import { probeUsernsJoin, type UsernsProbeOptions } from './userns-probe.js';

/** What a pod record says of its handler. */
export interface HandlerOwner {
  id: string;
  runtimeHandler: string;
}

export class RuntimeHandlers {
  private readonly byName: ReadonlyMap<string, RuntimeHandler>;

  /** `defaultHandler` also answers to "", the name pods without a RuntimeClass ask for. */
  constructor(
    readonly defaultHandler: RuntimeHandler,
    others: readonly RuntimeHandler[],
  ) {
    this.byName = new Map([defaultHandler, ...others].map((handler) => [handler.name, handler]));
  }

  /** The default first. */
  all(): RuntimeHandler[] {
    return [...this.byName.values()];
  }

  find(name: string): RuntimeHandler | undefined {
    return name === '' ? this.defaultHandler : this.byName.get(name);
  }

  /** The handler a pod was started with; a pod of a handler removed from the config cannot be served. */
  of(pod: HandlerOwner): RuntimeHandler {
    const handler = this.find(pod.runtimeHandler);
    if (handler === undefined) {
      throw new FailedPreconditionError(
        `runtime handler "${pod.runtimeHandler}" of pod sandbox ${pod.id} is no longer configured`,
      );
    }
    return handler;
  }

  /**
   * True when `monitorPid` is still the monitor of container `id`; a reused pid is not. Every
   * handler's containers share the one monitor program, so this needs no handler.
   */
  isMonitoring(id: string, monitorPid: number): Promise<boolean> {
    return isConmonOf(monitorPid, id);
  }
}

/** What the host's probe found that the handlers' features also depend on. */
export interface HostCapabilities {
  /** Whether the kernel has mount_setattr(2). */
  kernelHasMountSetattr: boolean;
  /**
   * How to try joining a user namespace; or why it is not tried (the host cannot idmap, or a
   * user namespace's root could not reach berth's dirs).
   */
  usernsProbe: UsernsProbeOptions | { skipped: string };
  /** criu passed `criu check`. */
  criuUsable: boolean;
}

/**
 * Recursive read-only mounts need mount_setattr(2) in the kernel (the host's probe says) and a
 * runc that knows "rro". Joining a user namespace is tried only where the host can idmap what a
 * user-namespaced pod needs and its root can reach berth's dirs (`usernsProbe` says why not). Checkpoints need a usable criu
 * and a runtime with the command that drives it.
 */
export async function probeFeatures(
  runc: Runc,
  { kernelHasMountSetattr, usernsProbe, criuUsable }: HostCapabilities,
): Promise<HandlerFeatures> {
  const [{ mountOptions, runcVersion }, usernsFailure, checkpoints] = await Promise.all([
    runc.features(),
    'skipped' in usernsProbe ? usernsProbe.skipped : probeUsernsJoin(runc, usernsProbe),
    criuUsable ? hasCheckpointCommand(runc) : false,
  ]);
  const binary = runc.opts.binary;
  const rroOff = !kernelHasMountSetattr
    ? 'the kernel has no mount_setattr(2)'
    : mountOptions.includes('rro')
      ? null
      : `${binary} does not list the rro mount option in its features`;
  const checkpointOff = !criuUsable
    ? 'criu is not usable on this host (see host.criu)'
    : checkpoints
      ? null
      : `${binary} has no checkpoint command`;
  // The join is only tried where the host can idmap overlay lowers and tmpfs and berth's dirs
  // can be reached (skipped otherwise), which is all a user-namespaced pod's containers then need.
  const usernsOff =
    usernsFailure === null || 'skipped' in usernsProbe
      ? usernsFailure
      : `${binary} could not run a container joining a pinned user namespace: ${usernsFailure}`;
  return {
    recursiveReadOnlyMounts: rroOff === null,
    userNamespaces: usernsOff === null,
    joinsUserNamespace: usernsFailure === null,
    checkpointRestore: checkpointOff === null,
    off: {
      ...(rroOff === null ? {} : { recursiveReadOnlyMounts: rroOff }),
      ...(usernsOff === null ? {} : { userNamespaces: usernsOff }),
      ...(checkpointOff === null ? {} : { checkpointRestore: checkpointOff }),
    },
    cpuWeight: weightConversionOf(runcVersion),
  };
}

/** Each feature a handler's probes turned off, and why: for one log line each at start-up. */
export function featuresOff(
  handlers: RuntimeHandlers,
): { handler: string; feature: OptionalFeature; reason: string }[] {
  return handlers.all().flatMap(({ name, features }) =>
    (Object.entries(features.off) as [OptionalFeature, string][]).map(([feature, reason]) => ({
      handler: name,
      feature,
      reason,
    })),
  );
}

export interface HandlerConfig {
  name: string;
  /** runc-compatible binary: a path or a name looked up in PATH. */
  binary: string;
  root: string;
}

/** What every handler's runc and conmon share: the monitor and its dirs, the cgroup driver, the deadline. */
export type SharedRuntimeConfig = Omit<ConmonOptions, 'runc'> &
  HostCapabilities & {
    systemdCgroup: boolean;
    /** Parent of the per-exec temp dirs; emptied at start-up (resetExecDirs). */
    execDir: string;
  };

export async function openRuntimeHandlers(
  defaultConfig: HandlerConfig,
  others: readonly HandlerConfig[],
  shared: SharedRuntimeConfig,
): Promise<RuntimeHandlers> {
  const { systemdCgroup, execDir, kernelHasMountSetattr, usernsProbe, criuUsable, ...monitor } = shared;
  const host = { kernelHasMountSetattr, usernsProbe, criuUsable };
  const open = async ({ name, binary, root }: HandlerConfig): Promise<RuntimeHandler> => {
    // Looked up now, so that a handler whose binary is missing fails the start, not a pod's run.
    const path = await findProgram(binary);
    const runc = new Runc({ binary: path, root, systemdCgroup, timeoutMs: shared.timeoutMs });
    const conmon = new Conmon({ ...monitor, runc });
    return new RuncConmonHandler({
      name,
      runc,
      conmon,
      features: await probeFeatures(runc, host),
      execDir,
    });
  };
  const sharing = others.find((other) => other.root === defaultConfig.root);
  if (sharing) {
    throw new ConfigError(
      `runtime handler "${sharing.name}" has the default handler's root ${sharing.root}; give it its own`,
    );
  }
  return new RuntimeHandlers(await open(defaultConfig), await Promise.all(others.map(open)));
}
