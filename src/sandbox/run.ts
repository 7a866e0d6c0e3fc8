import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { loadUsableNetwork } from '../cni/readiness.js';
import type { CniNetworkList } from '../cni/types.js';
import { AlreadyExistsError, FailedPreconditionError, InvalidArgumentError } from '../errors.js';
import { sandboxChange } from '../events/lifecycle.js';
import { createPinnedNamespaces, createPinnedNetns } from '../netns/index.js';
import { createPinnedNamespacesIn, createPinnedUserns } from '../netns/userns.js';
import { buildInfraSpec } from '../oci/infra.js';
import { hostIdOfRoot } from '../oci/userns.js';
import { clampOomScoreAdj } from '../oci/oom.js';
import {
  newSandbox,
  podCgroupParent,
  type PodResources,
  type Sandbox,
  type SandboxSpec,
} from '../model/sandbox.js';
import type { SandboxContext } from './context.js';
import { mountShm, writeHostnameFile, writeResolvConf } from './files.js';
import { KeyedLock } from '../operation/lock.js';
import { attach, attachmentFor, storedNetworking } from './network.js';
import type { RuntimeHandler, RuntimeHandlers } from '../runtime/index.js';
import { Steps } from '../operation/steps.js';
import { allSettledOrThrow } from '../kit/settle.js';
import { pauseIfAsked } from '../operation/pause.js';
import {
  NETNS_PREFIX,
  namespaceMounts,
  namespacePins,
  needsInfra,
  pinDir,
  podHostname,
  podNamespacePaths,
} from './namespaces.js';
import { nowNanos } from '../time.js';
import { startTimeOf } from '../process/index.js';
import { PRIVATE_DIR, PRIVATE_FILE, passableToPod } from '../file-modes.js';
import { podLimits } from './pod-limits.js';
import { checkApplicable } from './resize.js';
import { checkOwnHostIds } from './userns-ranges.js';

/** The infra process should be the last thing the OOM killer picks in a pod. */
const INFRA_OOM_SCORE_ADJ = -998;

/** RunPodSandbox: a journal row first, then named steps, each registering its undo before it acts. */
export class SandboxRun {
  private readonly podLock = new KeyedLock();
  private readonly deps: SandboxContext['deps'];
  private readonly teardown: SandboxContext['teardown'];

  constructor(ctx: SandboxContext) {
    this.deps = ctx.deps;
    this.teardown = ctx.teardown;
  }

  /** `resources`: what the pod asks for its cgroup as a whole, null when it asks nothing. */
  async run(spec: SandboxSpec, resources: PodResources | null): Promise<string> {
    const m = spec.metadata;
    const handler = requestedHandler(this.deps.runtimes, spec.runtimeHandler);
    return this.podLock.with(`${m.namespace}/${m.name}/${m.uid}/${m.attempt}`, async () => {
      const existing = this.deps.store.sandboxes.findByMetadata(m.namespace, m.name, m.uid, m.attempt);
      if (!existing) return this.create(spec, resources, handler);
      // kubelet retries a RunPodSandbox that timed out on its side: the same pod gets the same
      // sandbox. A stopped one is not handed out as if it ran; kubelet itself never asks again
      // for it (it starts a new attempt), and containerd and CRI-O refuse the name as taken.
      if (existing.state === 'NOTREADY') {
        throw new AlreadyExistsError(
          `pod sandbox ${existing.id} with this metadata (${m.namespace}/${m.name}, uid ${m.uid}, attempt ${m.attempt}) exists and is stopped: remove it, or run the next attempt`,
        );
      }
      return existing.id;
    });
  }

