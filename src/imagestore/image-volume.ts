/**
 * Image volumes (KEP-4639): an image's unpacked layers, read-only, as a volume of a container.
 * Nothing is copied: an image of one layer is that layer's dir; of several, a read-only overlay of
 * them (no upper dir) mounted at `<container dir>/iv/<n>`, where removeRootfs unmounts it with the
 * rest of the container's mounts; of none, an empty dir there. runc binds it, or a path in it,
 * read-only like any volume. A sub path is resolved in the image as if it were "/", so no `..` or
 * symlink leads out of it.
 *
 * In a pod of its own user namespace the layers are bound idmapped with it first, as the rootfs's
 * are (rootfs.ts), at `ivm/<n>-<k>`: its files then show their image owners inside, not nobody's.
 * The volume is then always at `iv/<n>`, whose way stays open to the pod's root (runc binds it as
 * that root); the layer store itself stays closed.
 */
import { chmod, lstat, mkdir, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { NotFoundError } from '../errors.js';
import { idmappedBind } from '../mounts/idmap.js';
import { allSettledOrThrow } from '../kit/settle.js';
import { resolveInRoot } from '../oci/rootfs-files.js';
import { LayerStore } from './layers.js';
import { mountOverlay } from './overlay.js';
import {
  containerDir,
  IDMAPPED_IMAGE_VOLUME_LAYERS_DIR,
  IMAGE_VOLUMES_DIR,
  type RootfsIdmap,
} from './rootfs.js';

/** Where the overlays' lower layers are linked, by short relative names (overlay.ts says why). */
const LINKS_DIR = 'ivl';
/** iv/ as the pod's root passes through it to its volumes, and lists nothing. */
const PASSABLE_DIR = 0o711;

export interface ImageVolume {
  /** The image as the mount names it, for errors. */
  image: string;
  /** Bottom-first, as the image config lists them. */
  diffIds: readonly string[];
  /** Relative to the image's root; '' for all of it. */
  subPath: string;
}

/**
 * Makes volume `index` of container `containerId` of `volume`'s image, and returns the host path
 * to bind: the image's root, or the sub path in it. A sub path that is not in the image is a
 * NotFoundError naming it. Call within CreateContainer's rootfs step, after the container's dir is
 * made: its undo removes what is mounted here.
 */
export async function mountImageVolume(
  containerId: string,
  rootDir: string,
  index: number,
  volume: ImageVolume,
  idmap: RootfsIdmap | null,
): Promise<string> {
  const dir = containerDir(containerId, rootDir);
  const layers = new LayerStore(rootDir);
  const fsDirs = [...volume.diffIds].reverse().map((diffId) => layers.fsDir(diffId));
  let root: string;
  if (fsDirs.length === 1 && fsDirs[0] !== undefined && idmap === null) {
    root = fsDirs[0];
  } else {
    const target = join(dir, IMAGE_VOLUMES_DIR, String(index));
    await mkdir(join(dir, IMAGE_VOLUMES_DIR), { recursive: true, mode: 0o700 });
    if (idmap) await chmod(join(dir, IMAGE_VOLUMES_DIR), PASSABLE_DIR);
    await mkdir(target, { mode: 0o755 });
    if (idmap && fsDirs.length === 1 && fsDirs[0] !== undefined) {
      await idmappedBind({ source: fsDirs[0], target, userns: idmap.userns, recursive: false });
    } else if (fsDirs.length > 0) {
      const lowers = await linkLowers(dir, index, fsDirs, idmap);
      await mountOverlay(dir, target, { lowers });
    }
    root = target;
  }
  if (volume.subPath === '') return root;
  const path = await resolveInRoot(root, volume.subPath);
  const found = await lstat(path).catch(() => null);
  if (found === null) throw new NotFoundError(`image ${volume.image}: sub path`, volume.subPath);
  return path;
}

/**
 * The overlay's lowers for volume `index`, relative to the container's dir: links to the layers'
 * dirs, or with `idmap` the layers bound idmapped (removeRootfs unmounts those after the overlay).
 */
async function linkLowers(
  dir: string,
  index: number,
  fsDirs: string[],
  idmap: RootfsIdmap | null,
): Promise<string[]> {
  const linkDir = idmap ? IDMAPPED_IMAGE_VOLUME_LAYERS_DIR : LINKS_DIR;
  await mkdir(join(dir, linkDir), { recursive: true, mode: 0o700 });
  const links = fsDirs.map((_, k) => join(linkDir, `${index}-${k.toString(36)}`));
  await allSettledOrThrow(
    fsDirs.map((fs, k) => {
      const at = join(dir, links[k] ?? '');
      return idmap
        ? mkdir(at).then(() =>
            idmappedBind({ source: fs, target: at, userns: idmap.userns, recursive: false }),
          )
        : symlink(fs, at);
    }),
  );
  return links;
}
