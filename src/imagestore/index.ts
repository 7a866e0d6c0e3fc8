/** The image store on disk: blobs, unpacked layers and container root filesystems. */
export { ContentStore } from './content.js';
export { LayerStore } from './layers.js';
export {
  containerDir,
  isRootfsMounted,
  listRootfsDirs,
  prepareRootfs,
  removeRootfs,
  rootfsPath,
} from './rootfs.js';
export { digestHex, sha256Digest } from './digest.js';
export { DigestMismatchError, InvalidDigestError, RootfsError, SizeMismatchError } from './errors.js';
export type * from './types.js';
