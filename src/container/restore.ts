/**
 * Containers made from a checkpoint archive (see checkpoint-archive.ts): what CreateContainer does
 * differently for one, and the restore its StartContainer does in place of a start.
 */
import { readFile, rm } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import { FailedPreconditionError, InvalidArgumentError, errorMessage } from '../errors.js';
import { LayerStore } from '../imagestore/layers.js';
import { containerDir } from '../imagestore/rootfs.js';
import type { Logger } from '../log.js';
import type { Container, ContainerSpec } from '../model/container.js';
import type { Sandbox } from '../model/sandbox.js';
import type { MonitorCreated, RuntimeHandler } from '../runtime/index.js';
import type { ImageRecord } from '../store/types.js';
import {
  applyRootfsChanges,
  checkArchive,
  checkArchiveDir,
  ARCHIVE_FIELD,
  unpackArchive,
  type CheckedArchive,
} from './checkpoint-archive.js';
import { ARCHIVE_FILES } from '../model/checkpoint-archive.js';
import type { ContainerServiceDeps } from './context.js';
import { criuUnavailable } from './criu.js';
import { checkRestoredUser, type WantedUser, type WantedUserFields } from '../oci/restored-spec.js';
import type { ResolvedUser, UserRequest } from '../oci/user.js';
import { requireInfraRunning } from '../sandbox/infra.js';
import type { Spec } from '../oci/spec.js';
import { firstMismatch, restoredProcesses, RestoredCredentialsError } from './restored-credentials.js';

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

/** How CRI-O's checkpoint images (buildah: the archive's files as one layer) are marked. */
export const CHECKPOINT_IMAGE_ANNOTATION = 'io.kubernetes.cri-o.annotations.checkpoint.name';

/**
 * What a CreateContainer's image names, when it names a checkpoint: an absolute path is an archive
 * on the node (as CRI-O takes it), and an image whose manifest (or config labels) carries
 * CRI-O's checkpoint annotation holds one as its one layer. Null for any other image.
 */
export async function findCheckpoint(
  deps: Pick<ContainerServiceDeps, 'images' | 'config'>,
  image: string,
): Promise<CheckpointSource | null> {
  if (isAbsolute(image)) return checkpointSource(deps.images, await checkArchive(image, ARCHIVE_TIMEOUT_MS));
  const record = deps.images.resolve(image)?.record;
  if (!record) return null;
  const labels = record.config.config?.Labels ?? {};
  const annotations = await deps.images.manifestAnnotations(record);
  if (!(CHECKPOINT_IMAGE_ANNOTATION in annotations) && !(CHECKPOINT_IMAGE_ANNOTATION in labels)) return null;
  const [layer, ...more] = record.config.rootfs.diff_ids;
  if (layer === undefined || more.length > 0) {
    throw new InvalidArgumentError(
      ARCHIVE_FIELD,
      `checkpoint image ${image} has ${record.config.rootfs.diff_ids.length} layers, not the one holding the archive`,
    );
  }
  const dir = new LayerStore(deps.config.rootDir).fsDir(layer);
  return checkpointSource(deps.images, await checkArchiveDir(dir));
}

/**
 * A checked archive and its image: FailedPreconditionError naming it when berth has not pulled it,
 * for kubelet pulls the image a pod names, which here is the checkpoint, never the image under it.
 */