  private async create(
    spec: SandboxSpec,
    resources: PodResources | null,
    handler: RuntimeHandler,
  ): Promise<string> {
    const { config } = this.deps;
    const { sandboxes } = this.deps.store;
    const id = randomBytes(32).toString('hex');
    const log = this.deps.logger.child({ sandbox: id });
    const hostNetwork = spec.namespaces.network === 'NODE';
    const sandboxDir = join(config.rootDir, 'sandboxes', id);
    const netnsName = `${NETNS_PREFIX}${id}`;
    const netnsPath = hostNetwork ? null : join(config.netnsDir, netnsName);
    const infra = needsInfra(config.podInfra, spec);
    // Every pod kubelet leaves to berth gets a cgroup of its own, whether it asks for limits or not:
    // one layout, pod stats read from one cgroup, and a later UpdatePodSandboxResources has a
    // cgroup to set. A cgroup_parent is kubelet's to make and size.
    const podCgroup = spec.cgroupParent ? '' : this.deps.cgroups.podCgroupFor(id);
    checkApplicable(this.deps.cgroups, { podCgroup }, resources, 'config.linux.');

    let defaultNetwork: CniNetworkList | null = null;
    if (!hostNetwork) {
      const loaded = await loadUsableNetwork(config.cniConfDir, config.cniBinDirs);
      if (!loaded.network) throw new FailedPreconditionError(`pod network is not ready: ${loaded.reason}`);
      defaultNetwork = loaded.network;
    }

    // The row is written first and doubles as the journal: a crash at any later step leaves a
    // CREATING row that start-up repair rolls back using the paths recorded here. Each undo below
    // is an action of the same teardown, reading that row when it runs.
    // Checked with no await before the insert: a second run of the same ids sees this one's row.
    checkOwnHostIds(spec, sandboxes.list());
    const sandbox = newSandbox({
      id,
      spec,
      hostNetwork,
      netnsPath,
      sandboxDir,
      createdAt: nowNanos(),
      infra,
      podCgroup,
      resources,
    });
    sandboxes.insert(sandbox);
    this.deps.events.publish(sandboxChange('CREATED', id));

    // No step is journaled by name: start-up undoes them all whatever the row says, and each step
    // commits what its undo needs (the CNI input, each plugin's start) before it acts.
    const steps = new Steps('RunPodSandbox', log, async (step) => {
      await pauseIfAsked(
        {
          pauseBeforeStep: this.deps.pauseBeforeStep,
          stateDir: this.deps.config.stateDir,
          operation: 'RunPodSandbox',
        },
        step,
        log,
      );
    });
    try {
      await allSettledOrThrow([
        steps.run('sandbox-dir', async () => {
          steps.onUndo('sandbox-dir', () => this.teardown.removeDir(id));
          // Its files reach the containers by bind mount, which needs no way through for their
          // users (but for a pod's own root, below); the pod's shm is a 1777 tmpfs in it that no
          // other host user may enter.
          await mkdir(sandboxDir, { recursive: true, mode: PRIVATE_DIR });
          if (spec.userNamespace !== null) {
            // runc sets the infra and containers up as the pod's root, which must reach the infra
            // rootfs and the pod's files (see passableToPod).
            await passableToPod(sandboxDir, hostIdOfRoot(spec.userNamespace.gids), [
              config.rootDir,
              dirname(sandboxDir),
            ]);
          }
          await writeResolvConf(sandboxDir, spec.dnsConfig);
          await writeHostnameFile(sandboxDir, spec.hostname);
          if (spec.namespaces.ipc !== 'NODE') {
            steps.onUndo('shm', () => this.teardown.unmountShm(id));
            await mountShm(sandboxDir);
          }
        }),
        this.pin(steps, sandbox, netnsName),
        this.makePodCgroup(steps, sandbox, handler),
      ]);
      // The infra only needs the netns to exist, not to be configured: CNI and runc run side by side.
      await allSettledOrThrow([
        netnsPath && defaultNetwork
          ? this.addNetwork(steps, id, netnsPath, spec, defaultNetwork)
          : Promise.resolve(),
        infra ? this.startInfra(steps, handler, sandbox) : Promise.resolve(),
      ]);
      const ready = sandboxes.markReady(id);
      this.deps.events.publish(sandboxChange('STARTED', id));
      steps.release();
      log.info({ ip: ready.ip, netns: netnsPath, stepsMs: steps.timingsMs }, 'pod sandbox ready');
      return id;
    } catch (err) {
      throw await steps.abandon(err, {
        operation: 'RunPodSandbox',
        outsideStep: 'run',
        // Subscribers were told it was created; they learn it is gone, as from a removal.
        forget: () => {
          const deleted = this.deps.events.capture(sandboxChange('DELETED', id));
          sandboxes.delete(id);
          deleted();
        },
        // Stop/Remove and the next start retry what could not be undone.
        keepFailed: (failure) => sandboxes.createFailed(id, failure.step),
      });
    }
  }

