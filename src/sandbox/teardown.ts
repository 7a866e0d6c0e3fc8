import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { CgroupManager } from '../cgroups/index.js';
import type { Cni } from '../cni/index.js';
import { errorMessage } from '../errors.js';
import type { Logger } from '../log.js';
import type { Sandbox } from '../model/sandbox.js';
import { removeNetns, unmountNetns, unmountPins } from '../netns/index.js';
import { asStep } from '../operation/steps.js';
import { RunningWork } from '../shutdown.js';
import type { SandboxRepo } from '../store/index.js';
import { setAsideSandboxDir, SHM_DIR, unmountShm } from './files.js';
import { namespaceMounts, pinPaths } from './namespaces.js';
import { detach } from './network.js';
import type { RuntimeHandlers } from '../runtime/index.js';

export interface TeardownDeps {
  sandboxes: SandboxRepo;
  cni: Cni;
  runtimes: RuntimeHandlers;
  /** Removes the pod's own cgroup. */
  cgroups: CgroupManager;
  /** Bounds the wait for what still runs in the pod's cgroup to go. */
  timeoutMs: number;
  logger: Logger;
}

/** ADDING counts: a crash or failure mid-ADD may have left an attachment that only a DEL removes. */
export function networkMayBeAttached(sandbox: Pick<Sandbox, 'networkState'>): boolean {
  return sandbox.networkState === 'ADDING' || sandbox.networkState === 'READY';
}

/**
 * A sandbox as a teardown action is given it: by id, when the action must read the journal record
 * as it is NOW (an undo registered before the CNI input was recorded), or as the caller has just
 * read it under the sandbox's lock (Stop, and Remove's actions after their one read).
 */
type SandboxRef = string | Sandbox;

/**
 * The undo of everything RunPodSandbox makes, one named action per thing, each written once for
 * the three callers that need it: the undos of a failed RunPodSandbox, RemovePodSandbox, and the
 * start-up repair of a RunPodSandbox a daemon exit interrupted (StopPodSandbox uses the network
 * and netns ones). Each is idempotent: with no record, or nothing recorded to undo, it does
 * nothing, so a teardown that failed halfway can simply be run again.
 */
export class SandboxTeardown {
  /** Deletions of set-aside sandbox dirs still under way. */
  private readonly deletions = new RunningWork();

  constructor(private readonly deps: TeardownDeps) {}

  /** Kills and deletes the infra container, whatever state runc has it in. */
  async deleteInfra(ref: SandboxRef): Promise<void> {
    const sandbox = this.current(ref);
    if (!sandbox?.infra) return;
    const { id } = sandbox;
    await asStep('infra-delete', () => this.deps.runtimes.of(sandbox).delete(id, { force: true }));
  }

  /**
   * DEL of every network the record says may be attached, then the record says torn down. A failed
   * DEL leaves the record saying the network is up, so that the next teardown retries it. Returns
   * whether there was a network to release.
   */
  async releaseNetwork(ref: SandboxRef): Promise<boolean> {
    const sandbox = this.current(ref);
    if (!sandbox || !networkMayBeAttached(sandbox)) return false;
    await asStep('cni-del', () => detach(this.deps.cni, sandbox));
    this.deps.sandboxes.networkTornDown(sandbox.id);
    return true;
  }

  /** Stop's half of the netns teardown: the pin stays, a file, until Remove. */
  async unmountNetns(ref: SandboxRef): Promise<void> {
    const netnsPath = this.current(ref)?.netnsPath;
    if (!netnsPath) return;
    await asStep('netns-unmount', () => unmountNetns(netnsPath));
  }

  async removeNetns(ref: SandboxRef): Promise<void> {
    const netnsPath = this.current(ref)?.netnsPath;
    if (!netnsPath) return;
    await asStep('netns-remove', () => removeNetns(netnsPath));
  }

  async unmountShm(ref: SandboxRef): Promise<void> {
    const sandbox = this.current(ref);
    if (sandbox) await unmountShm(sandbox.sandboxDir);
  }

  /** The ipc and uts pins of a pod without infra; the files stay, in the sandbox dir, until Remove. */
  async unmountNamespaces(ref: SandboxRef): Promise<void> {
    const sandbox = this.current(ref);
    if (sandbox) await asStep('namespaces-unmount', () => unmountPins(pinPaths(sandbox)));
  }

  /**
   * Stop's unmounts: the shm tmpfs, the namespace pins and the netns, with one mount table read
   * and one umount for all of them. The files stay until Remove.
   */
  async unmountForStop(ref: SandboxRef): Promise<void> {
    const sandbox = this.current(ref);
    if (!sandbox) return;
    const paths = [join(sandbox.sandboxDir, SHM_DIR), ...namespaceMounts(sandbox)];
    await asStep('unmount', () => unmountPins(paths));
  }

  /**
   * The shm tmpfs and the namespace pins in it are unmounted, the dir is set aside, and its
   * contents are deleted in the background: nothing of the pod is left at its path on return.
   */
  async removeDir(ref: SandboxRef): Promise<void> {
    const sandbox = this.current(ref);
    if (!sandbox) return;
    await this.unmountNamespaces(sandbox);
    const aside = await setAsideSandboxDir(sandbox.sandboxDir);
    if (aside === null) return;
    void this.deletions.track(
      rm(aside, { recursive: true, force: true }).catch((err: unknown) =>
        this.deps.logger.warn(
          { dir: aside, err: errorMessage(err) },
          'deleting a removed sandbox dir failed; start-up sweeps it',
        ),
      ),
    );
  }

  /** The cgroup berth made for the pod, after everything in it: its infra and containers. */
  async removePodCgroup(ref: SandboxRef): Promise<void> {
    const parent = this.current(ref)?.podCgroup;
    if (!parent) return;
    await asStep('pod-cgroup-remove', () => this.deps.cgroups.removePodCgroup(parent, this.deps.timeoutMs));
  }

  /** The cgroup berth made for pod `id` if it made one, for a pod whose record is gone. */
  async removeOrphanPodCgroup(id: string): Promise<void> {
    const { cgroups, timeoutMs } = this.deps;
    await cgroups.removePodCgroup(cgroups.podCgroupFor(id), timeoutMs);
  }

  /** Resolves once the dirs set aside so far are deleted (or have failed to be: start-up sweeps those). */
  filesRemoved(): Promise<void> {
    return this.deletions.settled();
  }

  /**
   * Everything, newest first, then the record itself. Stops at the first failure and keeps the
   * record, so the next Remove (or start-up repair) retries from there. The record is read once:
   * no action changes what a later one reads of it.
   */
  async all(id: string): Promise<void> {
    const sandbox = this.deps.sandboxes.get(id);
    if (sandbox) {
      await this.deleteInfra(sandbox);
      await this.releaseNetwork(sandbox);
      await this.removeNetns(sandbox);
      await this.removeDir(sandbox);
      await this.removePodCgroup(sandbox);
    }
    this.deps.sandboxes.delete(id);
  }

  private current(ref: SandboxRef): Sandbox | undefined {
    return typeof ref === 'string' ? this.deps.sandboxes.get(ref) : ref;
  }
}
