import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { Cni } from '../cni/index.js';
import { loadUsableNetwork } from '../cni/readiness.js';
import type { CniNetworkList } from '../cni/types.js';
import type { BerthConfig } from '../config/types.js';
import { AlreadyExistsError, FailedPreconditionError } from '../errors.js';
import { sandboxChange, type LifecycleEvents } from '../events/lifecycle.js';
import type { Logger } from '../log.js';
import { dialLocalhost } from '../netns/dial.js';
import { createPinnedNamespaces, createPinnedNetns } from '../netns/index.js';
import { cgroupsPath } from '../oci/cgroups.js';
import { buildInfraSpec } from '../oci/infra.js';
import { clampOomScoreAdj } from '../oci/oom.js';
import { isRunning, waitForExit } from '../process/index.js';
import type { Store } from '../store/index.js';
import { newSandbox, type Sandbox, type SandboxSpec } from '../model/sandbox.js';
import { mountShm, writeHostnameFile, writeResolvConf } from './files.js';
import type { PodGate } from './gate.js';
import { KeyedLock } from '../operation/lock.js';
import { attach, attachmentFor, PodCidrs, storedNetworking } from './network.js';
import type { RuntimeHandlers } from './runtimes.js';
import { SandboxTeardown, networkMayBeAttached } from './teardown.js';
import type { SandboxFilter, SandboxVerboseInfo, SandboxView } from './types.js';
import { Steps, asStep } from '../operation/steps.js';
import { allSettledOrThrow } from '../settle.js';
import { pauseIfAsked } from '../operation/pause.js';
import { matchesLabels } from '../operation/lookup.js';
import { findSandbox } from './lookup.js';
import { namespaceMounts, namespacePins, needsInfra, pinDir, podHostname } from './namespaces.js';
import { nowNanos } from '../time.js';
import { PRIVATE_DIR, PRIVATE_FILE } from '../file-modes.js';

/** Names of berth's netns pins start with this, so restart repair can tell ours from others'. */
export const NETNS_PREFIX = 'berth-';

/** The infra process should be the last thing the OOM killer picks in a pod. */
const INFRA_OOM_SCORE_ADJ = -998;

/** The pod's containers, as Stop and Remove of their sandbox must handle them first. */
export interface PodContainers {
  stopAllInSandbox(sandboxId: string): Promise<void>;
  removeAllInSandbox(sandboxId: string): Promise<void>;
}

export interface SandboxServiceDeps {
  config: BerthConfig;
  store: Store;
  cni: Cni;
  runtimes: RuntimeHandlers;
  logger: Logger;
  infraRootfs: string;
  containers?: PodContainers;
  /** Shared with the container service: a pod being stopped or removed takes no new container. */
  pods: PodGate;
  /** Where runs, stops and removals are reported (GetContainerEvents). */
  events: LifecycleEvents;
  /**
   * Test-only: RunPodSandbox stops before acting on the step of this name (after its journal entry
   * and undo are recorded) and waits forever, so a test can kill -9 the daemon mid-start.
   */
  pauseBeforeStep?: string;
}

export type NetworkStatus = { ready: true } | { ready: false; reason: string };

export class SandboxService {
  private readonly podLock = new KeyedLock();
  private readonly sandboxLock = new KeyedLock();
  private readonly teardown: SandboxTeardown;
  /** What kubelet sent with UpdateRuntimeConfig. */
  readonly podCidrs: PodCidrs;
  /** The configured runtime handlers; a pod may name any of them, or "" for the default. */
  readonly runtimeHandlers: RuntimeHandlers;

  constructor(private readonly deps: SandboxServiceDeps) {
    this.podCidrs = new PodCidrs(deps.logger);
    this.runtimeHandlers = deps.runtimes;
    this.teardown = new SandboxTeardown({
      sandboxes: deps.store.sandboxes,
      cni: deps.cni,
      runtimes: deps.runtimes,
      logger: deps.logger,
    });
  }

