import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { cgroupManager } from './cgroups/index.js';
import { oomWitness } from './container/oom-witness.js';
import { probeSystemd } from './host/systemd.js';
import { lockDirs, type DirLocks } from './dir-lock.js';
import { ensureDir, makeDirWithParents, PASSABLE_DIR, PRIVATE_DIR } from './file-modes.js';
import { Cni } from './cni/index.js';
import { findProgram } from './exec.js';
import type { BerthConfig } from './config/types.js';
import { describePod, type PodSnapshot } from './cri/events.js';
import { CdiRegistry } from './cdi/registry.js';
import { loadCriServices } from './cri/loader.js';
import { serveCri, type CriServer } from './cri/server.js';
import { EventHub } from './events/hub.js';
import { setUpAppArmor } from './host/apparmor.js';
import { probeHostFeatures, type HostFeatures } from './host/features.js';
import { impassableAncestor } from './host/passable.js';
import { LifecyclePublisher, sandboxChange, type LifecycleEvent } from './events/lifecycle.js';
import { sweepImageStore } from './image/recovery.js';
import { ImageService } from './image/service.js';
import { ContentStore } from './imagestore/content.js';
import { LayerStore } from './imagestore/layers.js';
import { loadRegistryHosts } from './registry/hosts.js';
import type { Logger } from './log.js';
import { BerthMetrics } from './metrics/berth-metrics.js';
import { MetricsServer } from './metrics/server.js';
import { watchSteps } from './operation/steps.js';
import { NETNS_DIR_MODE, prepareNetnsDir } from './netns/index.js';
import { ensureInfraRootfs } from './oci/infra.js';
import { recover } from './sandbox/recovery.js';
import { SandboxTeardown } from './sandbox/teardown.js';
import { recoverContainers } from './container/recovery.js';
import { repairCheckpoints } from './checkpoint/repair.js';
import { ContainerCheckpoint } from './checkpoint/service.js';
import { ContainerService } from './container/service.js';
import { PodStatsService } from './podstats/service.js';
import { PodGate } from './sandbox/gate.js';
import {
  ExitWatcher,
  featuresOff,
  openRuntimeHandlers,
  resetExecDirs,
  type HostCapabilities,
} from './runtime/index.js';
import { NodeState } from './node/state.js';
import { SandboxService } from './sandbox/service.js';
import { allSettledWithin, type ShutdownOptions } from './shutdown.js';
import { Store } from './store/index.js';
import { StreamingServer } from './streaming/server.js';

/** kubelet's own event channel holds 1000 (plegChannelCapacity); CRI-O buffers as many. */
const EVENT_BUFFER = 1000;
/** containerd keeps events nobody has subscribed to yet for 5 minutes. */
const EVENT_RETAIN_MS = 5 * 60_000;

/**
 * What follows the CRI server's close at shutdown waits this long at most, whatever hangs: the
 * streaming server gives its sessions 5 s to kill their processes.
 */
const CLOSE_WAIT_MS = 10_000;

/** How often berthd looks for containers whose conmon died (exits themselves arrive by inotify). */
const MONITOR_CHECK_MS = 5_000;

export interface DaemonOptions {
  /** Test-only hook, see SandboxServiceDeps.pauseBeforeStep (container steps: rootfs, spec, monitor). */
  pauseBeforeStep?: string;
}

export interface Daemon {
  /**
   * Stops serving and closes the database; pods keep running, as with any CRI runtime restart.
   * False when some clean-up was abandoned (logged), left for the next start-up.
   */
  close(opts: ShutdownOptions): Promise<boolean>;
}

