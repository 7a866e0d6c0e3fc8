import type { ContentStore } from '../imagestore/content.js';
import type { LayerStore } from '../imagestore/layers.js';
import type { Logger } from '../log.js';
import type { ImageRepo } from '../store/images.js';

export interface ImageSweepReport {
  temporary: number;
  layers: number;
  blobs: number;
}

/**
 * A pull or unpack killed half way leaves temporary files, a layer row not marked unpacked, or
 * blobs no image records yet; an interrupted RemoveImage leaves files whose rows are gone. All of
 * it goes before the daemon serves, so a restarted berthd lists exactly the images it had.
 */
export async function sweepImageStore(
  repo: ImageRepo,
  content: ContentStore,
  layers: LayerStore,
  logger: Logger,
): Promise<ImageSweepReport> {
  const temporary = (await content.cleanupTemporary()).length + (await layers.cleanupTemporary()).length;

  const known = new Map(repo.listLayers().map((layer) => [layer.diffId, layer]));
  let removedLayers = 0;
  for (const layer of repo.listUnreferencedLayers()) {
    repo.deleteLayer(layer.diffId);
    known.delete(layer.diffId);
  }
  for (const diffId of await layers.list()) {
    if (known.get(diffId)?.unpacked) continue;
    await layers.removeLayer(diffId);
    removedLayers++;
  }

  const referenced = repo.referencedBlobs();
  let removedBlobs = 0;
  for (const digest of await content.list()) {
    if (referenced.has(digest)) continue;
    await content.delete(digest);
    removedBlobs++;
  }
  const report = { temporary, layers: removedLayers, blobs: removedBlobs };
  if (temporary + removedLayers + removedBlobs > 0)
    logger.warn(report, 'removed leftovers of interrupted image work');
  return report;
}
