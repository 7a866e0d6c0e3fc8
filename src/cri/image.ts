import type { WritableLayersUsage } from '../container/types.js';
import { InvalidArgumentError } from '../errors.js';
import type { ImageService, ImageView } from '../image/service.js';
import type { RegistryCredentials } from '../registry/client.js';
import type { ImageServiceHandlers } from './generated/runtime/v1/ImageService.js';
import type { UnaryHandlers } from './handler.js';
import type { Received, Sent } from './messages.js';
import { requireString } from './validate.js';

/** `writableLayers`: the containers' side of ImageFsInfo, which the image service does not hold. */
export function imageHandlers(images: ImageService, writableLayers: () => Promise<WritableLayersUsage>) {
  return {
    PullImage: async (req, { signal }) => ({
      image_ref: await images.pull(
        requireString('image.image', req.image?.image),
        toCredentials(req.auth),
        signal,
      ),
    }),
    ImageStatus: async (req) => {
      const image = requireString('image.image', req.image?.image);
      const view = images.status(image);
      return {
        image: view ? toWireImage(view) : null,
        info: view && req.verbose ? images.verboseInfo(image) : {},
      };
    },
    ListImages: async (req) => ({
      images: images.list(req.filter?.image?.image || undefined).map(toWireImage),
    }),
    RemoveImage: async (req) => {
      await images.remove(requireString('image.image', req.image?.image));
      return {};
    },
    ImageFsInfo: async () => {
      const [usage, layers] = await Promise.all([images.fsInfo(), writableLayers()]);
      return {
        image_filesystems: [
          {
            timestamp: usage.timestampNs,
            fs_id: { mountpoint: usage.mountpoint },
            used_bytes: { value: String(usage.bytes) },
            inodes_used: { value: String(usage.inodes) },
          },
        ],
        container_filesystems: [
          {
            timestamp: layers.timestampNs,
            fs_id: { mountpoint: layers.mountpoint },
            used_bytes: { value: String(layers.bytes) },
            inodes_used: { value: String(layers.inodes) },
          },
        ],
      };
    },
  } satisfies UnaryHandlers<ImageServiceHandlers>;
}

/** Tokens go into an Authorization header as they are: visible ASCII only. */
const HEADER_TOKEN = /^[\x21-\x7e]*$/;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function toCredentials(auth: Received<'AuthConfig'> | null): RegistryCredentials | undefined {
  if (!auth) return undefined;
  for (const field of ['identity_token', 'registry_token'] as const) {
    if (!HEADER_TOKEN.test(auth[field])) {
      throw new InvalidArgumentError(`auth.${field}`, 'may only hold visible ASCII characters');
    }
  }
  if (!BASE64.test(auth.auth)) throw new InvalidArgumentError('auth.auth', 'is not base64');
  for (const field of ['username', 'password'] as const) {
    if (/[\0\r\n]/.test(auth[field])) {
      throw new InvalidArgumentError(`auth.${field}`, 'contains a NUL or line break');
    }
  }
  const creds: RegistryCredentials = {
    ...(auth.username ? { username: auth.username } : {}),
    ...(auth.password ? { password: auth.password } : {}),
    ...(auth.auth ? { auth: auth.auth } : {}),
    ...(auth.identity_token ? { identityToken: auth.identity_token } : {}),
    ...(auth.registry_token ? { registryToken: auth.registry_token } : {}),
  };
  return Object.keys(creds).length > 0 ? creds : undefined;
}

function toWireImage(view: ImageView) {
  return {
    id: view.id,
    repo_tags: view.repoTags,
    repo_digests: view.repoDigests,
    size: String(view.size),
    uid: view.uid === null ? null : { value: String(view.uid) },
    username: view.username,
    spec: { image: view.id },
    pinned: view.pinned,
  } satisfies Sent<'Image'>;
}