  /** The pod's own cgroup, where berth makes one, before the infra that goes in it. */
  private async makePodCgroup(steps: Steps, sandbox: Sandbox, handler: RuntimeHandler): Promise<void> {
    if (sandbox.podCgroup === '') return;
    await steps.run('pod-cgroup', async () => {
      steps.onUndo('pod-cgroup', () => this.teardown.removePodCgroup(sandbox.id));
      const { cgroups, config } = this.deps;
      const limits = podLimits(sandbox.resources, handler.features.cpuWeight.conversion);
      await cgroups.createPodCgroup(sandbox.podCgroup, limits, config.runtimeTimeoutMs);
    });
  }

  /**
   * What berth pins itself: the pod's user namespace first, where it has one, since the others are
   * made owned by it; then every namespace of a pod without infra, else the netns alone.
   */
  private async pin(steps: Steps, sandbox: Sandbox, netnsName: string): Promise<void> {
    await this.pinUserNamespace(steps, sandbox);
    if (!sandbox.infra) return this.pinNamespaces(steps, sandbox);
    return sandbox.netnsPath ? this.pinNetns(steps, sandbox, netnsName) : Promise.resolve();
  }

  private async pinUserNamespace(steps: Steps, sandbox: Sandbox): Promise<void> {
    const { user } = namespacePins(sandbox);
    const mappings = sandbox.spec.userNamespace;
    if (user === null || mappings === null) return;
    await steps.run('userns', async () => {
      steps.onUndo('userns', () => this.teardown.unmountNamespaces(sandbox.id));
      // Mode as the sandbox dir's: whichever of the steps makes it first.
      await mkdir(pinDir(sandbox.sandboxDir), { recursive: true, mode: PRIVATE_DIR });
      await createPinnedUserns({ path: user, ...mappings }, this.deps.config.runtimeTimeoutMs);
    });
  }

  /**
   * A pod with an infra: the netns alone is pinned; the infra makes and holds the rest. Made in the
   * pod's user namespace where it has one, as the infra's own are, so that /sys mounts there.
   */
  private async pinNetns(steps: Steps, sandbox: Sandbox, netnsName: string): Promise<void> {
    const { config } = this.deps;
    const { user } = namespacePins(sandbox);
    const net = sandbox.netnsPath;
    await steps.run('netns', async () => {
      steps.onUndo('netns', () => this.teardown.removeNetns(sandbox.id));
      await (user === null || net === null
        ? createPinnedNetns(config.netnsDir, netnsName, config.runtimeTimeoutMs)
        : createPinnedNamespacesIn(
            user,
            { net, ipc: null, uts: null, hostname: '', sysctls: {} },
            config.runtimeTimeoutMs,
          ));
    });
  }

  /**
   * A pod without infra: its netns, ipc and uts namespaces pinned as files by one program run,
   * which also sets the pod's hostname and its sysctls in them (what runc does for an infra).
   */
  private async pinNamespaces(steps: Steps, sandbox: Sandbox): Promise<void> {
    const { id, spec } = sandbox;
    const pins = namespacePins(sandbox);
    if (namespaceMounts(sandbox).length === 0) return;
    await steps.run('namespaces', async () => {
      steps.onUndo('namespaces', async () => {
        await this.teardown.removeNetns(id);
        await this.teardown.unmountNamespaces(id);
      });
      // Mode as the sandbox dir's: whichever of the steps makes it first.
      await mkdir(pinDir(sandbox.sandboxDir), { recursive: true, mode: PRIVATE_DIR });
      const request = {
        net: sandbox.netnsPath,
        ipc: pins.ipc,
        uts: pins.uts,
        hostname: pins.uts === null ? '' : podHostname(sandbox),
        sysctls: spec.sysctls,
      };
      const { runtimeTimeoutMs } = this.deps.config;
      await (pins.user === null
        ? createPinnedNamespaces(request, runtimeTimeoutMs)
        : createPinnedNamespacesIn(pins.user, request, runtimeTimeoutMs));
    });
  }

