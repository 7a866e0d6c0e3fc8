/**
 * The distribution's content shapes (OCI image-spec and Docker schema 2), as far as berth reads
 * them: manifests, indexes and the descriptors in them. Media types are kept as strings:
 * registries send both families and berth treats their equivalents alike.
 */
import { errorMessage } from '../errors.js';
import { RegistryError } from './errors.js';

export const MEDIA_TYPES = {
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  ociLayer: 'application/vnd.oci.image.layer.v1.tar',
  ociLayerGzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  ociLayerZstd: 'application/vnd.oci.image.layer.v1.tar+zstd',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerManifestList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
  dockerLayerGzip: 'application/vnd.docker.image.rootfs.diff.tar.gzip',
} as const;

export interface Platform {
  architecture: string;
  os: string;
  variant?: string;
}

export interface Descriptor {
  mediaType: string;
  /** "sha256:<64 hex>" */
  digest: string;
  size: number;
  platform?: Platform;
  annotations?: Record<string, string>;
}

export interface ImageManifest {
  schemaVersion: number;
  mediaType?: string;
  config: Descriptor;
  layers: Descriptor[];
}

export interface ImageIndex {
  schemaVersion: number;
  mediaType?: string;
  manifests: Descriptor[];
}

/** What the client asks for and accepts as a manifest. */
export const MANIFEST_MEDIA_TYPES: readonly string[] = [
  MEDIA_TYPES.ociManifest,
  MEDIA_TYPES.ociIndex,
  MEDIA_TYPES.dockerManifest,
  MEDIA_TYPES.dockerManifestList,
];

/**
 * The manifest's media type: its own `mediaType` field (covered by the digest, so an unsupported
 * one is refused), else the Content-Type header, else what its shape says: registries sometimes
 * answer with a generic Content-Type. Schema 1 and anything else is refused.
 */
export function manifestMediaType(
  bytes: Buffer,
  contentType: string | undefined,
  what: string,
  endpoint: string,
): string {
  let doc: unknown;
  try {
    doc = JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    throw new RegistryError(`${what}: manifest from ${endpoint} is not JSON: ${errorMessage(err)}`, endpoint);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    throw new RegistryError(`${what}: manifest from ${endpoint} is not a JSON object`, endpoint);
  }
  const fields = doc as Record<string, unknown>;
  const own = typeof fields.mediaType === 'string' && fields.mediaType !== '' ? fields.mediaType : undefined;
  if (own !== undefined && !MANIFEST_MEDIA_TYPES.includes(own)) {
    throw new RegistryError(`${what}: unsupported manifest media type "${own}"`, endpoint);
  }
  const declared = own ?? contentType?.split(';')[0]?.trim().toLowerCase();
  if (declared !== undefined && MANIFEST_MEDIA_TYPES.includes(declared)) return declared;
  if (fields.schemaVersion === 1) {
    throw new RegistryError(
      `${what}: Docker schema 1 manifests are not supported; push the image again`,
      endpoint,
    );
  }
  if (Array.isArray(fields.manifests)) return MEDIA_TYPES.ociIndex;
  if (typeof fields.config === 'object' && Array.isArray(fields.layers)) return MEDIA_TYPES.ociManifest;
  throw new RegistryError(`${what}: unsupported manifest media type "${declared ?? 'none'}"`, endpoint);
}
