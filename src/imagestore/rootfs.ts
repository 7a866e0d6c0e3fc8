/**
 * Container root filesystems: an overlayfs per container with the image's unpacked layers as
 * read-only lowers and a private upper, under `<root>/containers/<id>/`:
 *
 *   upper/   the container's writes
 *   work/    overlayfs scratch space (same filesystem as upper/, as the kernel requires)
 *   l/<n>    short symlinks to the layers' fs dirs, lowerdir order (l/0 is the top-most)
 *   m/<n>    instead of l/, for a container of its pod's user namespace: each layer bound there
 *            idmapped with the namespace, so its files show their image owners inside, no layer
 *            copied or chowned; upper/ and work/ then belong to the namespace's root
 *   iv/<n>   the container's n-th CRI mount, an image volume (image-volume.ts); ivl/ and ivm/ its
 *            layers, linked or (ivm/) bound idmapped
 *   v/<n>    the container's n-th CRI mount bound idmapped, where kubelet asked for a mapping
 *            (src/container/volumes.ts); runc binds it from here. Also transient user namespace
 *            pins while those binds are made
 *   rootfs/  the mount point
 *
 * Why l/: the overlay's options must fit one page, and the short relative links let them when the
 * layers' absolute paths do not (overlay.ts).
 */
import { chown, mkdir, readdir, rm, stat, symlink } from 'node:fs/promises';
import { join, resolve } from 'node:path';

import { AlreadyExistsError, InvalidArgumentError, NotFoundError } from '../errors.js';
import { allSettledOrThrow } from '../kit/settle.js';
import { canonicalPath, readMountInfo, topMount } from '../mounts/mountinfo.js';
import { idmappedBind } from '../mounts/idmap.js';
import { unmountAll } from '../mounts/syscalls.js';
import { mountOverlay } from './overlay.js';
import { RootfsError } from './errors.js';
import { isErrno } from './fsutil.js';
import { LayerStore } from './layers.js';
import { PRIVATE_DIR, passableToPod } from '../file-modes.js';

/** A rootfs stacked more than this many times is not ours to keep unmounting. */
const MAX_UNMOUNTS = 8;

export function containerDir(containerId: string, rootDir: string): string {
  checkContainerId(containerId);
  return join(resolve(rootDir), 'containers', containerId);
}

export function rootfsPath(containerId: string, rootDir: string): string {
  return join(containerDir(containerId, rootDir), 'rootfs');
}

/**
 * Mounts a fresh overlay rootfs for `containerId` and returns its path.
 *
 * `layerDiffIds` are bottom-first (base layer first), the order of the image config's
 * rootfs.diff_ids and of the manifest's layers; overlayfs wants top-most first, which this
 * function takes care of. Every layer must be committed (LayerStore.commitLayer). An image
 * without layers gets an empty lower dir.
 *
 * Throws AlreadyExistsError if the container dir exists (removeRootfs it first), NotFoundError
 * for a missing layer, RootfsError if mounting fails. On any failure nothing is left behind.
 */
/** The user namespace a container runs in, for a rootfs its root can use as image root could. */
export interface RootfsIdmap {
  /** The pinned namespace (see netns/userns.ts). */
  userns: string;
  /** The host ids the namespace's root has. */
  rootUid: number;
  rootGid: number;
}

