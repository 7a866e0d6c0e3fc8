import type { ImageConfig } from '../image/types.js';
import type { ImageRecord } from '../store/types.js';

/** The image's config blob, as containers need it; the image store keeps it as pulled, as text. */
export function imageConfigOf(image: Pick<ImageRecord, 'configJson'>): ImageConfig {
  return JSON.parse(image.configJson) as ImageConfig;
}
