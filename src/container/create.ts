import { randomBytes } from 'node:crypto';
import { mkdir, realpath, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { FailedPreconditionError, InvalidArgumentError, NotFoundError } from '../errors.js';
import { containerChange } from '../events/lifecycle.js';
import { containerDir, prepareRootfs, volumesDir } from '../imagestore/rootfs.js';
import { newContainer, type ContainerSpec, type ContainerUserNamespace } from '../model/container.js';
import { podCgroupParent, type Sandbox } from '../model/sandbox.js';
import { pauseIfAsked } from '../operation/pause.js';
import { Steps } from '../operation/steps.js';
import { allSettledOrThrow } from '../kit/settle.js';
import { requireInfraRunning } from '../sandbox/infra.js';
import { requireReady } from '../sandbox/lookup.js';
import { nowNanos } from '../time.js';
import type { ContainerServiceDeps } from './context.js';
import { findImageVolumes, mountImageVolumes, withImageVolumeSources } from './image-volumes.js';
import { findContainer } from './lookup.js';
import { prepareSpec, type PrepareInput } from './prepare.js';
import { checkUserNamespace, rootfsIdmap } from './userns.js';
import { findCheckpoint, monitorName, restoredRequest, unpackCheckpoint } from './restore.js';
import { restoredSpec } from '../oci/restored-spec.js';
import { CREATE_STEPS, type ContainerTeardown, type CreateStep } from './teardown.js';
import { PRIVATE_DIR, PRIVATE_FILE } from '../file-modes.js';

/**
 * CreateContainer: a journal record first, then the named steps of teardown.ts's CREATE_STEPS,
 * each registering its undo before it acts.
 */
export class ContainerCreation {
  private guard: Promise<PrepareInput['guard']> | null = null;

  constructor(
    private readonly deps: ContainerServiceDeps,
    private readonly teardown: ContainerTeardown,
  ) {}

  /**
   * Call inside the pod's gate, with the pod as read when the gate was entered: a Stop or Remove
   * of the pod that closed it before is finished, and none can start until this one is done.
   */
  async inPod(sandbox: Sandbox, asked: ContainerSpec, userns: ContainerUserNamespace): Promise<string> {
    const { config, store, images } = this.deps;
    requireReady(sandbox);
    checkUserNamespace(userns, sandbox);
    // A checkpoint (an archive, or an image holding one): the container is made from the
    // checkpointed one's image, files and spec, and its start restores its processes.
    const checkpoint = await findCheckpoint(this.deps, asked.image);
    const requested = checkpoint ? restoredRequest(asked, checkpoint) : asked;
    if (checkpoint && sandbox.spec.userNamespace !== null) {
      // The archive's files and processes hold the ids they had; nothing here maps them yet.
      throw new FailedPreconditionError(
        `checkpoint ${requested.image}: restoring into a pod of its own user namespace is not supported`,
      );
    }
    const image = checkpoint?.image ?? images.resolve(requested.image)?.record;
    if (!image) throw new NotFoundError('image', requested.image);
    const { spec, volumes } = findImageVolumes(requested, images);
    const imageConfig = image.config;
    const pod = sandbox.spec;

    const id = randomBytes(32).toString('hex');
    const log = this.deps.logger.child({ container: id, sandbox: sandbox.id });
    const bundleDir = join(containerDir(id, config.rootDir), 'bundle');
    const logPath = pod.logDirectory && spec.logPath ? join(pod.logDirectory, spec.logPath) : '';
    // Containers nest in their pod's cgroup (kubelet's, or berth's), so pod-level limits and accounting
    // cover them; pods from before berth made its own keep theirs in berth's shared parent.
    const cgroups = this.deps.cgroups.cgroupsPath(podCgroupParent(sandbox), id);

    // The record is the journal, written first: a crash later leaves a CREATING record that
    // start-up rolls back. It also reserves the (sandbox, name, attempt) triple, and journals the
    // first step, which then costs no commit of its own.
    store.containers.insert({
      ...newContainer({
        id,
        sandboxId: sandbox.id,
        spec,
        imageId: image.id,
        createdAt: nowNanos(),
        logPath,
        bundleDir,
        cgroupsPath: cgroups,
        restore: checkpoint !== null,
      }),
      step: CREATE_STEPS[0],
    });

    const steps = new Steps('CreateContainer', log, async (step) => {
      store.containers.beginStep(id, step);
      await pauseIfAsked(
        {
          pauseBeforeStep: this.deps.pauseBeforeStep,
          stateDir: config.stateDir,
          operation: 'CreateContainer',
        },
        step,
        log,
      );
    });
    const step = <T>(name: CreateStep, act: () => Promise<T>): Promise<T> =>
      steps.run(name, async () => {
        const undo = this.teardown.undoOf(name, id);
        if (undo) steps.onUndo(name, undo);
        return act();
      });
    const runtime = this.deps.runtimes.of(sandbox);
    runtime.prepareForCreate();
    try {
      // The image volumes are mounted in the container's dir: the rootfs undo unmounts them too.
      const [rootfs, volumeSources] = await step('rootfs', async () => {
        const idmap = rootfsIdmap(sandbox);
        const path = await prepareRootfs(id, imageConfig.rootfs.diff_ids, config.rootDir, idmap);
        if (checkpoint) await unpackCheckpoint(checkpoint, id, config.rootDir, path);
        return [path, await mountImageVolumes(id, config.rootDir, volumes, idmap)] as const;
      });
      await step('spec', async () => {
        const preparing = prepareSpec({
          containerId: id,
          spec: withImageVolumeSources(spec, volumeSources),
          sandbox,
          image: {
            name: checkpoint?.archive.config.rootfsImage || spec.image,
            config: imageConfig.config ?? {},
          },
          rootfsPath: rootfs,
          cgroupsPath: cgroups,
          targetPid: this.targetPid(spec, sandbox),
          guard: await this.mountGuard(),
          cgroups: this.deps.cgroups,
          host: this.deps.host,
          cdi: this.deps.cdi,
          // Inside the container's dir: the rootfs undo unmounts what is staged there.
          volumesDir: volumesDir(id, config.rootDir),
          timeoutMs: config.runtimeTimeoutMs,
        });
        // The bundle dir meanwhile; both settle before a failure reaches the rootfs undo.
        await allSettledOrThrow([preparing, mkdir(bundleDir, { recursive: true, mode: PRIVATE_DIR })]);
        const prepared = await preparing;
        const ociSpec = checkpoint ? restoredSpec(checkpoint.archive.spec, prepared.spec) : prepared.spec;
        await writeFile(join(bundleDir, 'config.json'), JSON.stringify(ociSpec), {
          mode: PRIVATE_FILE,
        });
        store.containers.userResolved(id, prepared.user);
        for (const note of prepared.notes) log.warn(note);
      });
      // A restored container's monitor comes with its restore, at StartContainer.
      const created = await step('monitor', async () => {
        if (checkpoint) return undefined;
        const made = await runtime.create({
          id,
          name: monitorName(sandbox, { spec }),
          bundleDir,
          logPath,
          stdin: spec.stdin,
          stdinOnce: spec.stdinOnce,
          tty: spec.tty,
        });
        // runc joined the infra's namespaces by its pid: were the infra gone since the spec was
        // checked, and its pid another process's, the container is in that one's. Undone then.
        await requireInfraRunning(sandbox);
        return made;
      });
      // The processes and the state in one commit: nothing acts between the two.
      this.deps.events.publish(containerChange('CREATED', store.containers.markCreated(id, created)));
      steps.release();
      log.info({ name: spec.metadata.name, stepsMs: steps.timingsMs }, 'container created');
      return id;
    } catch (err) {
      throw await steps.abandon(err, {
        operation: 'CreateContainer',
        outsideStep: 'create',
        forget: () => store.containers.delete(id),
        // Visible as exited, so kubelet's garbage collection removes it and retries the cleanup.
        keepFailed: (failure) =>
          store.containers.createFailed(id, {
            exitCode: 128,
            reason: 'CreateError',
            message: failure.message,
            finishedAt: nowNanos(),
          }),
      });
    }
  }

  /**
   * berth's own dirs and files, as real paths: no hostPath source is created in them, and its
   * database and socket are never mounted. Worked out once; the paths do not move while berthd runs.
   */
  private mountGuard(): Promise<PrepareInput['guard']> {
    const { config } = this.deps;
    const real = (p: string): Promise<string> => realpath(p).catch(() => p);
    this.guard ??= (async () => {
      const db = join(config.rootDir, 'berth.db');
      return {
        noCreateUnder: await Promise.all([config.rootDir, config.stateDir].map(real)),
        forbiddenSources: await Promise.all([db, `${db}-wal`, `${db}-shm`, config.socket].map(real)),
      };
    })();
    return this.guard;
  }

  private targetPid(spec: ContainerSpec, sandbox: Sandbox): number | null {
    if (spec.security.namespaces.pid !== 'TARGET') return null;
    const target = findContainer(this.deps.store, spec.security.namespaces.targetId);
    if (target.sandboxId !== sandbox.id) {
      throw new InvalidArgumentError(
        'config.linux.security_context.namespace_options.target_id',
        `container ${target.id} is in another pod sandbox`,
      );
    }
    if (target.state !== 'RUNNING' || target.pid <= 0) {
      throw new FailedPreconditionError(`target container ${target.id} is not running`);
    }
    return target.pid;
  }
}