export async function prepareRootfs(
  containerId: string,
  layerDiffIds: readonly string[],
  rootDir: string,
  idmap: RootfsIdmap | null = null,
): Promise<string> {
  const dir = containerDir(containerId, rootDir);
  const target = join(dir, 'rootfs');
  const layers = new LayerStore(rootDir);
  // Checked before anything is created: a missing layer is the likely failure, and the clearest.
  const lowers = [...layerDiffIds].reverse().map((diffId) => ({ diffId, fs: layers.fsDir(diffId) }));
  // Side by side, as are the dirs and links below: each is a thread-pool round trip, which waits
  // its turn while other pods start, and images commonly have five to fifteen layers.
  const present = await Promise.all(lowers.map(({ fs }) => isDir(fs)));
  const missing = lowers.find((_, i) => !present[i]);
  if (missing) throw new NotFoundError('layer', missing.diffId);

  // Root's alone, as the layers are: the rootfs and upper/ hold the image's setuid files and those
  // a container makes, and the host sees them without nosuid.
  const containers = join(resolve(rootDir), 'containers');
  await mkdir(containers, { recursive: true, mode: PRIVATE_DIR });
  try {
    await mkdir(dir, { mode: PRIVATE_DIR });
  } catch (err) {
    if (isErrno(err, 'EEXIST')) throw new AlreadyExistsError(`rootfs dir of container ${containerId} exists`);
    throw err;
  }
  try {
    // Over idmapped layers every file shows as a mapped id's, setuid ones too, so the way to the
    // rootfs can open to the pod's root, which runc sets the container up as (see passableToPod).
    // m/ and work/ stay closed to it (0700).
    if (idmap) {
      await passableToPod(dir, idmap.rootGid, [resolve(rootDir), containers]);
    }
    const linkDir = idmap ? IDMAPPED_DIR : 'l';
    const links = lowers.map(({ fs }, index) => ({ fs, link: `${linkDir}/${index.toString(36)}` }));
    const lowerdir = links.length > 0 ? links.map(({ link }) => link) : ['empty'];
    const lower = ({ fs, link }: { fs: string; link: string }): Promise<void> =>
      idmap
        ? mkdir(join(dir, link)).then(() =>
            idmappedBind({ source: fs, target: join(dir, link), userns: idmap.userns, recursive: false }),
          )
        : symlink(fs, join(dir, link));
    // upper/'s root becomes the merged root: 0755 like any /, and the container root's.
    const owned = async (path: string, mode: number): Promise<void> => {
      await mkdir(path, { mode });
      if (idmap) await chown(path, idmap.rootUid, idmap.rootGid);
    };
    // Every one settles before a failure is thrown, so the cleanup below never races a mkdir.
    await allSettledOrThrow([
      owned(join(dir, 'upper'), 0o755),
      owned(join(dir, 'work'), 0o700),
      mkdir(target, { mode: 0o755 }),
      links.length === 0
        ? mkdir(join(dir, 'empty'), { mode: 0o755 })
        : mkdir(join(dir, linkDir), { mode: 0o700 }).then(() => allSettledOrThrow(links.map(lower))),
    ]);
    await mountOverlay(dir, target, { lowers: lowerdir, upper: { upperdir: 'upper', workdir: 'work' } });
    return target;
  } catch (err) {
    // CreateContainer's rootfs undo, registered before this call, removes again what stays; the
    // mount's error is the one to report.
    await removeRootfs(containerId, rootDir).catch(() => undefined);
    throw err instanceof InvalidArgumentError ? err : new RootfsError(containerId, 'mount', err);
  }
}

/**
 * Unmounts the container's rootfs and deletes its dir, upper layer included. Idempotent. A busy
 * mount is detached lazily (it goes away when its last user does). The caller makes sure the
 * container is stopped: files still in use by a process would be deleted under it.
 */
export async function removeRootfs(containerId: string, rootDir: string): Promise<void> {
  const dir = containerDir(containerId, rootDir);
  await unmountRootfs(containerId, rootDir);
  await unmountEachIn(containerId, join(dir, IDMAPPED_DIR));
  await unmountVolumes(containerId, rootDir);
  // The overlays first: the idmapped layers below are their lowers.
  await unmountEachIn(containerId, join(dir, IMAGE_VOLUMES_DIR));
  await unmountEachIn(containerId, join(dir, IDMAPPED_IMAGE_VOLUME_LAYERS_DIR));
  // Never reached with the overlay, a layer or a volume still mounted: rm would then walk the
  // merged view, or delete an image layer's files or a volume's.
  await rm(dir, { recursive: true, force: true });
}

