import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { Cni } from '../cni/index.js';
import { loadDefaultNetwork } from '../cni/config.js';
import type { CniNetworkList } from '../cni/types.js';
import type { BerthConfig } from '../config/types.js';
import { AlreadyExistsError, FailedPreconditionError, StepError } from '../errors.js';
import type { Logger } from '../log.js';
import { dialLocalhost } from '../netns/dial.js';
import { createPinnedNetns, isMounted, removeNetns, unmountNetns } from '../netns/index.js';
import { cgroupsPath } from '../oci/cgroups.js';
import { buildInfraSpec } from '../oci/infra.js';
import { clampOomScoreAdj } from '../oci/oom.js';
import type { Runc } from '../oci/runc.js';
import { isRunning, waitForExit } from '../process/index.js';
import type { Store } from '../store/index.js';
import type { SandboxRow } from '../store/types.js';
import { mountShm, unmountShm, writeHostnameFile, writeResolvConf } from './files.js';
import type { PodGate } from './gate.js';
import { KeyedLock } from '../operation/lock.js';
import { attach, attachmentFor, detach, storedNetworking } from './network.js';
import type { SandboxFilter, SandboxSpec, SandboxVerboseInfo, SandboxView } from './types.js';
import { Steps, allSettledOrThrow } from '../operation/steps.js';
import { pauseIfAsked } from '../operation/pause.js';
import { matchesLabels } from '../operation/lookup.js';
import { findSandbox } from './lookup.js';
import { nowNanos } from '../time.js';

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
  runc: Runc;
  logger: Logger;
  infraRootfs: string;
  containers?: PodContainers;
  /** Shared with the container service: a pod being stopped or removed takes no new container. */
  pods: PodGate;
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

  constructor(private readonly deps: SandboxServiceDeps) {}

  /** The pod network is ready when a default CNI network loads from the conf dir. */
  async networkStatus(): Promise<NetworkStatus> {
    const loaded = await loadDefaultNetwork(this.deps.config.cniConfDir);
    return loaded.network ? { ready: true } : { ready: false, reason: loaded.reason };
  }

  async run(spec: SandboxSpec): Promise<string> {
    const m = spec.metadata;
    return this.podLock.with(`${m.namespace}/${m.name}/${m.uid}/${m.attempt}`, async () => {
      const existing = this.deps.store.findSandboxByMetadata(m.namespace, m.name, m.uid, m.attempt);
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
    const { config, store } = this.deps;
    const id = randomBytes(32).toString('hex');
    const log = this.deps.logger.child({ sandbox: id });
    const hostNetwork = spec.namespaces.network === 'NODE';
    const sandboxDir = join(config.rootDir, 'sandboxes', id);
    const netnsName = `${NETNS_PREFIX}${id}`;
    const netnsPath = hostNetwork ? null : join(config.netnsDir, netnsName);

    let defaultNetwork: CniNetworkList | null = null;
    if (!hostNetwork) {
      const loaded = await loadDefaultNetwork(config.cniConfDir);
      if (!loaded.network) throw new FailedPreconditionError(`pod network is not ready: ${loaded.reason}`);
      defaultNetwork = loaded.network;
    }

    // The row is written first and doubles as the journal: a crash at any later step leaves a
    // CREATING row that start-up repair rolls back using the paths recorded here.
    store.insertSandbox({
      id,
      name: spec.metadata.name,
      namespace: spec.metadata.namespace,
      uid: spec.metadata.uid,
      attempt: spec.metadata.attempt,
      state: 'CREATING',
      step: 'reserve',
      configJson: JSON.stringify(spec),
      runtimeHandler: spec.runtimeHandler,
      hostNetwork,
      netnsPath,
      networkState: 'NONE',
      cniConfigJson: null,
      cniResultJson: null,
      ip: '',
      additionalIps: [],
      createdAt: nowNanos(),
      pid: 0,
      cgroupParent: spec.cgroupParent,
      sandboxDir,
    });

    const steps = new Steps(log, async (step) => {
      store.updateSandbox(id, { step });
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
          steps.onUndo('sandbox-dir', () => rm(sandboxDir, { recursive: true, force: true }));
          await mkdir(sandboxDir, { recursive: true, mode: 0o711 });
          await writeResolvConf(sandboxDir, spec.dnsConfig);
          await writeHostnameFile(sandboxDir, spec.hostname);
          if (spec.namespaces.ipc !== 'NODE') {
            // Registered after the dir's undo, so it runs first: rm must not walk a mounted tmpfs.
            steps.onUndo('shm', () => unmountShm(sandboxDir));
            await mountShm(sandboxDir);
          }
        }),
        netnsPath
          ? steps.run('netns', async () => {
              steps.onUndo('netns', () => removeNetns(netnsPath));
              await createPinnedNetns(config.netnsDir, netnsName, config.runtimeTimeoutMs);
            })
          : Promise.resolve(),
      ]);
      // The infra only needs the netns to exist, not to be configured: CNI and runc run side by side.
      await allSettledOrThrow([
        netnsPath && defaultNetwork
          ? this.addNetwork(steps, id, netnsPath, spec, defaultNetwork)
          : Promise.resolve(),
        this.startInfra(steps, id, spec, sandboxDir, netnsPath),
      ]);
      store.updateSandbox(id, { state: 'READY', step: 'ready' });
      steps.release();
      log.info(
        { ip: store.getSandbox(id)?.ip, netns: netnsPath, stepsMs: steps.timingsMs },
        'pod sandbox ready',
      );
      return id;
    } catch (err) {
      const failure = err instanceof StepError ? err : new StepError('run', err);
      log.error({ step: failure.step, err: failure.message }, 'RunPodSandbox failed, undoing');
      const failedUndos = await steps.unwind();
      if (failedUndos.length === 0) {
        store.deleteSandbox(id);
      } else {
        // Keep the record so Stop/Remove and the next start retry what could not be undone.
        store.updateSandbox(id, { state: 'NOTREADY', pid: 0, step: `failed at ${failure.step}` });
      }
      throw failure;
    }
  }

  private async addNetwork(
    steps: Steps,
    id: string,
    netnsPath: string,
    spec: SandboxSpec,
    defaultNetwork: CniNetworkList,
  ): Promise<void> {
    const { store, cni } = this.deps;
    await steps.run('cni-add', async () => {
      const stored = storedNetworking(attachmentFor(id, netnsPath, spec), defaultNetwork);
      // Recorded before the first ADD: a crash mid-ADD still leads to a DEL with this exact input.
      store.updateSandbox(id, { networkState: 'ADDING', cniConfigJson: JSON.stringify(stored) });
      steps.onUndo('cni-add', () =>
        detach(cni, store.getSandbox(id) ?? { cniConfigJson: null, cniResultJson: null }),
      );
      const outcome = await attach(cni, stored);
      store.updateSandbox(id, {
        networkState: 'READY',
        cniResultJson: JSON.stringify(outcome.results),
        ip: outcome.ip,
        additionalIps: outcome.additionalIps,
      });
    });
  }

  private async startInfra(
    steps: Steps,
    id: string,
    spec: SandboxSpec,
    sandboxDir: string,
    netnsPath: string | null,
  ): Promise<void> {
    const { config, store, runc } = this.deps;
    await steps.run('infra-create', async () => {
      steps.onUndo('infra-create', () => runc.delete(id, { force: true }));
      const bundleDir = join(sandboxDir, 'bundle');
      await mkdir(bundleDir, { recursive: true });
      const ociSpec = buildInfraSpec({
        rootfsPath: this.deps.infraRootfs,
        // A pod of its own network always gets its own UTS namespace, named like the host when
        // kubelet sends no hostname: its containers must never be able to rename the node.
        hostname: netnsPath ? spec.hostname || hostname() : '',
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
      await writeFile(join(bundleDir, 'config.json'), JSON.stringify(ociSpec));
      const pid = await runc.create(id, bundleDir, join(bundleDir, 'infra.pid'));
      store.updateSandbox(id, { pid });
    });
    await steps.run('infra-start', () => runc.start(id));
  }

  /** Idempotent: an unknown sandbox has nothing left to stop. */
  async stop(idOrPrefix: string): Promise<void> {
    const row = this.resolve(idOrPrefix, true);
    if (!row) return;
    await this.deps.pods.close(row.id, () => this.sandboxLock.with(row.id, () => this.stopLocked(row.id)));
  }

  private async stopLocked(id: string): Promise<void> {
    const { store } = this.deps;
    const row = store.getSandbox(id);
    if (!row) return;
    // kubelet has normally stopped them, with their grace periods, before it gets here.
    try {
      await this.deps.containers?.stopAllInSandbox(id);
    } catch (err) {
      throw new StepError('containers-stop', err);
    }
    // The pod's containers are stopped, so nothing needs the network while the infra dies.
    await allSettledOrThrow([
      this.stopInfra(row).then(() => store.updateSandbox(id, { state: 'NOTREADY', pid: 0 })),
      this.teardownNetwork(row),
    ]);
    await unmountShm(row.sandboxDir);
    if (row.netnsPath) {
      try {
        await unmountNetns(row.netnsPath);
      } catch (err) {
        throw new StepError('netns-unmount', err);
      }
    }
  }

  private async stopInfra(row: SandboxRow): Promise<void> {
    const { runc, config } = this.deps;
    try {
      const state = await runc.state(row.id);
      const pid = state?.pid || row.pid;
      if (!state || state.status === 'stopped' || !(await isRunning(pid))) return;
      await runc.kill(row.id, 'SIGTERM');
      if (await waitForExit(pid, config.stopGraceMs)) return;
      await runc.kill(row.id, 'SIGKILL');
      if (!(await waitForExit(pid, 10_000))) throw new Error(`infra process ${pid} survived SIGKILL`);
    } catch (err) {
      throw new StepError('infra-stop', err);
    }
  }

  /** A DEL failure is thrown (kubelet retries Stop) and the row keeps saying the network is up. */
  private async teardownNetwork(row: SandboxRow): Promise<void> {
    if (row.networkState !== 'ADDING' && row.networkState !== 'READY') return;
    try {
      await detach(this.deps.cni, row);
    } catch (err) {
      throw new StepError('cni-del', err);
    }
    this.deps.store.updateSandbox(row.id, { networkState: 'TORN_DOWN' });
  }

  /** Idempotent: an unknown id is success. */
  async remove(idOrPrefix: string): Promise<void> {
    const found = this.resolve(idOrPrefix, true);
    if (!found) return;
    await this.deps.pods.close(found.id, () => this.removeClosed(found.id));
  }

  private async removeClosed(id: string): Promise<void> {
    await this.sandboxLock.with(id, async () => {
      const { store, runc } = this.deps;
      const row = store.getSandbox(id);
      if (!row) return;
      const needsStop =
        row.state !== 'NOTREADY' ||
        row.networkState === 'ADDING' ||
        row.networkState === 'READY' ||
        (row.netnsPath !== null && (await isMounted(row.netnsPath)));
      if (needsStop) await this.stopLocked(row.id);
      try {
        await this.deps.containers?.removeAllInSandbox(row.id);
      } catch (err) {
        throw new StepError('containers-remove', err);
      }
      try {
        await runc.delete(row.id, { force: true });
      } catch (err) {
        throw new StepError('infra-delete', err);
      }
      if (row.netnsPath) {
        try {
          await removeNetns(row.netnsPath);
        } catch (err) {
          throw new StepError('netns-remove', err);
        }
      }
      await unmountShm(row.sandboxDir);
      await rm(row.sandboxDir, { recursive: true, force: true });
      store.deleteSandbox(row.id);
      this.deps.logger.info({ sandbox: row.id }, 'pod sandbox removed');
    });
  }

  /** The full id of a READY sandbox, for PortForward to validate before it hands out a URL. */
  readyId(idOrPrefix: string): string {
    return this.resolveReady(idOrPrefix).id;
  }

  /** A TCP connection to `port` on localhost in the pod's network (the host's for host-network pods). */
  async dialPort(idOrPrefix: string, port: number, signal: AbortSignal): Promise<Duplex> {
    const row = this.resolveReady(idOrPrefix);
    const netns = row.hostNetwork ? null : row.netnsPath;
    if (!row.hostNetwork && !netns)
      throw new FailedPreconditionError(`pod sandbox ${row.id} has no network namespace`);
    return dialLocalhost(netns, port, { signal, timeoutMs: this.deps.config.runtimeTimeoutMs });
  }

  status(idOrPrefix: string, verbose: boolean): { view: SandboxView; info?: SandboxVerboseInfo } {
    const row = this.resolve(idOrPrefix, false);
    const view = toView(row);
    if (!verbose) return { view };
    return {
      view,
      info: {
        sandboxKey: row.netnsPath,
        pid: row.pid,
        hostNetwork: row.hostNetwork,
        networkState: row.networkState,
        cniResult: row.cniResultJson ? JSON.parse(row.cniResultJson) : null,
        sandboxDir: row.sandboxDir,
        cgroupParent: row.cgroupParent,
      },
    };
  }

  list(filter: SandboxFilter): SandboxView[] {
    const { store } = this.deps;
    const rows = filter.id ? store.findSandboxesByIdPrefix(filter.id) : store.listSandboxes();
    return rows
      .filter((row) => row.state !== 'CREATING')
      .map(toView)
      .filter((view) => !filter.state || view.state === filter.state)
      .filter((view) => matchesLabels(view.labels, filter.labelSelector));
  }

  private resolveReady(idOrPrefix: string): SandboxRow {
    const row = this.resolve(idOrPrefix, false);
    if (row.state !== 'READY') throw new FailedPreconditionError(`pod sandbox ${row.id} is not ready`);
    return row;
  }

  private resolve(idOrPrefix: string, allowMissing: true): SandboxRow | undefined;
  private resolve(idOrPrefix: string, allowMissing: false): SandboxRow;
  private resolve(idOrPrefix: string, allowMissing: boolean): SandboxRow | undefined {
    return allowMissing
      ? findSandbox(this.deps.store, idOrPrefix, true)
      : findSandbox(this.deps.store, idOrPrefix, false);
  }
}

export function toView(row: SandboxRow): SandboxView {
  const spec = JSON.parse(row.configJson) as SandboxSpec;
  return {
    id: row.id,
    metadata: spec.metadata,
    state: row.state === 'READY' ? 'SANDBOX_READY' : 'SANDBOX_NOTREADY',
    createdAt: row.createdAt,
    ip: row.ip,
    additionalIps: row.additionalIps,
    namespaces: spec.namespaces,
    labels: spec.labels,
    annotations: spec.annotations,
    runtimeHandler: row.runtimeHandler,
  };
}
