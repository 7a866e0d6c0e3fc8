import type { ImageConfig } from '../model/image.js';
import { corrupt, decodeJson, isObject, parseEnum, parseJson, type ColumnOf } from './columns.js';
import type { ImageLayerRef, ImageNameKind, ImageRecord, LayerRecord } from './types.js';

/** One `images` row exactly as better-sqlite3 reads it and binds it (see state/migrations.ts). */
export interface ImageRow {
  id: string;
  manifest_digest: string;
  manifest_media_type: string;
  /** The ImageConfig, JSON. */
  config_json: string;
  size: number;
  /** JSON array of ImageLayerRef. */
  layers_json: string;
  created_at: string;
  last_used_at: string;
  /** 0 or 1. */
  pinned: number;
}

export interface ImageNameRow {
  name: string;
  image_id: string;
  kind: string;
}

export interface LayerRow {
  diff_id: string;
  blob_digest: string;
  size: number;
  /** 0 or 1. */
  unpacked: number;
  created_at: string;
}

export const IMAGE_COLUMNS = [
  'id',
  'manifest_digest',
  'manifest_media_type',
  'config_json',
  'size',
  'layers_json',
  'created_at',
  'last_used_at',
  'pinned',
] as const satisfies readonly (keyof ImageRow)[];

export const LAYER_COLUMNS = [
  'diff_id',
  'blob_digest',
  'size',
  'unpacked',
  'created_at',
] as const satisfies readonly (keyof LayerRow)[];

export function toImageRow(record: ImageRecord): ImageRow {
  return {
    id: record.id,
    manifest_digest: record.manifestDigest,
    manifest_media_type: record.manifestMediaType,
    config_json: JSON.stringify(record.config),
    size: record.size,
    // Explicit fields: a caller's object may carry extra properties that do not belong on disk.
    layers_json: JSON.stringify(
      record.layers.map(({ digest, diffId, size, mediaType }) => ({ digest, diffId, size, mediaType })),
    ),
    created_at: record.createdAt,
    last_used_at: record.lastUsedAt,
    pinned: record.pinned ? 1 : 0,
  };
}

/**
 * JSON columns parsed here, once, and nowhere else; what the schema cannot check (their shapes) is
 * re-checked, so a bad row fails here, loudly.
 */
export function fromImageRow(row: ImageRow): ImageRecord {
  const where = (column: string): ColumnOf => ({ noun: 'image', id: row.id, column });
  return {
    id: row.id,
    manifestDigest: row.manifest_digest,
    manifestMediaType: row.manifest_media_type,
    config: decodeJson<ImageConfig>(row.config_json, isObject, where('config_json')),
    size: row.size,
    layers: parseLayers(row.layers_json, where('layers_json')),
    createdAt: row.created_at,
    lastUsedAt: row.last_used_at,
    pinned: row.pinned === 1,
  };
}

const NAME_KINDS: readonly ImageNameKind[] = ['tag', 'digest'];

export function parseNameKind(row: ImageNameRow): ImageNameKind {
  return parseEnum(NAME_KINDS, row.kind, { noun: 'image name', id: row.name, column: 'kind' });
}

/** The schema ties the kind to the name's shape; deriving it here keeps callers from disagreeing. */
export function nameKind(name: string): ImageNameKind {
  return name.includes('@') ? 'digest' : 'tag';
}

export function toLayerRow(layer: LayerRecord): LayerRow {
  return {
    diff_id: layer.diffId,
    blob_digest: layer.blobDigest,
    size: layer.size,
    unpacked: layer.unpacked ? 1 : 0,
    created_at: layer.createdAt,
  };
}

export function fromLayerRow(row: LayerRow): LayerRecord {
  return {
    diffId: row.diff_id,
    blobDigest: row.blob_digest,
    size: row.size,
    unpacked: row.unpacked === 1,
    createdAt: row.created_at,
  };
}

function parseLayers(json: string, where: ColumnOf): ImageLayerRef[] {
  const value = parseJson(json, where);
  if (Array.isArray(value) && value.every(isLayerRef)) return value;
  throw corrupt(where, json);
}

function isLayerRef(value: unknown): value is ImageLayerRef {
  return (
    isObject(value) &&
    typeof value.digest === 'string' &&
    typeof value.diffId === 'string' &&
    typeof value.size === 'number' &&
    typeof value.mediaType === 'string'
  );
}