export async function startDaemon(
  config: BerthConfig,
  logger: Logger,
  opts: DaemonOptions = {},
): Promise<Daemon> {
  const started = Date.now();
  const dirLocks = await claimDirs(config);
  // A few milliseconds; nothing else probes the host after this.
  const probed = await probeHostFeatures({
    timeoutMs: config.runtimeTimeoutMs,
    scratchDir: join(config.rootDir, 'probe'),
  });
  // RuntimeDefault containers are confined by it (see oci/apparmor.ts); start-up fails without it.
  const appArmor = await setUpAppArmor(probed.appArmor, { timeoutMs: config.runtimeTimeoutMs });
  const host = { ...probed, appArmor };
  logger.info({ features: host }, 'host features');
  await prepareNetnsDir(config.netnsDir);
  // Where each exec's process file, pid file and runc log live while it runs.
  const execDir = join(config.stateDir, 'exec');
  await resetExecDirs(execDir);
  const infraRootfs = await ensureInfraRootfs(config.rootDir);

  const store = Store.open(join(config.rootDir, 'berth.db'));
  // Off means not loaded at all: no registry, no default collectors' timers.
  const metrics = config.metricsAddress
    ? new BerthMetrics({ sandboxes: () => store.sandboxes.list(), containers: () => store.containers.list() })
    : undefined;
  const cni = new Cni({
    binDirs: config.cniBinDirs,
    timeoutMs: config.cniTimeoutMs,
    logger,
    ...(metrics ? { onPluginDone: metrics.cniPluginDone } : {}),
  });

  const content = new ContentStore(config.rootDir);
  const layers = new LayerStore(config.rootDir);
  // conmon writes here; both outlive berthd, so exits that happen while it is down are not lost.
  const exitDir = join(config.stateDir, 'exits');
  const persistDir = join(config.stateDir, 'monitor');
  const systemd = config.cgroupDriver === 'systemd' ? await probeSystemd(config.runtimeTimeoutMs) : undefined;
  const cgroups = cgroupManager(config.cgroupDriver, host.cgroups, systemd);
  // An OOM kill conmon could not see (its cgroup gone first) may still be known to the driver.
  const exits = new ExitWatcher(
    exitDir,
    logger,
    persistDir,
    oomWitness(store, cgroups, config.runtimeTimeoutMs),
  );
  const monitorCgroup = cgroups.monitors(config.monitorCgroup);
  const strayMonitors = await monitorCgroup.adoptStrays(exitDir);
  if (strayMonitors.length > 0) logger.info({ pids: strayMonitors }, 'moved monitors into their cgroup');
  // runc's state lives on tmpfs, so a reboot clears it together with the processes it describes.
  const runtimes = await openRuntimeHandlers(
    { name: 'runc', binary: config.runtime, root: join(config.stateDir, 'runc') },
    config.runtimeHandlers.map(({ name, path, root }) => ({ name, binary: path, root })),
    {
      binary: await findProgram(config.monitor),
      systemdCgroup: config.cgroupDriver === 'systemd',
      kernelHasMountSetattr: host.idmappedMounts.mountSetattr,
      criuUsable: host.criu?.usable ?? false,
      usernsProbe: await usernsProbe(config, host, infraRootfs),
      exitDir,
      persistDir,
      socketDir: join(config.stateDir, 'sockets'),
      timeoutMs: config.runtimeTimeoutMs,
      cgroup: monitorCgroup,
      execDir,
    },
  );

  for (const off of featuresOff(runtimes)) logger.warn(off, 'runtime handler feature off');

  const eventHub = new EventHub<LifecycleEvent<PodSnapshot>>({
    capacity: EVENT_BUFFER,
    retainMs: EVENT_RETAIN_MS,
    logger,
  });
  const events = new LifecyclePublisher<PodSnapshot>(eventHub, logger);
  const sandboxTeardown = new SandboxTeardown({
    sandboxes: store.sandboxes,
    cni,
    runtimes,
    cgroups,
    timeoutMs: config.runtimeTimeoutMs,
    logger,
  });
  const recovery = recover({
    config,
    store,
    runtimes,
    logger,
    teardown: sandboxTeardown,
    recoverContainers: (rebooted) =>
      recoverContainers({
        config,
        store,
        cgroups,
        runtimes,
        exits,
        exitDir,
        persistDir,
        logger,
        events,
        rebooted,
        repairCheckpoints: () => repairCheckpoints({ rootDir: config.rootDir, store, runtimes, logger }),
      }),
  });
  // Parsing the CRI proto is CPU work of its own: done while recovery waits for runc and the disk.
  const criServices = loadCriServices();
  const report = await recovery;
  // Infra processes that died while berthd was down: their pods are stopped now.
  for (const id of report.markedNotReady) events.publish(sandboxChange('STOPPED', id));
  const imageSweep = await sweepImageStore(store.images, content, layers, logger);
  const recoveryMs = Date.now() - started;
  logger.info({ ...report, imageSweep, ms: recoveryMs }, 'state recovered');
  metrics?.recovered(report, recoveryMs / 1000);

  const images = new ImageService({
    repo: store.images,
    content,
    layers,
    // Read now, so that a bad registries.toml stops start-up; the registry client comes later.
    registry: {
      hosts: await loadRegistryHosts(config.registryConfig),
      timeoutMs: config.registryTimeoutMs,
      progressTimeoutMs: config.imagePullProgressTimeoutMs,
    },
    rootDir: config.rootDir,
    logger,
    usedBy: (imageId) => store.containers.imageInUse(imageId),
    ...(metrics ? { onPullDone: metrics.pullDone } : {}),
  });

  const pods = new PodGate();
  const containers = new ContainerService({
    config,
    pods,
    store,
    runtimes,
    exits,
    images,
    cgroups,
    host,
    cdi: new CdiRegistry(config.cdiSpecDirs, logger.child({ component: 'cdi' })),
    logger,
    events,
    ...(opts.pauseBeforeStep ? { pauseBeforeStep: opts.pauseBeforeStep } : {}),
  });
  // Recovery read the exits conmon wrote while berthd was down; the watcher also reports the files
  // already there, so an exit between recovery and this line is not missed either.
  await exits.start((record) => {
    containers.exits.onExit(record).catch((err: unknown) => logger.error({ err }, 'exit not recorded'));
  });
  const sandboxes = new SandboxService({
    config,
    pods,
    store,
    cgroups,
    cni,
    runtimes,
    logger,
    infraRootfs,
    host,
    containers: containers.lifecycle,
    events,
    teardown: sandboxTeardown,
    ...(opts.pauseBeforeStep ? { pauseBeforeStep: opts.pauseBeforeStep } : {}),
  });
  events.describeWith((sandboxId) => describePod(sandboxes, containers, sandboxId));
  const podStats = new PodStatsService({
    store,
    containerStats: containers.stats,
    cgroups,
    timeoutMs: config.runtimeTimeoutMs,
  });
  // Every process berth starts has its end noticed here when nothing else reports it: a conmon
  // that died without its exit file, an infra (runc's, under no monitor) that exited.
  const monitorCheck = setInterval(() => {
    containers.exits.checkMonitors().catch((err: unknown) => logger.error({ err }, 'monitor check failed'));
    sandboxes.checkInfras().catch((err: unknown) => logger.error({ err }, 'infra check failed'));
  }, MONITOR_CHECK_MS);
  monitorCheck.unref();
  let streaming: StreamingServer | undefined;
  let server: CriServer;
  let metricsServer: MetricsServer | undefined;
  let servingCri = false;
  let unwatchSteps = (): void => {};
  try {
    streaming = await StreamingServer.start(
      {
        address: config.streamingAddress,
        idleTimeoutMs: config.streamingIdleTimeoutMs,
        maxConnections: config.streamingMaxConnections,
        ...(config.streamingTlsCert
          ? { tlsCertFile: config.streamingTlsCert, tlsKeyFile: config.streamingTlsKey }
          : {}),
      },
      {
        exec: async (req, io) => ({
          exitCode: await containers.exec.execStream(req.containerId, req.cmd, io),
        }),
        attach: (req, io) => containers.exec.attach(req.containerId, io),
        dialPod: (podSandboxId, port, signal) => sandboxes.dialPort(podSandboxId, port, signal),
      },
      logger,
    );
    if (metrics) {
      metricsServer = await MetricsServer.start(
        { address: config.metricsAddress, maxConnections: config.metricsMaxConnections },
        {
          metrics: () => metrics.metrics(),
          contentType: metrics.contentType,
          unhealthy: () => {
            if (!servingCri) return 'not serving CRI';
            // A query that reaches SQLite: throws once the database is closed or unreadable.
            store.sandboxes.list();
            return undefined;
          },
        },
        logger,
      );
      unwatchSteps = watchSteps(metrics.stepDone);
    }
    server = await serveCri(
      config,
      {
        node: new NodeState(config, runtimes, logger),
        sandboxes,
        images,
        containers,
        checkpoints: new ContainerCheckpoint(containers.context),
        podStats,
        events: eventHub,
        streams: streaming,
        host,
      },
      logger,
      criServices,
      metrics?.rpcDone,
    );
    servingCri = true;
  } catch (err) {
    clearInterval(monitorCheck);
    eventHub.close();
    await streaming?.close();
    exits.close();
    unwatchSteps();
    await metricsServer?.close();
    store.close();
    dirLocks.release();
    throw err;
  }
  const streams = streaming;
  return {
    close: async (opts) => {
      servingCri = false;
      clearInterval(monitorCheck);
      // Event streams never end by themselves; the server's shutdown waits for every call.
      eventHub.close();
      await server.close(opts);
      const cleanedUp = await allSettledWithin(
        new Map<string, Promise<unknown>>([
          ['container files removal', containers.lifecycle.filesRemoved()],
          ['pod files removal', sandboxes.filesRemoved()],
          // Open exec and attach sessions end here; their processes are killed, containers keep running.
          ['streams', streams.close()],
          ['metrics server', metricsServer?.close() ?? Promise.resolve()],
        ]),
        CLOSE_WAIT_MS,
        opts.force,
        logger,
      );
      exits.close();
      unwatchSteps();
      store.close();
      dirLocks.release();
      return cleanedUp;
    },
  };
}

