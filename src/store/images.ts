import type Database from 'better-sqlite3';

import { NotFoundError } from '../errors.js';
import {
  IMAGE_COLUMNS,
  LAYER_COLUMNS,
  fromImageRow,
  fromLayerRow,
  nameKind,
  parseNameKind,
  toImageRow,
  toLayerRow,
  type ImageNameRow,
  type ImageRow,
  type LayerRow,
} from './image-record.js';
import { creationOrder } from './table.js';
import type {
  DeletedImage,
  ImageNames,
  ImageRecord,
  ImageWithNames,
  LayerRecord,
  NewLayer,
  RemovedName,
} from './types.js';

const COLUMNS = IMAGE_COLUMNS.join(', ');
const LCOLUMNS = LAYER_COLUMNS.join(', ');
/** Every (image, layer) pair; `value` is one ImageLayerRef object. */
const IMAGE_LAYERS = 'images, json_each(images.layers_json)';
/** The digest part of a repo digest name (`repo@sha256:<hex>`). */
const NAME_DIGEST = "substr(name, instr(name, '@') + 1)";

interface Statements {
  upsertImage: Database.Statement<[ImageRow]>;
  getImage: Database.Statement<[string], ImageRow>;
  listImages: Database.Statement<[], ImageRow>;
  deleteImage: Database.Statement<[string]>;
  touch: Database.Statement<[string, string]>;
  setPinned: Database.Statement<[number, string]>;
  allNames: Database.Statement<[], ImageNameRow>;
  namesOf: Database.Statement<[string], ImageNameRow>;
  nameOwner: Database.Statement<[string], { image_id: string }>;
  upsertName: Database.Statement<[ImageNameRow]>;
  countNames: Database.Statement<[string], { n: number }>;
  deleteName: Database.Statement<[string]>;
  insertLayer: Database.Statement<[LayerRow]>;
  insertUnpackedLayer: Database.Statement<[LayerRow]>;
  getLayer: Database.Statement<[string], LayerRow>;
  listLayers: Database.Statement<[], LayerRow>;
  markUnpacked: Database.Statement<[string]>;
  deleteLayer: Database.Statement<[string]>;
  layerUsed: Database.Statement<[string], { used: number }>;
  blobUsed: Database.Statement<[{ digest: string }], { used: number }>;
  unreferencedLayers: Database.Statement<[], LayerRow>;
  referencedBlobs: Database.Statement<[], { digest: string }>;
}

/**
 * Images, their names and the unpacked layers they share, in the daemon's database. Synchronous
 * like Store: each call runs on the calling thread, and the multi-statement ones in one IMMEDIATE
 * transaction, so a concurrent caller never sees a name pointing at a half-written image.
 *
 * The repository keeps the bookkeeping only. Files (blobs, layer dirs) are the caller's: the
 * methods that drop the last user of something return it so the caller can delete it on disk.
 * Callers must serialise a pull and a removal that share layers (a keyed lock), because a layer
 * returned as unused here may be about to be used by a pull that has not recorded its image yet.
 *
 * Images and their names are read from a snapshot in memory, loaded on first use and dropped by
 * every write here: ImageStatus and ListImages (kubelet calls them all the time) then cost no
 * query and no JSON parse. berthd is the database's only writer, and every image write goes
 * through this class. The records handed out are shared: callers must not modify them.
 */
export class ImageRepo {
  private readonly statements: Statements;
  private readonly putInTransaction: Database.Transaction<
    (record: ImageRecord, names: readonly string[], layersUnpacked: boolean) => string[]
  >;
  private readonly deleteInTransaction: Database.Transaction<(id: string) => DeletedImage | undefined>;
  private readonly removeNameInTransaction: Database.Transaction<(name: string) => RemovedName | undefined>;
  private cached: ImageSnapshot | undefined;

  constructor(db: Database.Database) {
    this.statements = prepareStatements(db);
    this.putInTransaction = db.transaction((record, names, layersUnpacked) =>
      this.put(record, names, layersUnpacked),
    );
    this.deleteInTransaction = db.transaction((id) => this.delete(id));
    this.removeNameInTransaction = db.transaction((name) => this.unname(name));
  }

  /**
   * Records `record` (replacing an image with the same id, whose created_at is kept) and points
   * each of `names` at it; a name that belonged to another image moves. A layer without a row
   * gets one (not unpacked), so deleteImage can always tell when its last user goes.
   *
   * Returns the ids of the other images that lost their last name here. Whether one is still in
   * use by a container, or pinned, is for the caller to judge before deleting it.
   */
  putImage(record: ImageRecord, names: readonly string[]): string[] {
    return this.changing(() => this.putInTransaction.immediate(record, names, false));
  }

