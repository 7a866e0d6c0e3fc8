/**
 * A container's image volumes (KEP-4639) around CreateContainer's steps: each image looked up
 * before the journal record is written (its id goes into the stored spec, which is how RemoveImage
 * knows the image is in use), mounted in the rootfs step (imagestore/image-volume.ts), and its
 * host path handed to the spec step in place of the empty one the request had. The stored spec
 * keeps the request's form, which ContainerStatus echoes.
 */
import { NotFoundError } from '../errors.js';
import type { ImageService } from '../image/service.js';
import { mountImageVolume, type ImageVolume } from '../imagestore/image-volume.js';
import type { RootfsIdmap } from '../imagestore/rootfs.js';
import type { ContainerSpec } from '../model/container.js';

/** By the index of their mount in the spec. */
export type ImageVolumes = Map<number, ImageVolume>;

/** `spec` with its image volumes' image ids filled in, and what each needs mounted. */
export function findImageVolumes(
  spec: ContainerSpec,
  images: Pick<ImageService, 'resolve'>,
): { spec: ContainerSpec; volumes: ImageVolumes } {
  const volumes: ImageVolumes = new Map();
  const mounts = spec.mounts.map((mount, index) => {
    if (mount.image === null) return mount;
    const found = images.resolve(mount.image.reference);
    if (!found)
      throw new NotFoundError(`image of the image volume at ${mount.containerPath}`, mount.image.reference);
    volumes.set(index, {
      image: mount.image.reference,
      diffIds: found.record.config.rootfs.diff_ids,
      subPath: mount.image.subPath,
    });
    return { ...mount, image: { ...mount.image, id: found.record.id } };
  });
  return { spec: volumes.size === 0 ? spec : { ...spec, mounts }, volumes };
}

/** Mounts each volume, idmapped as the rootfs is; the host paths to bind, by mount index. */
export async function mountImageVolumes(
  containerId: string,
  rootDir: string,
  volumes: ImageVolumes,
  idmap: RootfsIdmap | null,
): Promise<Map<number, string>> {
  const sources = new Map<number, string>();
  for (const [index, volume] of volumes) {
    sources.set(index, await mountImageVolume(containerId, rootDir, index, volume, idmap));
  }
  return sources;
}

/** `spec` with each image volume bound from its host path in `sources`. */
export function withImageVolumeSources(spec: ContainerSpec, sources: Map<number, string>): ContainerSpec {
  if (sources.size === 0) return spec;
  return {
    ...spec,
    mounts: spec.mounts.map((mount, index) => {
      const source = sources.get(index);
      return source === undefined ? mount : { ...mount, hostPath: source };
    }),
  };
}
