/**
 * Reading a spec back in whatever shape the berth that wrote it used. A spec is written once, with
 * the version of its shape; a berth that adds a field bumps the version and appends the upgrade
 * from the previous shape, which says what the field was for specs written before it existed. A
 * decoded spec is thus always the current shape, every field set: never `undefined` where an old
 * row lacked a field.
 */
import { corrupt, hasObjectField, isObject, parseJson, type ColumnOf } from './columns.js';

type Shape = Record<string, unknown>;

/** Every shape a spec has had, as the versions between them. */
export interface SpecCodec {
  /**
   * upgrades[n - 1] turns a spec of shape n into shape n + 1, giving each field shape n lacked the
   * value it had in effect then. Append only: rows in the field hold every version there was.
   */
  readonly upgrades: readonly ((older: Shape) => Shape)[];
  /** The outline of the current shape, checked last: a row someone edited fails here. */
  looksRight(value: Shape): boolean;
}

/** The version a berth with `codec` writes. */
export function currentVersion(codec: SpecCodec): number {
  return codec.upgrades.length + 1;
}

/** The spec `text`, written as shape `version`, in the current shape. */
export function decodeSpec<T>(codec: SpecCodec, version: number, text: string, where: ColumnOf): T {
  const current = currentVersion(codec);
  if (!Number.isInteger(version) || version < 1 || version > current) {
    throw new Error(
      `${where.noun} ${where.id}: ${where.column} has spec version ${version}, which this berth cannot read ` +
        `(it knows 1 to ${current}; a newer berth wrote it?)`,
    );
  }
  const stored = parseJson(text, where);
  if (!isObject(stored)) throw corrupt(where, text);
  let spec: Shape = stored;
  for (const upgrade of codec.upgrades.slice(version - 1)) spec = upgrade(spec);
  if (!codec.looksRight(spec)) throw corrupt(where, text);
  // The writer's type vouches for the rest of the shape, too rich to re-check whole on every read.
  return spec as T;
}

/** The outline a spec of any kind has always had. */
function hasMetadata(spec: Shape): boolean {
  return hasObjectField(spec, 'metadata');
}

/**
 * Shape 1 (src/model/sandbox.ts SandboxSpec): as berth stored it up to schema version 4. Shape 2
 * adds `userNamespace`: every pod before it ran in the host's.
 */
export const SANDBOX_SPEC: SpecCodec = {
  upgrades: [(older) => ({ ...older, userNamespace: null })],
  looksRight: (spec) => hasMetadata(spec) && 'userNamespace' in spec,
};

/**
 * Shape 1 (src/model/container.ts ContainerSpec): as berth stored it up to schema version 4. Shape 2
 * adds `cdiDevices`: no container before it asked for any. Shape 3 adds `idmap` to each mount: every
 * mount before it was a plain bind. Shape 4 adds `image` to each mount: none was an image volume.
 * Shape 5 adds `security.supplementalGroupsPolicy`: every container before it merged the image's
 * groups.
 */
export const CONTAINER_SPEC: SpecCodec = {
  upgrades: [
    (older) => ({ ...older, cdiDevices: [] }),
    eachMountGets('idmap', null),
    eachMountGets('image', null),
    (older) => ({
      ...older,
      security: isObject(older.security)
        ? { ...older.security, supplementalGroupsPolicy: 'Merge' }
        : older.security,
    }),
  ],
  looksRight: (spec) =>
    hasMetadata(spec) &&
    'cdiDevices' in spec &&
    Array.isArray(spec.mounts) &&
    spec.mounts.every((m: unknown) => isObject(m) && 'idmap' in m && 'image' in m) &&
    isObject(spec.security) &&
    'supplementalGroupsPolicy' in spec.security,
};

/** An upgrade giving each mount of a container spec `field`, set to `value`. */
function eachMountGets(field: string, value: unknown): (older: Shape) => Shape {
  return (older) => ({
    ...older,
    mounts: Array.isArray(older.mounts)
      ? older.mounts.map((m: unknown) => (isObject(m) ? { ...m, [field]: value } : m))
      : older.mounts,
  });
}

/**
 * A container's resources as UpdateContainerResources changed them, stored apart from its spec:
 * shape 1 is ContainerResources as the spec's shape 1 holds it. A field added to the resources is
 * an upgrade here and one in CONTAINER_SPEC, whose shape 1 rows hold resources too.
 */
export const CONTAINER_RESOURCES: SpecCodec = { upgrades: [], looksRight: () => true };