  /**
   * putImage for a finished pull, marking every layer of the image unpacked in the same
   * transaction: the caller committed all of them and flushed them to disk first. One commit
   * makes the whole image visible, or (after a crash) none of it.
   */
  putPulledImage(record: ImageRecord, names: readonly string[]): string[] {
    return this.changing(() => this.putInTransaction.immediate(record, names, true));
  }

  getImage(id: string): ImageRecord | undefined {
    return this.snapshot().byId.get(id)?.record;
  }

  findImageByName(name: string): ImageRecord | undefined {
    return this.snapshot().byName.get(name)?.record;
  }

  /**
   * Images whose id starts with `prefix`, with or without the "sha256:" (crictl shows and accepts
   * truncated hex). An empty prefix matches nothing, as for sandboxes.
   */
  findImagesByIdPrefix(prefix: string): ImageRecord[] {
    const hex = prefix.startsWith('sha256:') ? prefix.slice('sha256:'.length) : prefix;
    if (hex === '') return [];
    const id = `sha256:${hex}`;
    return this.snapshot()
      .entries.filter((entry) => entry.record.id.startsWith(id))
      .map((entry) => entry.record);
  }

  /** Oldest first, each with its names (as namesOf splits them). */
  listImages(): ImageWithNames[] {
    return [...this.snapshot().listed];
  }

  /** Repo tags and repo digests together, sorted; empty for an unknown id. */
  namesOf(id: string): string[] {
    const names = this.imageNames(id);
    return [...names.repoTags, ...names.repoDigests].sort();
  }

  /** namesOf, split the way CRI reports them. */
  imageNames(id: string): ImageNames {
    const names = this.snapshot().byId.get(id)?.names;
    return names ? { repoTags: [...names.repoTags], repoDigests: [...names.repoDigests] } : noNames();
  }

  /** Undefined when no image has that name. */
  removeName(name: string): RemovedName | undefined {
    return this.changing(() => this.removeNameInTransaction.immediate(name));
  }

  /**
   * Deletes the image and its names, and the rows of its layers that no other image uses.
   * Undefined for an unknown id (RemoveImage is idempotent).
   */
  deleteImage(id: string): DeletedImage | undefined {
    return this.changing(() => this.deleteInTransaction.immediate(id));
  }

  /** Sets last_used_at (ns decimal); returns false for an unknown id. */
  touchImage(id: string, ns: string): boolean {
    return this.changing(() => this.statements.touch.run(ns, id).changes > 0);
  }

  setPinned(id: string, pinned: boolean): boolean {
    return this.changing(() => this.statements.setPinned.run(pinned ? 1 : 0, id).changes > 0);
  }

  /**
   * Records a layer as about to be unpacked, unless it already has a row (another image brought
   * it, or another pull is unpacking it). Returns the row as stored, so the caller can see
   * whether the layer is already unpacked.
   */
  putLayer(layer: NewLayer): LayerRecord {
    this.statements.insertLayer.run(toLayerRow({ ...layer, unpacked: false }));
    const row = this.statements.getLayer.get(layer.diffId);
    if (row === undefined) throw new Error(`layer ${layer.diffId}: row vanished right after insert`);
    return fromLayerRow(row);
  }

  getLayer(diffId: string): LayerRecord | undefined {
    const row = this.statements.getLayer.get(diffId);
    return row === undefined ? undefined : fromLayerRow(row);
  }

  listLayers(): LayerRecord[] {
    return this.statements.listLayers.all().map(fromLayerRow);
  }

  /** Call once the layer dir is committed. Throws NotFoundError for an unknown layer. */
  markLayerUnpacked(diffId: string): void {
    if (this.statements.markUnpacked.run(diffId).changes === 0) throw new NotFoundError('layer', diffId);
  }

  /**
   * Layers no image refers to: what a pull killed before it recorded its image leaves behind.
   * Only meaningful while no pull is running (at start-up).
   */
  listUnreferencedLayers(): LayerRecord[] {
    return this.statements.unreferencedLayers.all().map(fromLayerRow);
  }

  /** Deletes a layer row unless an image uses it; returns whether it was deleted. */
  deleteLayer(diffId: string): boolean {
    if (this.statements.layerUsed.get(diffId)?.used === 1) return false;
    return this.statements.deleteLayer.run(diffId).changes > 0;
  }

  /**
   * Every blob digest something recorded refers to (configs, manifests, layer blobs, repo digests,
   * layer rows): a blob outside this set is garbage once no pull is running.
   */
  referencedBlobs(): Set<string> {
    return new Set(this.statements.referencedBlobs.all().map((row) => row.digest));
  }

