import { MEDIA_TYPES } from '../registry/manifest.js';
import type { LayerCompression } from './decompress.js';

const GZIP_MAGIC = Buffer.from([0x1f, 0x8b]);
const ZSTD_MAGIC = Buffer.from([0x28, 0xb5, 0x2f, 0xfd]);

const BY_MEDIA_TYPE: ReadonlyMap<string, LayerCompression> = new Map<string, LayerCompression>([
  [MEDIA_TYPES.ociLayer, 'none'],
  [MEDIA_TYPES.ociLayerGzip, 'gzip'],
  [MEDIA_TYPES.ociLayerZstd, 'zstd'],
  [MEDIA_TYPES.dockerLayerGzip, 'gzip'],
  // Non-distributable ("foreign") layers: deprecated, but still found in old Windows-era manifests.
  ['application/vnd.oci.image.layer.nondistributable.v1.tar', 'none'],
  ['application/vnd.oci.image.layer.nondistributable.v1.tar+gzip', 'gzip'],
  ['application/vnd.oci.image.layer.nondistributable.v1.tar+zstd', 'zstd'],
  ['application/vnd.docker.image.rootfs.foreign.diff.tar.gzip', 'gzip'],
]);

/**
 * Decides how a layer blob is compressed. The magic bytes win over the media type: registries and
 * build tools are known to label zstd or plain layers as gzip (and vice versa), while the bytes
 * cannot lie. The media type decides only when the bytes match no known magic (a plain tar has
 * none), and an unknown media type with no magic is taken as a plain tar.
 */
export function detectCompression(mediaType: string, firstBytes: Buffer): LayerCompression {
  if (startsWith(firstBytes, GZIP_MAGIC)) return 'gzip';
  if (startsWith(firstBytes, ZSTD_MAGIC)) return 'zstd';
  const declared = BY_MEDIA_TYPE.get(mediaType.split(';')[0]?.trim() ?? '');
  // A declared compression without its magic is either a plain tar mislabelled or a blob too short
  // to tell; handing it to a decompressor gives a clear error in the second case.
  if (declared !== undefined && firstBytes.length < ZSTD_MAGIC.length) return declared;
  return 'none';
}

function startsWith(bytes: Buffer, magic: Buffer): boolean {
  return bytes.length >= magic.length && bytes.subarray(0, magic.length).equals(magic);
}