/** Where a user-namespaced container's layers are bound, idmapped. */
const IDMAPPED_DIR = 'm';
/** Where a container's image volumes of several layers are mounted (image-volume.ts). */
export const IMAGE_VOLUMES_DIR = 'iv';
/** Where a user-namespaced container's image volume layers are bound, idmapped (image-volume.ts). */
export const IDMAPPED_IMAGE_VOLUME_LAYERS_DIR = 'ivm';
/** Where a container's idmapped volumes are staged for runc. */
const VOLUMES_DIR = 'v';

export function volumesDir(containerId: string, rootDir: string): string {
  return join(containerDir(containerId, rootDir), VOLUMES_DIR);
}

/**
 * Unmounts the container's staged volumes (and any transient user namespace pin): an exited
 * container needs them no more, and they hold kubelet's volumes (a secret's tmpfs) alive. Idempotent.
 */
export function unmountVolumes(containerId: string, rootDir: string): Promise<void> {
  return unmountEachIn(containerId, volumesDir(containerId, rootDir));
}

async function unmountEachIn(containerId: string, dir: string): Promise<void> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    // Any other failure must stop the removal: rm would delete what is still bound below.
    if (isErrno(err, 'ENOENT')) return;
    throw new RootfsError(containerId, 'unmount', err);
  }
  try {
    await allSettledOrThrow(names.map((name) => unmountAll(join(dir, name), MAX_UNMOUNTS)));
  } catch (err) {
    throw new RootfsError(containerId, 'unmount', err);
  }
}

/** Idempotent; every mount stacked on the rootfs goes, a busy one detached lazily. Keeps the dir. */
export async function unmountRootfs(containerId: string, rootDir: string): Promise<void> {
  try {
    await unmountAll(rootfsPath(containerId, rootDir), MAX_UNMOUNTS);
  } catch (err) {
    throw new RootfsError(containerId, 'unmount', err);
  }
}

export async function isRootfsMounted(containerId: string, rootDir: string): Promise<boolean> {
  return isMountPoint(rootfsPath(containerId, rootDir));
}

/** Container ids become a directory name. */
function checkContainerId(id: string): void {
  if (id === '' || id === '.' || id === '..' || id.includes('/') || id.includes('\0')) {
    throw new InvalidArgumentError('container id', `${JSON.stringify(id)} is not a plain file name`);
  }
}

async function isMountPoint(path: string): Promise<boolean> {
  const canonical = await canonicalPath(path);
  if (canonical === null) return false;
  return topMount(await readMountInfo(), canonical) !== undefined;
}

async function isDir(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch (err) {
    if (isErrno(err, 'ENOENT', 'ENOTDIR')) return false;
    throw err;
  }
}

/** Container ids with a rootfs dir, for reconciling with the containers the daemon knows. */
export async function listRootfsDirs(rootDir: string): Promise<string[]> {
  try {
    return await readdir(join(resolve(rootDir), 'containers'));
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return [];
    throw err;
  }
}

/**
 * A container's writable layer and the image layers under it, top-most first, as its overlay
 * stacks them: what a checkpoint reads the container's changes from.
 */
export async function rootfsLayers(
  containerId: string,
  rootDir: string,
): Promise<{ upper: string; lowers: string[] }> {
  const dir = containerDir(containerId, rootDir);
  const linkDir = (await isDir(join(dir, IDMAPPED_DIR))) ? IDMAPPED_DIR : 'l';
  const names = await readdir(join(dir, linkDir)).catch((err: unknown) => {
    // An image without layers has an empty lower dir and no links.
    if (isErrno(err, 'ENOENT')) return [] as string[];
    throw err;
  });
  const ordered = names.sort((a, b) => parseInt(a, 36) - parseInt(b, 36));
  return { upper: join(dir, 'upper'), lowers: ordered.map((name) => join(dir, linkDir, name)) };
}
