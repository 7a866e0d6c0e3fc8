/**
 * An image's index, manifest and config as berth takes them from a registry: the config bounded in size
 * before it is downloaded, and every field berth reads later checked for its shape, so that a
 * hostile image is refused at pull, naming the field, instead of failing (or throwing a TypeError
 * in) the pull's later steps or each CreateContainer.
 */
import type { ImageConfig } from '../model/image.js';
import type { Descriptor, ImageIndex, ImageManifest } from '../registry/manifest.js';
import { ImageFormatError } from './errors.js';

/**
 * The largest config berth downloads: CRI-O's (containers/image reads configs under 4 MiB), the
 * same as the manifest bound both it and containerd keep. A real config is a few KiB; the whole
 * of it is kept in memory, stored in the database and sent in every verbose ImageStatus.
 */
export const MAX_CONFIG_BYTES = 4 * 1024 * 1024;

const DIGEST = /^sha256:[0-9a-f]{64}$/;

export function checkConfigSize(desc: Descriptor): void {
  if (desc.size > MAX_CONFIG_BYTES) {
    throw new ImageFormatError(
      `image config ${desc.digest} is ${desc.size} bytes, more than the ${MAX_CONFIG_BYTES} berth reads`,
    );
  }
}

/** `parsed` (the manifest's JSON) as an ImageManifest, or an ImageFormatError naming the bad field. */
export function checkManifest(parsed: unknown): ImageManifest {
  if (!isObject(parsed)) throw new ImageFormatError('image manifest is not a JSON object');
  if (!isObject(parsed.config) || !Array.isArray(parsed.layers)) {
    throw new ImageFormatError('image manifest lacks a config or layers');
  }
  checkDescriptor(parsed.config, 'config');
  parsed.layers.forEach((layer, i) => checkDescriptor(layer, `layers[${i}]`));
  return parsed as unknown as ImageManifest;
}

/** `parsed` (an index's JSON) as an ImageIndex, or an ImageFormatError naming the bad field. */
export function checkIndex(parsed: unknown): ImageIndex {
  if (!isObject(parsed) || !Array.isArray(parsed.manifests)) {
    throw new ImageFormatError('image index has no list of manifests');
  }
  parsed.manifests.forEach((entry, i) => {
    checkDescriptor(entry, `manifests[${i}]`, 'image index');
    const platform = (entry as Record<string, unknown>).platform;
    if (platform === undefined) return;
    const ok =
      isObject(platform) &&
      typeof platform.os === 'string' &&
      typeof platform.architecture === 'string' &&
      (platform.variant === undefined || typeof platform.variant === 'string');
    if (!ok) throw new ImageFormatError(`image index: manifests[${i}] has a malformed platform`);
  });
  return parsed as unknown as ImageIndex;
}

/** What berth reads of a descriptor: the blob's digest (a file name in the store), size and type. */
function checkDescriptor(value: unknown, field: string, document = 'image manifest'): void {
  const bad = (problem: string): ImageFormatError => new ImageFormatError(`${document}: ${field} ${problem}`);
  if (!isObject(value)) throw bad('is not a descriptor');
  if (typeof value.digest !== 'string' || !DIGEST.test(value.digest)) {
    throw bad('has no sha256 digest');
  }
  if (!Number.isSafeInteger(value.size) || (value.size as number) < 0) throw bad('has no size in bytes');
  if (typeof value.mediaType !== 'string') throw bad('has no media type');
}

/** `parsed` (the config's JSON) as an ImageConfig, or an ImageFormatError naming the bad field. */
export function checkImageConfig(parsed: unknown, digest: string): ImageConfig {
  const bad = (problem: string): ImageFormatError =>
    new ImageFormatError(`image config ${digest}: ${problem}`);
  if (!isObject(parsed)) throw bad('is not a JSON object');
  const rootfs = parsed.rootfs;
  if (rootfs !== undefined) {
    if (!isObject(rootfs)) throw bad('rootfs is not an object');
    const ids = rootfs.diff_ids;
    if (
      ids !== undefined &&
      !(Array.isArray(ids) && ids.every((id) => typeof id === 'string' && DIGEST.test(id)))
    ) {
      throw bad('rootfs.diff_ids is not a list of sha256 digests');
    }
  }
  const config = parsed.config;
  if (config === undefined || config === null) return parsed as unknown as ImageConfig;
  if (!isObject(config)) throw bad('config is not an object');
  for (const field of ['User', 'WorkingDir', 'StopSignal']) {
    if (!isAbsent(config[field]) && typeof config[field] !== 'string')
      throw bad(`config.${field} is not a string`);
  }
  for (const field of ['Env', 'Entrypoint', 'Cmd']) {
    const value = config[field];
    if (!isAbsent(value) && !(Array.isArray(value) && value.every((v) => typeof v === 'string'))) {
      throw bad(`config.${field} is not a list of strings`);
    }
  }
  return parsed as unknown as ImageConfig;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isAbsent(value: unknown): boolean {
  return value === undefined || value === null;
}