/**
 * How the handlers try joining a user namespace, or why they do not: the host cannot idmap what such
 * a pod needs, or its root could not get to berth's dirs (the state dir holds the probe's scratch
 * dirs, the root dir the pods' files and rootfs).
 */
async function usernsProbe(
  config: BerthConfig,
  host: HostFeatures,
  infraRootfs: string,
): Promise<HostCapabilities['usernsProbe']> {
  const { overlayLower, tmpfs, reason } = host.idmappedMounts;
  if (!overlayLower || !tmpfs) return { skipped: `the host cannot idmap what such a pod needs: ${reason}` };
  const blocked = await impassableAncestor([config.rootDir, config.stateDir]);
  if (blocked !== null) return { skipped: blocked };
  return {
    rootfs: infraRootfs,
    scratchParent: join(config.stateDir, 'probe'),
    timeoutMs: config.runtimeTimeoutMs,
  };
}

/**
 * Makes berthd's dirs and locks them (another berthd using one refuses to start), then gives them
 * their modes: the root dir is root's alone, image content, rootfs and secrets included, also when
 * an older berth made it 0711, until a pod of its own user namespace runs a container again (see
 * passableToPod); the state dir stays passable, as the CRI socket's dir may be it.
 */
async function claimDirs(config: BerthConfig): Promise<DirLocks> {
  // Nothing else is touched before the locks are held: a second berthd must leave the first alone.
  await Promise.all([
    makeDirWithParents(config.rootDir, PRIVATE_DIR),
    makeDirWithParents(config.stateDir, PASSABLE_DIR),
    mkdir(config.netnsDir, { recursive: true, mode: NETNS_DIR_MODE }),
  ]);
  const locks = await lockDirs([
    { what: 'root dir', path: config.rootDir },
    { what: 'state dir', path: config.stateDir },
    { what: 'netns dir', path: config.netnsDir },
  ]);
  try {
    await ensureDir(config.rootDir, PRIVATE_DIR);
    await ensureDir(config.stateDir, PASSABLE_DIR);
  } catch (err) {
    locks.release();
    throw err;
  }
  return locks;
}