  private async addNetwork(
    steps: Steps,
    id: string,
    netnsPath: string,
    spec: SandboxSpec,
    defaultNetwork: CniNetworkList,
  ): Promise<void> {
    const { sandboxes } = this.deps.store;
    await steps.run('cni-add', async () => {
      const stored = storedNetworking(attachmentFor(id, netnsPath, spec), defaultNetwork);
      steps.onUndo('cni-add', async () => {
        await this.teardown.releaseNetwork(id);
      });
      // Recorded before the first ADD: a crash mid-ADD still leads to a DEL with this exact input.
      sandboxes.networkAdding(id, stored);
      const pluginStarting = (network: number, plugin: number): void => {
        sandboxes.pluginAddStarting(id, network, plugin);
      };
      sandboxes.networkUp(id, await attach(this.deps.cni, stored, pluginStarting));
    });
  }

  private async startInfra(steps: Steps, runtime: RuntimeHandler, sandbox: Sandbox): Promise<void> {
    const { store } = this.deps;
    const { id, spec, sandboxDir, netnsPath } = sandbox;
    await steps.run('infra-create', async () => {
      steps.onUndo('infra-create', () => this.teardown.deleteInfra(id));
      const bundleDir = join(sandboxDir, 'bundle');
      await mkdir(bundleDir, { recursive: true, mode: PRIVATE_DIR });
      const ociSpec = buildInfraSpec({
        rootfsPath: this.deps.infraRootfs,
        hostname: podHostname({ hostNetwork: netnsPath === null, spec }),
        netnsPath,
        hostIpc: spec.namespaces.ipc === 'NODE',
        hostPid: spec.namespaces.pid === 'NODE',
        sysctls: spec.sysctls,
        cgroupsPath: this.deps.cgroups.cgroupsPath(podCgroupParent(sandbox), id),
        runAsUser: spec.security.runAsUser ?? 0,
        runAsGroup: spec.security.runAsGroup ?? 0,
        supplementalGroups: spec.security.supplementalGroups,
        privileged: spec.security.privileged,
        oomScoreAdj: clampOomScoreAdj(INFRA_OOM_SCORE_ADJ, this.deps.host.process.oomScoreAdj),
        userns: podNamespacePaths(sandbox).user ?? null,
        annotations: {
          'io.kubernetes.cri.container-type': 'sandbox',
          'io.kubernetes.cri.sandbox-id': id,
          'io.kubernetes.cri.sandbox-name': spec.metadata.name,
          'io.kubernetes.cri.sandbox-namespace': spec.metadata.namespace,
          'io.kubernetes.cri.sandbox-uid': spec.metadata.uid,
        },
      });
      await writeFile(join(bundleDir, 'config.json'), JSON.stringify(ociSpec), { mode: PRIVATE_FILE });
      const pid = await runtime.createUnmonitored(id, bundleDir);
      // Read now, while runc's init waits for its start under this pid: the start time tells it
      // from any later process the kernel gives the pid (start keeps it, as exec does).
      const startTime = await startTimeOf(pid);
      if (startTime === null) throw new Error(`infra process ${pid} exited as soon as runc created it`);
      store.sandboxes.infraCreated(id, { pid, startTime });
    });
    await steps.run('infra-start', () => runtime.start(id));
  }
}

/** The handler a RunPodSandbox names, looked up once for the whole run; "" is the default. */
function requestedHandler(handlers: RuntimeHandlers, name: string): RuntimeHandler {
  const handler = handlers.find(name);
  if (handler === undefined) {
    const known = handlers.all().map(({ name }) => name);
    throw new InvalidArgumentError(
      'runtime_handler',
      `"${name}" is not configured (known: ${known.join(', ')})`,
    );
  }
  return handler;
}
