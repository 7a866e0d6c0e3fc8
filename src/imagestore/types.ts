/**
 * The image store's shapes. The persisted records live with the rest of the database rows in
 * src/store and are re-exported here so image code has one place to import from.
 */
export type {
  DeletedImage,
  ImageLayerRef,
  ImageNames,
  ImageNameKind,
  ImageRecord,
  ImageWithNames,
  LayerRecord,
  NewLayer,
  RemovedName,
} from '../store/types.js';

/** What a descriptor promises about a blob before it is fetched. */
export interface ExpectedBlob {
  /** "sha256:<64 hex>" */
  digest: string;
  size: number;
}

/** Disk space as `du` counts it: allocated blocks, each inode once (hard links included). */
export interface DiskUsage {
  bytes: number;
  inodes: number;
}