  /** Runs a write; the snapshot goes whether it succeeds or not (a failed one may have half-run). */
  private changing<T>(write: () => T): T {
    this.cached = undefined;
    try {
      return write();
    } finally {
      this.cached = undefined;
    }
  }

  private snapshot(): ImageSnapshot {
    this.cached ??= this.loadSnapshot();
    return this.cached;
  }

  /** Two queries for every image and every name, instead of one or two per lookup. */
  private loadSnapshot(): ImageSnapshot {
    const namesById = new Map<string, ImageNameRow[]>();
    for (const row of this.statements.allNames.all()) {
      const list = namesById.get(row.image_id) ?? [];
      list.push(row);
      namesById.set(row.image_id, list);
    }
    const snapshot: ImageSnapshot = { entries: [], listed: [], byId: new Map(), byName: new Map() };
    for (const row of this.statements.listImages.all()) {
      const record = fromImageRow(row);
      const rows = namesById.get(row.id) ?? [];
      const entry = { record, names: splitNames(rows) };
      snapshot.entries.push(entry);
      snapshot.listed.push({ ...record, ...entry.names });
      snapshot.byId.set(record.id, entry);
      for (const name of rows) snapshot.byName.set(name.name, entry);
    }
    return snapshot;
  }

  private put(record: ImageRecord, names: readonly string[], layersUnpacked: boolean): string[] {
    const s = this.statements;
    const insertLayer = layersUnpacked ? s.insertUnpackedLayer : s.insertLayer;
    for (const layer of record.layers) {
      insertLayer.run(
        toLayerRow({
          diffId: layer.diffId,
          blobDigest: layer.digest,
          size: layer.size,
          unpacked: layersUnpacked,
          createdAt: record.createdAt,
        }),
      );
    }
    s.upsertImage.run(toImageRow(record));
    const losers = new Set<string>();
    for (const name of names) {
      const previous = s.nameOwner.get(name)?.image_id;
      if (previous !== undefined && previous !== record.id) losers.add(previous);
      s.upsertName.run({ name, image_id: record.id, kind: nameKind(name) });
    }
    return [...losers].filter((id) => s.countNames.get(id)?.n === 0);
  }

  private delete(id: string): DeletedImage | undefined {
    const s = this.statements;
    const row = s.getImage.get(id);
    if (row === undefined) return undefined;
    const image = fromImageRow(row);
    const repoDigests = splitNames(s.namesOf.all(id)).repoDigests.map((name) =>
      name.slice(name.indexOf('@') + 1),
    );
    // Names go with the image (ON DELETE CASCADE).
    s.deleteImage.run(id);

    const unusedLayers: LayerRecord[] = [];
    for (const diffId of new Set(image.layers.map((layer) => layer.diffId))) {
      if (s.layerUsed.get(diffId)?.used === 1) continue;
      const layer = s.getLayer.get(diffId);
      if (layer === undefined) continue;
      s.deleteLayer.run(diffId);
      unusedLayers.push(fromLayerRow(layer));
    }

    const candidates = new Set([
      image.id,
      image.manifestDigest,
      ...image.layers.map((layer) => layer.digest),
      ...unusedLayers.map((layer) => layer.blobDigest),
      ...repoDigests,
    ]);
    const unusedBlobs = [...candidates].filter((digest) => s.blobUsed.get({ digest })?.used !== 1);
    return { image, unusedLayers, unusedBlobs };
  }

  private unname(name: string): RemovedName | undefined {
    const s = this.statements;
    const imageId = s.nameOwner.get(name)?.image_id;
    if (imageId === undefined) return undefined;
    s.deleteName.run(name);
    return { imageId, orphaned: s.countNames.get(imageId)?.n === 0 };
  }
}

interface ImageSnapshot {
  /** Oldest first. */
  entries: SnapshotEntry[];
  /** listImages' answer, in the same order. */
  listed: ImageWithNames[];
  byId: Map<string, SnapshotEntry>;
  byName: Map<string, SnapshotEntry>;
}

interface SnapshotEntry {
  record: ImageRecord;
  names: ImageNames;
}

function noNames(): ImageNames {
  return { repoTags: [], repoDigests: [] };
}

/** Rows come sorted by name, so both lists stay sorted. */
function splitNames(rows: readonly ImageNameRow[]): ImageNames {
  const names = noNames();
  for (const row of rows) {
    if (parseNameKind(row) === 'digest') names.repoDigests.push(row.name);
    else names.repoTags.push(row.name);
  }
  return names;
}

