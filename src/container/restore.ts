/**
 * Containers made from a checkpoint archive (see checkpoint-archive.ts): what CreateContainer does
 * differently for one, and the restore its StartContainer does in place of a start.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { FailedPreconditionError, errorMessage } from '../errors.js';
import { containerDir } from '../imagestore/rootfs.js';
import type { Logger } from '../log.js';
import type { Container } from '../model/container.js';
import type { Sandbox } from '../model/sandbox.js';
import type { MonitorCreated, RuntimeHandler } from '../runtime/index.js';
import type { ImageRecord } from '../store/types.js';
import {
  applyRootfsChanges,
  checkArchive,
  unpackArchive,
  ARCHIVE_FILES,
  type CheckedArchive,
} from './checkpoint-archive.js';
import type { ContainerServiceDeps } from './context.js';

/** A bound for a hang in reading or unpacking an archive, which may hold gigabytes of memory pages. */
const ARCHIVE_TIMEOUT_MS = 10 * 60_000;
/** The archive, unpacked in the container's dir until the restore has used it. */
const UNPACKED_DIR = 'checkpoint';
/** criu's work dir (restore.log) during a restore, under berth's root dir as the container's dir is. */
const WORK_DIR = 'restore-work';

/** A checked archive and the image its container was made from, which must be in berth's store. */
export interface CheckpointSource {
  archive: CheckedArchive;
  image: ImageRecord;
}

/**
 * The archive at `path`, checked (InvalidArgumentError naming the request field), and its image:
 * FailedPreconditionError naming it when berth has not pulled it, for kubelet pulls the image a
 * pod names, which here is the archive, never the image under it.
 */
export async function checkpointSource(
  images: ContainerServiceDeps['images'],
  path: string,
): Promise<CheckpointSource> {
  const archive = await checkArchive(path, ARCHIVE_TIMEOUT_MS);
  const { rootfsImage, rootfsImageRef } = archive.config;
  const resolved =
    (rootfsImageRef !== '' ? images.resolve(rootfsImageRef) : undefined) ??
    (rootfsImage !== '' ? images.resolve(rootfsImage) : undefined);
  if (!resolved) {
    const named = [rootfsImage, rootfsImageRef].filter((n) => n !== '').join(' ');
    throw new FailedPreconditionError(
      `the image of checkpoint ${path} is not present: pull ${named} before restoring it`,
    );
  }
  return { archive, image: resolved.record };
}

/** The checkpointed container's files in the new one's rootfs, and the archive unpacked beside it. */
export async function unpackCheckpoint(
  source: CheckpointSource,
  id: string,
  rootDir: string,
  rootfs: string,
): Promise<void> {
  const dir = join(containerDir(id, rootDir), UNPACKED_DIR);
  await unpackArchive(source.archive, dir, ARCHIVE_TIMEOUT_MS);
  await applyRootfsChanges(source.archive, dir, rootfs, ARCHIVE_TIMEOUT_MS);
}

/**
 * StartContainer of a container made from a checkpoint: its processes are restored under a new
 * monitor. The unpacked archive has served once they run, and goes; it stays after a failure, for
 * the container is then exited and its removal takes it.
 */
export async function restoreProcess(
  deps: Pick<ContainerServiceDeps, 'config'>,
  runtime: RuntimeHandler,
  container: Container,
  sandbox: Sandbox,
  logger: Logger,
): Promise<MonitorCreated> {
  const dir = containerDir(container.id, deps.config.rootDir);
  const restored = await runtime.restore({
    id: container.id,
    name: monitorName(sandbox, container),
    bundleDir: container.bundleDir,
    logPath: container.logPath,
    stdin: container.spec.stdin,
    stdinOnce: container.spec.stdinOnce,
    tty: container.spec.tty,
    imagePath: join(dir, UNPACKED_DIR, ARCHIVE_FILES.checkpoint),
    workPath: join(dir, WORK_DIR),
  });
  await rm(join(dir, UNPACKED_DIR), { recursive: true, force: true }).catch((err: unknown) => {
    logger.warn({ container: container.id, err: errorMessage(err) }, 'removing a used checkpoint failed');
  });
  return restored;
}

/** How conmon names a container in its own messages. */
export function monitorName(sandbox: Sandbox, container: Pick<Container, 'spec'>): string {
  const pod = sandbox.spec;
  return `${pod.metadata.namespace}_${pod.metadata.name}_${container.spec.metadata.name}`;
}
