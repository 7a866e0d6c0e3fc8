/**
 * Image volumes (KEP-4639): an image's unpacked layers, read-only, as a volume of a container.
 * Nothing is copied: an image of one layer is that layer's dir; of several, a read-only overlay of
 * them (no upper dir) mounted at `<container dir>/iv/<n>`, where removeRootfs unmounts it with the
 * rest of the container's mounts; of none, an empty dir there. runc binds it, or a path in it,
 * read-only like any volume. A sub path is resolved in the image as if it were "/", so no `..` or
 * symlink leads out of it.
 */
import { lstat, mkdir, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { NotFoundError } from '../errors.js';
import { allSettledOrThrow } from '../kit/settle.js';
import { resolveInRoot } from '../oci/rootfs-files.js';
import { LayerStore } from './layers.js';
import { mountOverlay } from './overlay.js';
import { containerDir, IMAGE_VOLUMES_DIR } from './rootfs.js';

/** Where the overlays' lower layers are linked, by short relative names (overlay.ts says why). */
const LINKS_DIR = 'ivl';

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
): Promise<string> {
  const dir = containerDir(containerId, rootDir);
  const layers = new LayerStore(rootDir);
  const fsDirs = [...volume.diffIds].reverse().map((diffId) => layers.fsDir(diffId));
  let root: string;
  if (fsDirs.length === 1 && fsDirs[0] !== undefined) {
    root = fsDirs[0];
  } else {
    const target = join(IMAGE_VOLUMES_DIR, String(index));
    await mkdir(join(dir, IMAGE_VOLUMES_DIR), { recursive: true, mode: 0o700 });
    await mkdir(join(dir, target), { mode: 0o755 });
    if (fsDirs.length > 1) {
      await mkdir(join(dir, LINKS_DIR), { recursive: true, mode: 0o700 });
      const links = fsDirs.map((_, k) => join(LINKS_DIR, `${index}-${k.toString(36)}`));
      await allSettledOrThrow(fsDirs.map((fs, k) => symlink(fs, join(dir, links[k] ?? ''))));
      await mountOverlay(dir, join(dir, target), { lowers: links });
    }
    root = join(dir, target);
  }
  if (volume.subPath === '') return root;
  const path = await resolveInRoot(root, volume.subPath);
  const found = await lstat(path).catch(() => null);
  if (found === null) throw new NotFoundError(`image ${volume.image}: sub path`, volume.subPath);
  return path;
}