async function checkpointSource(
  images: ContainerServiceDeps['images'],
  archive: CheckedArchive,
): Promise<CheckpointSource> {
  const { path } = archive;
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

/**
 * The request as the restore carries it out: criu brings the process back on the stdio it had, a
 * terminal or pipes, and its spec (restoredSpec) keeps the archive's `terminal`. The container's
 * tty follows the archive, whatever the new request says, so that conmon offers runc a console
 * exactly when the restored process has one.
 */
export function restoredRequest(requested: ContainerSpec, source: CheckpointSource): ContainerSpec {
  const tty = source.archive.spec.process?.terminal === true;
  return tty === requested.tty ? requested : { ...requested, tty };
}

const SECURITY = 'config.linux.security_context';

/**
 * The identity the request's security context names outright (run_as_user, run_as_group), checked
 * against spec.dump before anything is made. The rest of it (a run_as_username, the image's user,
 * the group file's memberships) is known once the rootfs is: checkResolvedIdentity.
 */
export function checkRequestedIdentity(source: CheckpointSource, security: UserRequest): void {
  const wanted: WantedUser = {};
  if (security.runAsUser !== null) wanted.uid = security.runAsUser;
  if (security.runAsGroup !== null) wanted.gid = security.runAsGroup;
  checkRestoredUser(source.archive.spec, wanted, userFields(security), source.archive.path);
}

/**
 * The whole identity a create resolves for the request (resolveUser: the security context, else
 * the image's user, kubelet sending none when the pod names none), against spec.dump's.
 */
export function checkResolvedIdentity(
  source: CheckpointSource,
  security: UserRequest,
  user: ResolvedUser,
): void {
  checkRestoredUser(source.archive.spec, user, userFields(security), source.archive.path);
}

function userFields(security: UserRequest): WantedUserFields {
  const named = security.runAsUser !== null || security.runAsUsername !== '';
  return {
    uid: `${SECURITY}.${security.runAsUsername !== '' ? 'run_as_username' : 'run_as_user'}`,
    gid: `${SECURITY}.run_as_group`,
    groups: `${SECURITY}.supplemental_groups`,
    ...(named ? {} : { how: "none named: the image's user" }),
  };
}

/**
 * A restore needs criu at its start: refused at create, before the archive is copied, when this
 * node's criu (or the handler's runtime) cannot restore.
 */
export function requireRestorable(
  host: ContainerServiceDeps['host'],
  runtime: Pick<RuntimeHandler, 'name' | 'features'>,
  image: string,
): void {
  const why = criuUnavailable(host.criu, runtime, 'restore');
  if (why !== null) throw new FailedPreconditionError(`cannot restore checkpoint ${image}: ${why}`);
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
 * the container is then exited and its removal takes it. Restored processes whose ids are not the
 * spec's user (refuseForeignCredentials) fail it too.
 */
export async function restoreProcess(
  deps: Pick<ContainerServiceDeps, 'config'>,
  runtime: RuntimeHandler,
  container: Container,
  sandbox: Sandbox,
  logger: Logger,
): Promise<MonitorCreated> {
  // The restore is where runc joins the pod's namespaces, by the paths the spec was given at
  // create: an infra gone since then, its pid perhaps another process's, is not joined.
  await requireInfraRunning(sandbox);
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
  await refuseForeignCredentials(runtime, container, restored);
  await rm(join(dir, UNPACKED_DIR), { recursive: true, force: true }).catch((err: unknown) => {
    logger.warn({ container: container.id, err: errorMessage(err) }, 'removing a used checkpoint failed');
  });
  return restored;
}

/**
 * criu restored the processes with the ids its images hold: any process (real, effective, saved or
 * fs ids, or groups) other than the spec's process.user is SIGKILLed with the whole container, its
 * monitor and runc's container released as after a failed restore, and RestoredCredentialsError
 * (FAILED_PRECONDITION) names it. A check that cannot be made refuses too.
 */
async function refuseForeignCredentials(
  runtime: RuntimeHandler,
  container: Container,
  restored: MonitorCreated,
): Promise<void> {
  let why: string | null;
  try {
    const spec = JSON.parse(await readFile(join(container.bundleDir, 'config.json'), 'utf8')) as Spec;
    why = firstMismatch(await restoredProcesses(restored.pid), spec.process?.user);
  } catch (err) {
    why = `its processes' credentials could not be checked: ${errorMessage(err)}`;
  }
  if (why === null) return;
  let leftover = '';
  try {
    await runtime.kill(container.id, 'SIGKILL', { all: true });
    await runtime.release(container.id, restored.monitorPid);
  } catch (err) {
    leftover = `; cleaning up failed too: ${errorMessage(err)}`;
  }
  throw new RestoredCredentialsError(
    `the restored container was killed: ${why}; criu restores a process with the ids of its checkpoint images${leftover}`,
  );
}

/** How conmon names a container in its own messages. */
export function monitorName(sandbox: Sandbox, container: Pick<Container, 'spec'>): string {
  const pod = sandbox.spec;
  return `${pod.metadata.namespace}_${pod.metadata.name}_${container.spec.metadata.name}`;
}