  /** Ready when a default CNI network loads from the conf dir and every plugin it runs is installed. */
  async networkStatus(): Promise<NetworkStatus> {
    const loaded = await loadUsableNetwork(this.deps.config.cniConfDir, this.deps.config.cniBinDirs);
    return loaded.network ? { ready: true } : { ready: false, reason: loaded.reason };
  }

  async run(spec: SandboxSpec): Promise<string> {
    const m = spec.metadata;
    return this.podLock.with(`${m.namespace}/${m.name}/${m.uid}/${m.attempt}`, async () => {
      const existing = this.deps.store.sandboxes.findByMetadata(m.namespace, m.name, m.uid, m.attempt);
      if (!existing) return this.create(spec);
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

  private async create(spec: SandboxSpec): Promise<string> {
    const { config } = this.deps;
    const { sandboxes } = this.deps.store;
    const id = randomBytes(32).toString('hex');
    const log = this.deps.logger.child({ sandbox: id });
    const hostNetwork = spec.namespaces.network === 'NODE';
    const sandboxDir = join(config.rootDir, 'sandboxes', id);
    const netnsName = `${NETNS_PREFIX}${id}`;
    const netnsPath = hostNetwork ? null : join(config.netnsDir, netnsName);
    const infra = needsInfra(config.podInfra, spec);

    let defaultNetwork: CniNetworkList | null = null;
    if (!hostNetwork) {
      const loaded = await loadUsableNetwork(config.cniConfDir, config.cniBinDirs);
      if (!loaded.network) throw new FailedPreconditionError(`pod network is not ready: ${loaded.reason}`);
      defaultNetwork = loaded.network;
    }

    // The row is written first and doubles as the journal: a crash at any later step leaves a
    // CREATING row that start-up repair rolls back using the paths recorded here. Each undo below
    // is an action of the same teardown, reading that row when it runs.
    const sandbox = newSandbox({
      id,
      spec,
      hostNetwork,
      netnsPath,
      sandboxDir,
      createdAt: nowNanos(),
      infra,
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
          // users; the pod's shm is a 1777 tmpfs in it that no host user may enter.
          await mkdir(sandboxDir, { recursive: true, mode: PRIVATE_DIR });
          await writeResolvConf(sandboxDir, spec.dnsConfig);
          await writeHostnameFile(sandboxDir, spec.hostname);
          if (spec.namespaces.ipc !== 'NODE') {
            steps.onUndo('shm', () => this.teardown.unmountShm(id));
            await mountShm(sandboxDir);
          }
        }),
        this.pin(steps, sandbox, netnsName),
      ]);
      // The infra only needs the netns to exist, not to be configured: CNI and runc run side by side.
      await allSettledOrThrow([
        netnsPath && defaultNetwork
          ? this.addNetwork(steps, id, netnsPath, spec, defaultNetwork)
          : Promise.resolve(),
        infra ? this.startInfra(steps, id, spec, sandboxDir, netnsPath) : Promise.resolve(),
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

  /** What berth pins itself: every namespace of a pod without infra, else the netns alone. */
  private pin(steps: Steps, sandbox: Sandbox, netnsName: string): Promise<void> {
    if (!sandbox.infra) return this.pinNamespaces(steps, sandbox);
    return sandbox.netnsPath ? this.pinNetns(steps, sandbox.id, netnsName) : Promise.resolve();
  }

  /** A pod with an infra: the netns alone is pinned; the infra makes and holds the rest. */
  private async pinNetns(steps: Steps, id: string, netnsName: string): Promise<void> {
    const { config } = this.deps;
    await steps.run('netns', async () => {
      steps.onUndo('netns', () => this.teardown.removeNetns(id));
      await createPinnedNetns(config.netnsDir, netnsName, config.runtimeTimeoutMs);
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
      // Mode as the sandbox dir's: whichever of the two steps makes it first.
      await mkdir(pinDir(sandbox.sandboxDir), { recursive: true, mode: PRIVATE_DIR });
      await createPinnedNamespaces(
        {
          net: sandbox.netnsPath,
          ...pins,
          hostname: pins.uts === null ? '' : podHostname(sandbox),
          sysctls: spec.sysctls,
        },
        this.deps.config.runtimeTimeoutMs,
      );
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

  private async startInfra(
    steps: Steps,
    id: string,
    spec: SandboxSpec,
    sandboxDir: string,
    netnsPath: string | null,
  ): Promise<void> {
    const { config, store } = this.deps;
    const { runc } = this.deps.runtimes.of({ id, runtimeHandler: spec.runtimeHandler });
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
        cgroupsPath: cgroupsPath(config.cgroupDriver, spec.cgroupParent, id),
        runAsUser: spec.security.runAsUser ?? 0,
        runAsGroup: spec.security.runAsGroup ?? 0,
        supplementalGroups: spec.security.supplementalGroups,
        privileged: spec.security.privileged,
        oomScoreAdj: clampOomScoreAdj(INFRA_OOM_SCORE_ADJ),
        annotations: {
          'io.kubernetes.cri.container-type': 'sandbox',
          'io.kubernetes.cri.sandbox-id': id,
          'io.kubernetes.cri.sandbox-name': spec.metadata.name,
          'io.kubernetes.cri.sandbox-namespace': spec.metadata.namespace,
          'io.kubernetes.cri.sandbox-uid': spec.metadata.uid,
        },
      });
      await writeFile(join(bundleDir, 'config.json'), JSON.stringify(ociSpec), { mode: PRIVATE_FILE });
      const pid = await runc.create(id, bundleDir, join(bundleDir, 'infra.pid'));
      store.sandboxes.infraCreated(id, pid);
    });
    await steps.run('infra-start', () => runc.start(id));
  }

  /** Idempotent: an unknown sandbox has nothing left to stop. */
  async stop(idOrPrefix: string): Promise<void> {
    const sandbox = findSandbox(this.deps.store, idOrPrefix, true);
    if (!sandbox) return;
    const { id } = sandbox;
    await this.deps.pods.close(id, () => this.sandboxLock.with(id, () => this.stopLocked(id)));
  }

  private async stopLocked(id: string): Promise<void> {
    const { sandboxes } = this.deps.store;
    const sandbox = sandboxes.get(id);
    if (!sandbox) return;
    // kubelet has normally stopped them, with their grace periods, before it gets here.
    await asStep('containers-stop', async () => this.deps.containers?.stopAllInSandbox(id));
    // The pod's containers are stopped, so nothing needs the network while the infra dies. A DEL
    // failure is thrown (kubelet retries Stop) and the record keeps saying the network is up.
    await allSettledOrThrow([
      (sandbox.infra ? this.stopInfra(sandbox) : Promise.resolve()).then(() => {
        sandboxes.markNotReady(id);
        if (sandbox.state !== 'NOTREADY') this.deps.events.publish(sandboxChange('STOPPED', id));
      }),
      this.teardown.releaseNetwork(id),
    ]);
    await this.teardown.unmountForStop(id);
  }

  private async stopInfra(sandbox: Sandbox): Promise<void> {
    const { config } = this.deps;
    const { runc } = this.deps.runtimes.of(sandbox);
    const { id } = sandbox;
    await asStep('infra-stop', async () => {
      const state = await runc.state(id);
      const pid = state?.pid || sandbox.pid;
      if (!state || state.status === 'stopped' || !(await isRunning(pid))) return;
      await runc.kill(id, 'SIGTERM');
      if (await waitForExit(pid, config.stopGraceMs)) return;
      await runc.kill(id, 'SIGKILL');
      if (!(await waitForExit(pid, 10_000))) throw new Error(`infra process ${pid} survived SIGKILL`);
    });
  }

  /** Idempotent: an unknown id is success. */
  async remove(idOrPrefix: string): Promise<void> {
    const found = findSandbox(this.deps.store, idOrPrefix, true);
    if (!found) return;
    await this.deps.pods.close(found.id, () => this.removeClosed(found.id));
  }

  private async removeClosed(id: string): Promise<void> {
    await this.sandboxLock.with(id, async () => {
      const sandbox = this.deps.store.sandboxes.get(id);
      if (!sandbox) return;
      // After a Stop that got as far as the network, only its unmounts can be left, and the teardown
      // below makes each of them anyway (idempotent syscalls): no read of the mount table to find
      // out, which waited behind the thread pool's other work for 15 ms while pods came and went.
      if (sandbox.state !== 'NOTREADY' || networkMayBeAttached(sandbox)) await this.stopLocked(id);
      await asStep('containers-remove', async () => this.deps.containers?.removeAllInSandbox(id));
      // Described while its status can still be built; sent only once it is really gone.
      const deleted = this.deps.events.capture(sandboxChange('DELETED', id));
      await this.teardown.all(id);
      deleted();
      this.deps.logger.info({ sandbox: id }, 'pod sandbox removed');
    });
  }

  /** For the daemon's stop: resolves once the dirs of removed pods are deleted, or left to start-up. */
  filesRemoved(): Promise<void> {
    return this.teardown.filesRemoved();
  }

  /** The full id of a READY sandbox, for PortForward to validate before it hands out a URL. */
  readyId(idOrPrefix: string): string {
    return this.findReady(idOrPrefix).id;
  }

  /** A TCP connection to `port` on localhost in the pod's network (the host's for host-network pods). */
  async dialPort(idOrPrefix: string, port: number, signal: AbortSignal): Promise<Duplex> {
    const sandbox = this.findReady(idOrPrefix);
    const netns = sandbox.hostNetwork ? null : sandbox.netnsPath;
    if (!sandbox.hostNetwork && !netns)
      throw new FailedPreconditionError(`pod sandbox ${sandbox.id} has no network namespace`);
    return dialLocalhost(netns, port, { signal, timeoutMs: this.deps.config.runtimeTimeoutMs });
  }

  status(idOrPrefix: string, verbose: boolean): { view: SandboxView; info?: SandboxVerboseInfo } {
    const sandbox = findSandbox(this.deps.store, idOrPrefix, false);
    const view = toView(sandbox);
    if (!verbose) return { view };
    return {
      view,
      info: {
        sandboxKey: sandbox.netnsPath,
        // 0 for a pod without infra: no process holds its namespaces.
        pid: sandbox.pid,
        hostNetwork: sandbox.hostNetwork,
        networkState: sandbox.networkState,
        cniResult: sandbox.cniResults,
        sandboxDir: sandbox.sandboxDir,
        cgroupParent: sandbox.cgroupParent,
      },
    };
  }

  list(filter: SandboxFilter): SandboxView[] {
    const { sandboxes } = this.deps.store;
    const found = filter.id ? sandboxes.findByIdPrefix(filter.id) : sandboxes.list();
    return found
      .filter((sandbox) => sandbox.state !== 'CREATING')
      .map(toView)
      .filter((view) => !filter.state || view.state === filter.state)
      .filter((view) => matchesLabels(view.labels, filter.labelSelector));
  }

  private findReady(idOrPrefix: string): Sandbox {
    const sandbox = findSandbox(this.deps.store, idOrPrefix, false);
    if (sandbox.state !== 'READY')
      throw new FailedPreconditionError(`pod sandbox ${sandbox.id} is not ready`);
    return sandbox;
  }
}

export function toView(sandbox: Sandbox): SandboxView {
  const { spec } = sandbox;
  return {
    id: sandbox.id,
    metadata: spec.metadata,
    state: sandbox.state === 'READY' ? 'SANDBOX_READY' : 'SANDBOX_NOTREADY',
    createdAt: sandbox.createdAt,
    ip: sandbox.ip,
    additionalIps: sandbox.additionalIps,
    namespaces: spec.namespaces,
    labels: spec.labels,
    annotations: spec.annotations,
    runtimeHandler: sandbox.runtimeHandler,
  };
}
