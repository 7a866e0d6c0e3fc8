/**
 * CheckpointContainer: a running container's processes dumped with criu and its files' changes
 * read, into one archive at the client's path (archive.ts has the layout). The container runs on:
 * kubelet's checkpoint is forensic, a copy taken of a live container.
 *
 * The container is paused first and resumed last, so that the processes' memory and the files of
 * the archive are of one moment (criu leaves a cgroup it found frozen frozen). Everything is made
 * in a staging dir under the root dir and the archive in a temp file next to `location`, renamed
 * into place once complete: a failure leaves no partial archive. The staging dir's journal names
 * the container and the temp file, for start-up repair (repair.ts) after a kill mid-way.
 */
import { randomBytes } from 'node:crypto';
import { access, constants, copyFile, lstat, mkdtemp, rename, rm, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import {
  AlreadyExistsError,
  BerthError,
  DeadlineExceededError,
  FailedPreconditionError,
  InvalidArgumentError,
  errorMessage,
} from '../errors.js';
import { runtimeOf, type ContainerContext } from '../container/context.js';
import { criuUnavailable } from '../container/criu.js';
import { currentContainer, findContainer, stateWord } from '../container/lookup.js';
import { ensureDir, PRIVATE_DIR, PRIVATE_FILE } from '../file-modes.js';
import { rootfsLayers } from '../imagestore/rootfs.js';
import type { Container } from '../model/container.js';
import { pauseIfAsked } from '../operation/pause.js';
import type { RuntimeHandler } from '../runtime/index.js';
import { ARCHIVE_FILES, type ConfigDump } from '../model/checkpoint-archive.js';
import { CRIU_DEFAULT_TIMEOUT_S, DUMP_LOG } from '../runtime/index.js';
import { stagingPaths, writeArchive, writeJson, writeRootfsDiffTar } from './archive.js';
import { checkpointsDir, JOURNAL, type CheckpointJournal } from './journal.js';
import { readRootfsDiff } from './rootfs-diff.js';

/**
 * criu cannot work on this node: the node's state, not the request, so FAILED_PRECONDITION with
 * criu's own words. (containerd answers it untyped, UNKNOWN on the wire; kubelet makes every
 * CheckpointContainer failure a 500 with the message either way, and a typed status is what every
 * other refusal of berth's is.)
 */
export class CheckpointUnavailableError extends FailedPreconditionError {
  override name = 'CheckpointUnavailableError';
}

export interface CheckpointRequest {
  containerId: string;
  /** Absolute. */
  location: string;
  /** 0 for the default. */
  timeoutSeconds: number;
}

export class ContainerCheckpoint {
  constructor(private readonly ctx: ContainerContext) {}

  async checkpoint(req: CheckpointRequest): Promise<void> {
    const timeoutS = req.timeoutSeconds > 0 ? req.timeoutSeconds : CRIU_DEFAULT_TIMEOUT_S;
    const deadline = Date.now() + timeoutS * 1000;
    const found = findContainer(this.ctx.deps.store, req.containerId);
    await this.ctx.deps.pods.enter(found.sandboxId, () =>
      this.ctx.lock.with(found.id, async () => {
        const container = currentContainer(this.ctx.deps.store, found.id);
        if (container.state !== 'RUNNING') {
          throw new FailedPreconditionError(
            `container ${container.id} is ${stateWord(container)}, not running: only a running container can be checkpointed`,
          );
        }
        // The request's own mistakes first, then what the node cannot do.
        await writableDir(req.location);
        const runtime = runtimeOf(this.ctx.deps, container);
        if (!runtime.features.checkpointRestore) throw this.unavailable(container, runtime);
        const remaining = (): number => {
          const left = deadline - Date.now();
          if (left <= 0)
            throw new DeadlineExceededError(`checkpoint of ${container.id}: timeout ${timeoutS}s exceeded`);
          return left;
        };
        try {
          await this.run(container, runtime, req.location, remaining);
        } catch (err) {
          if (err instanceof BerthError && 'timedOut' in err && err.timedOut === true) {
            throw new DeadlineExceededError(
              `checkpoint of ${container.id}: timeout ${timeoutS}s exceeded: ${errorMessage(err)}`,
            );
          }
          throw err;
        }
      }),
    );
  }

  private unavailable(container: Container, runtime: RuntimeHandler): CheckpointUnavailableError {
    const why = criuUnavailable(this.ctx.deps.host.criu, runtime, 'checkpoint') ?? 'criu is not usable';
    return new CheckpointUnavailableError(`cannot checkpoint container ${container.id}: ${why}`);
  }

  private async run(
    container: Container,
    runtime: RuntimeHandler,
    location: string,
    remaining: () => number,
  ): Promise<void> {
    const { config, logger } = this.ctx.deps;
    const log = logger.child({ container: container.id, op: 'CheckpointContainer' });
    const parent = checkpointsDir(config.rootDir);
    await ensureDir(parent, PRIVATE_DIR);
    const staging = await mkdtemp(join(parent, `${container.id}.`));
    const paths = stagingPaths(staging);
    const tempArchive = join(
      dirname(location),
      `.${basename(location)}.${randomBytes(6).toString('hex')}.tmp`,
    );
    const journal: CheckpointJournal = { containerId: container.id, tempArchive };
    let paused = false;
    try {
      await writeJson(join(staging, JOURNAL), journal);
      await Promise.all([ensureDir(paths.images, PRIVATE_DIR), ensureDir(paths.work, PRIVATE_DIR)]);
      await runtime.pause(container.id);
      paused = true;
      await pauseIfAsked(
        {
          pauseBeforeStep: this.ctx.deps.pauseBeforeStep,
          stateDir: config.stateDir,
          operation: 'CheckpointContainer',
        },
        'checkpoint-dump',
        log,
      );
      await runtime.checkpoint(container.id, {
        imageDir: paths.images,
        workDir: paths.work,
        leaveRunning: true,
        timeoutMs: remaining(),
      });
      const checkpointedTime = new Date().toISOString();
      const layers = await rootfsLayers(container.id, config.rootDir);
      const diff = await readRootfsDiff(layers, remaining());
      await writeRootfsDiffTar(
        layers.upper,
        diff.changed,
        join(paths.contents, ARCHIVE_FILES.rootfsDiff),
        paths.diffList,
        remaining(),
      );
      // Still frozen: the files match the memory. What is left reads berth's own files.
      await runtime.resume(container.id);
      paused = false;
      const names: string[] = [
        ARCHIVE_FILES.config,
        ARCHIVE_FILES.spec,
        ARCHIVE_FILES.checkpoint,
        ARCHIVE_FILES.rootfsDiff,
        ARCHIVE_FILES.deleted,
        ARCHIVE_FILES.dumpLog,
      ];
      await Promise.all([
        writeJson(join(paths.contents, ARCHIVE_FILES.deleted), diff.deleted),
        writeJson(
          join(paths.contents, ARCHIVE_FILES.config),
          this.configDump(container, runtime, checkpointedTime),
        ),
        copyFile(join(container.bundleDir, 'config.json'), join(paths.contents, ARCHIVE_FILES.spec)),
        copyFile(join(paths.work, DUMP_LOG), join(paths.contents, ARCHIVE_FILES.dumpLog)),
        container.logPath === ''
          ? undefined
          : copyFile(container.logPath, join(paths.contents, ARCHIVE_FILES.containerLog)).then(
              () => names.push(ARCHIVE_FILES.containerLog),
              // A log kubelet rotated away or never made is no reason to fail the checkpoint.
              () => undefined,
            ),
      ]);
      // The processes' memory is in there, secrets and keys too: root's alone, as kubelet asks,
      // from its first byte (tar keeps the mode of a file that exists).
      await writeFile(tempArchive, '', { mode: PRIVATE_FILE, flag: 'wx' });
      await writeArchive(paths.contents, names, tempArchive, remaining());
      remaining();
      await rename(tempArchive, location);
      log.info({ location }, 'checkpointed container');
    } finally {
      if (paused)
        await runtime
          .resume(container.id)
          .catch((err: unknown) =>
            log.error({ err: errorMessage(err) }, 'could not resume the container after a failed checkpoint'),
          );
      await rm(tempArchive, { force: true });
      await rm(staging, { recursive: true, force: true });
    }
  }

  private configDump(container: Container, runtime: RuntimeHandler, checkpointedTime: string): ConfigDump {
    const names = this.ctx.deps.store.images.imageNames(container.imageId);
    return {
      id: container.id,
      name: container.name,
      rootfsImage: container.imageName,
      rootfsImageRef: container.imageId,
      rootfsImageName: names.repoTags[0] ?? names.repoDigests[0] ?? container.imageName,
      runtime: runtime.name,
      createdTime: new Date(Number(BigInt(container.createdAt) / 1_000_000n)).toISOString(),
      checkpointedTime,
    };
  }
}

/** The archive's dir must be there and take files: the rename into place needs both. */
async function writableDir(location: string): Promise<void> {
  const dir = dirname(location);
  const st = await stat(dir).catch(() => null);
  if (!st?.isDirectory()) throw new InvalidArgumentError('location', `its directory ${dir} does not exist`);
  try {
    await access(dir, constants.W_OK);
  } catch {
    throw new InvalidArgumentError('location', `its directory ${dir} is not writable`);
  }
  // kubelet names a new file for each checkpoint; a path that is taken (a directory, or a node's
  // file like /etc/passwd) is never replaced by an archive.
  const target = await lstat(location).catch(() => null);
  if (target?.isDirectory()) throw new InvalidArgumentError('location', `${location} is a directory`);
  if (target)
    throw new AlreadyExistsError(`location: ${location} exists, and a checkpoint never replaces a file`);
}