function prepareStatements(db: Database.Database): Statements {
  const params = IMAGE_COLUMNS.map((column) => `@${column}`).join(', ');
  // created_at is the first pull's; everything else follows the latest put.
  const updates = IMAGE_COLUMNS.filter((column) => column !== 'id' && column !== 'created_at')
    .map((column) => `${column} = excluded.${column}`)
    .join(', ');
  const layerParams = LAYER_COLUMNS.map((column) => `@${column}`).join(', ');
  return {
    upsertImage: db.prepare<[ImageRow]>(
      `INSERT INTO images (${COLUMNS}) VALUES (${params}) ON CONFLICT (id) DO UPDATE SET ${updates}`,
    ),
    getImage: db.prepare<[string], ImageRow>(`SELECT ${COLUMNS} FROM images WHERE id = ?`),
    listImages: db.prepare<[], ImageRow>(`SELECT ${COLUMNS} FROM images ${creationOrder()}`),
    deleteImage: db.prepare<[string]>('DELETE FROM images WHERE id = ?'),
    touch: db.prepare<[string, string]>('UPDATE images SET last_used_at = ? WHERE id = ?'),
    setPinned: db.prepare<[number, string]>('UPDATE images SET pinned = ? WHERE id = ?'),
    allNames: db.prepare<[], ImageNameRow>('SELECT name, image_id, kind FROM image_names ORDER BY name'),
    namesOf: db.prepare<[string], ImageNameRow>(
      'SELECT name, image_id, kind FROM image_names WHERE image_id = ? ORDER BY name',
    ),
    nameOwner: db.prepare<[string], { image_id: string }>('SELECT image_id FROM image_names WHERE name = ?'),
    upsertName: db.prepare<[ImageNameRow]>(
      `INSERT INTO image_names (name, image_id, kind) VALUES (@name, @image_id, @kind)
       ON CONFLICT (name) DO UPDATE SET image_id = excluded.image_id, kind = excluded.kind`,
    ),
    countNames: db.prepare<[string], { n: number }>(
      'SELECT count(*) AS n FROM image_names WHERE image_id = ?',
    ),
    deleteName: db.prepare<[string]>('DELETE FROM image_names WHERE name = ?'),
    insertLayer: db.prepare<[LayerRow]>(
      `INSERT INTO layers (${LCOLUMNS}) VALUES (${layerParams}) ON CONFLICT (diff_id) DO NOTHING`,
    ),
    insertUnpackedLayer: db.prepare<[LayerRow]>(
      `INSERT INTO layers (${LCOLUMNS}) VALUES (${layerParams})
       ON CONFLICT (diff_id) DO UPDATE SET unpacked = 1`,
    ),
    getLayer: db.prepare<[string], LayerRow>(`SELECT ${LCOLUMNS} FROM layers WHERE diff_id = ?`),
    listLayers: db.prepare<[], LayerRow>(`SELECT ${LCOLUMNS} FROM layers ${creationOrder('diff_id')}`),
    markUnpacked: db.prepare<[string]>('UPDATE layers SET unpacked = 1 WHERE diff_id = ?'),
    deleteLayer: db.prepare<[string]>('DELETE FROM layers WHERE diff_id = ?'),
    layerUsed: db.prepare<[string], { used: number }>(
      `SELECT EXISTS (SELECT 1 FROM ${IMAGE_LAYERS} WHERE json_extract(value, '$.diffId') = ?) AS used`,
    ),
    blobUsed: db.prepare<[{ digest: string }], { used: number }>(
      `SELECT (
         EXISTS (SELECT 1 FROM images WHERE id = @digest OR manifest_digest = @digest)
         OR EXISTS (SELECT 1 FROM ${IMAGE_LAYERS} WHERE json_extract(value, '$.digest') = @digest)
         OR EXISTS (SELECT 1 FROM layers WHERE blob_digest = @digest)
         OR EXISTS (SELECT 1 FROM image_names WHERE kind = 'digest' AND ${NAME_DIGEST} = @digest)
       ) AS used`,
    ),
    unreferencedLayers: db.prepare<[], LayerRow>(
      `SELECT ${LCOLUMNS} FROM layers
       WHERE NOT EXISTS (
         SELECT 1 FROM ${IMAGE_LAYERS} WHERE json_extract(value, '$.diffId') = layers.diff_id
       )
       ${creationOrder('diff_id')}`,
    ),
    referencedBlobs: db.prepare<[], { digest: string }>(
      `SELECT id AS digest FROM images
       UNION SELECT manifest_digest FROM images
       UNION SELECT json_extract(value, '$.digest') FROM ${IMAGE_LAYERS}
       UNION SELECT blob_digest FROM layers
       UNION SELECT ${NAME_DIGEST} FROM image_names WHERE kind = 'digest'`,
    ),
  };
}
