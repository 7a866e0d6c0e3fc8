/**
 * Test images built from scratch: layer tarballs from a list of entries (a small ustar/pax writer,
 * so tests control modes, owners, links, devices, whiteouts and xattrs exactly), image configs,
 * manifests and indexes in OCI or Docker form, pushed to a TestRegistry.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { after, before } from 'node:test';
import { gzipSync } from 'node:zlib';
import { run } from '../../src/exec.js';
import type { ImageRuntimeConfig } from '../../src/model/image.js';
import { MEDIA_TYPES, type Descriptor, type Platform } from '../../src/registry/manifest.js';
import { hostPlatform } from '../../src/registry/platform.js';
import { startRegistry, type TestRegistry } from './registry.js';

interface Owner {
  uid?: number;
  gid?: number;
}

/** One entry of a layer. Paths are relative to the root (`bin/sh`); a leading "/" is dropped. */
export type LayerEntry =
  | ({ type: 'file'; path: string; content: string | Buffer; mode?: number; xattrs?: Xattrs } & Owner)
  | ({ type: 'dir'; path: string; mode?: number; xattrs?: Xattrs } & Owner)
  | ({ type: 'symlink'; path: string; target: string } & Owner)
  /** A hard link at `path` to the earlier entry `target` (a layer path, like `bin/busybox`). */
  | { type: 'hardlink'; path: string; target: string }
  /** Deletes `path` from lower layers: written as `<dir>/.wh.<name>`. */
  | { type: 'whiteout'; path: string }
  /** Hides everything lower layers have in directory `path`: written as `<path>/.wh..wh..opq`. */
  | { type: 'opaque'; path: string }
  | ({ type: 'char' | 'block'; path: string; major: number; minor: number; mode?: number } & Owner)
  | ({ type: 'fifo'; path: string; mode?: number } & Owner);

/** Extended attributes, e.g. `{ 'user.test': 'x' }`; written as SCHILY.xattr pax records. */
export type Xattrs = Record<string, string | Buffer>;

export type Compression = 'gzip' | 'zstd' | 'none';

export interface BuiltLayer {
  /** The blob as pushed (compressed). */
  bytes: Buffer;
  digest: string;
  /** sha256 of the uncompressed tar: what the image config's rootfs.diff_ids lists. */
  diffId: string;
  /** OCI media type; pushImage maps it for Docker-format images. */
  mediaType: string;
  compression: Compression;
  /** The uncompressed tar, for tests that compare unpacked content. */
  tar: Buffer;
}

/** Fixed mtime so equal entries give equal digests run after run. */
const MTIME = 1_700_000_000;

export async function buildLayer(
  entries: readonly LayerEntry[],
  compression: Compression = 'gzip',
): Promise<BuiltLayer> {
  return layerFromTar(tarball(entries), compression);
}

/** A layer of a tar made elsewhere (a checkpoint archive, say), as buildLayer makes one. */
export async function layerFromTar(tar: Buffer, compression: Compression = 'gzip'): Promise<BuiltLayer> {
  const bytes = await compress(tar, compression);
  const mediaType = {
    gzip: MEDIA_TYPES.ociLayerGzip,
    zstd: MEDIA_TYPES.ociLayerZstd,
    none: MEDIA_TYPES.ociLayer,
  }[compression];
  return { bytes, digest: sha256(bytes), diffId: sha256(tar), mediaType, compression, tar };
}

async function compress(tar: Buffer, compression: Compression): Promise<Buffer> {
  if (compression === 'none') return tar;
  if (compression === 'gzip') return gzipSync(tar);
  // Node 20's zlib has no zstd; run() passes text, not bytes, so go through files.
  const dir = await mkdtemp(join(tmpdir(), 'berth-zstd-'));
  try {
    await writeFile(join(dir, 'layer.tar'), tar);
    await run('zstd', ['-q', '-f', '-o', join(dir, 'layer.tar.zst'), join(dir, 'layer.tar')], {
      timeoutMs: 60_000,
    });
    return await readFile(join(dir, 'layer.tar.zst'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// tar (POSIX ustar, with pax extended headers for what ustar cannot hold)

const BLOCK = 512;
/** Largest id a ustar field (7 octal digits) holds; bigger ones go in pax records. */
const MAX_USTAR_ID = 0o7777777;
const TYPEFLAG = {
  file: '0',
  hardlink: '1',
  symlink: '2',
  char: '3',
  block: '4',
  dir: '5',
  fifo: '6',
  pax: 'x',
};

interface Header {
  path: string;
  typeflag: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  linkname: string;
  devmajor: number;
  devminor: number;
  xattrs: Xattrs;
}

/** Serialises entries, in order, as a tar archive. */
export function tarball(entries: readonly LayerEntry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const entry of entries) {
    const { header, data } = toHeader(entry);
    blocks.push(...headerBlocks(header), data, padding(data.length));
  }
  blocks.push(Buffer.alloc(2 * BLOCK));
  return Buffer.concat(blocks);
}

function toHeader(e: LayerEntry): { header: Header; data: Buffer } {
  const path = e.path.replace(/^\/+/, '').replace(/\/+$/, '');
  const base: Header = {
    path,
    typeflag: TYPEFLAG.file,
    mode: 0o644,
    uid: 0,
    gid: 0,
    size: 0,
    linkname: '',
    devmajor: 0,
    devminor: 0,
    xattrs: {},
  };
  const owner = (o: Owner): Pick<Header, 'uid' | 'gid'> => ({ uid: o.uid ?? 0, gid: o.gid ?? 0 });
  const empty = Buffer.alloc(0);
  switch (e.type) {
    case 'file': {
      const data = Buffer.isBuffer(e.content) ? e.content : Buffer.from(e.content);
      return {
        header: { ...base, ...owner(e), mode: e.mode ?? 0o644, size: data.length, xattrs: e.xattrs ?? {} },
        data,
      };
    }
    case 'dir':
      return {
        header: {
          ...base,
          ...owner(e),
          path: `${path}/`,
          typeflag: TYPEFLAG.dir,
          mode: e.mode ?? 0o755,
          xattrs: e.xattrs ?? {},
        },
        data: empty,
      };
    case 'symlink':
      return {
        header: { ...base, ...owner(e), typeflag: TYPEFLAG.symlink, mode: 0o777, linkname: e.target },
        data: empty,
      };
    case 'hardlink':
      return {
        header: { ...base, typeflag: TYPEFLAG.hardlink, linkname: e.target.replace(/^\/+/, '') },
        data: empty,
      };
    case 'whiteout':
      return {
        header: { ...base, path: posix.join(posix.dirname(path), `.wh.${posix.basename(path)}`) },
        data: empty,
      };
    case 'opaque':
      return { header: { ...base, path: posix.join(path, '.wh..wh..opq') }, data: empty };
    case 'char':
    case 'block':
      return {
        header: {
          ...base,
          ...owner(e),
          typeflag: TYPEFLAG[e.type],
          mode: e.mode ?? 0o666,
          devmajor: e.major,
          devminor: e.minor,
        },
        data: empty,
      };
    case 'fifo':
      return {
        header: { ...base, ...owner(e), typeflag: TYPEFLAG.fifo, mode: e.mode ?? 0o644 },
        data: empty,
      };
  }
}

/** The ustar header, preceded by a pax header when a path, link or xattr does not fit ustar. */
function headerBlocks(h: Header): Buffer[] {
  const records: [string, string | Buffer][] = [];
  if (!fits(h.path, 100)) records.push(['path', h.path]);
  if (!fits(h.linkname, 100)) records.push(['linkpath', h.linkname]);
  if (h.uid > MAX_USTAR_ID) records.push(['uid', String(h.uid)]);
  if (h.gid > MAX_USTAR_ID) records.push(['gid', String(h.gid)]);
  for (const [name, value] of Object.entries(h.xattrs)) records.push([`SCHILY.xattr.${name}`, value]);
  const out: Buffer[] = [];
  if (records.length > 0) {
    const body = Buffer.concat(records.map(([k, v]) => paxRecord(k, v)));
    const name = `PaxHeaders/${posix.basename(h.path).slice(0, 80)}`;
    out.push(
      ustar({ ...h, path: name, typeflag: TYPEFLAG.pax, size: body.length, linkname: '', mode: 0o644 }),
    );
    out.push(body, padding(body.length));
  }
  out.push(ustar(h));
  return out;
}

function fits(s: string, max: number): boolean {
  // Non-ASCII goes to pax too: ustar has no defined encoding.
  return Buffer.byteLength(s) <= max && /^[\x20-\x7e]*$/.test(s);
}

/** `"<len> <key>=<value>\n"`, where len counts the whole record including its own digits. */
function paxRecord(key: string, value: string | Buffer): Buffer {
  const payload = Buffer.concat([
    Buffer.from(` ${key}=`),
    Buffer.isBuffer(value) ? value : Buffer.from(value),
    Buffer.from('\n'),
  ]);
  let len = payload.length + 1;
  while (String(len).length + payload.length !== len) len = String(len).length + payload.length;
  return Buffer.concat([Buffer.from(String(len)), payload]);
}

function ustar(h: Header): Buffer {
  const b = Buffer.alloc(BLOCK);
  const str = (offset: number, length: number, value: string): void => {
    Buffer.from(value).copy(b, offset, 0, length);
  };
  const octal = (offset: number, length: number, value: number): void => {
    str(offset, length, value.toString(8).padStart(length - 1, '0') + '\0');
  };
  str(0, 100, h.path);
  octal(100, 8, h.mode & 0o7777);
  octal(108, 8, h.uid > MAX_USTAR_ID ? 0 : h.uid);
  octal(116, 8, h.gid > MAX_USTAR_ID ? 0 : h.gid);
  octal(124, 12, h.size);
  octal(136, 12, MTIME);
  str(148, 8, '        '); // checksum counts as spaces while summing
  str(156, 1, h.typeflag);
  str(157, 100, h.linkname);
  str(257, 6, 'ustar\0');
  str(263, 2, '00');
  octal(329, 8, h.devmajor);
  octal(337, 8, h.devminor);
  let sum = 0;
  for (const byte of b) sum += byte;
  str(148, 8, sum.toString(8).padStart(6, '0') + '\0 ');
  return b;
}

function padding(length: number): Buffer {
  return Buffer.alloc((BLOCK - (length % BLOCK)) % BLOCK);
}

function sha256(bytes: Buffer): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}

// ---------------------------------------------------------------------------------------------
// Images

export type ImageFormat = 'oci' | 'docker';

export interface ImageSpec {
  layers: readonly BuiltLayer[];
  /** Merged over the defaults (Env with a PATH). */
  config?: Partial<ImageRuntimeConfig>;
  /** Default: this machine's platform. */
  platform?: Platform;
  /** Default 'oci'. */
  format?: ImageFormat;
  /** The manifest's annotations (a checkpoint image's mark, say); none by default. */
  annotations?: Record<string, string>;
}

export interface PushedImage {
  /** `127.0.0.1:<port>/<repo>:<tag>`, or `...@<digest>` when pushed without a tag. */
  reference: string;
  manifestDigest: string;
  manifestSize: number;
  manifestMediaType: string;
  manifest: Buffer;
  /** The image id. */
  configDigest: string;
  config: Buffer;
  layers: readonly BuiltLayer[];
  platform: Platform;
}

const DEFAULT_ENV = ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'];

/**
 * The image most tests run: busybox, sleeping (`/bin/sleep 1000`, long enough to outlast any test)
 * unless a container's command says otherwise. Pushed as `<repo>:1`; returns its reference.
 */
export async function pushBusyboxSleeper(registry: TestRegistry, repo: string): Promise<string> {
  const image = await pushImage(registry, repo, '1', {
    layers: [await busyboxLayer()],
    config: { Cmd: ['/bin/sleep', '1000'], WorkingDir: '/' },
  });
  return image.reference;
}

/**
 * A loopback registry holding the busybox sleeper as `<repo>:1`, for the enclosing describe block:
 * started and pushed in its before hook, stopped after it. Returns the image's reference.
 */
export function useBusyboxImage(repo: string): () => string {
  let registry: TestRegistry | undefined;
  let reference = '';
  before(async () => {
    registry = await startRegistry();
    reference = await pushBusyboxSleeper(registry, repo);
  });
  after(async () => {
    await registry?.stop();
  });
  return () => {
    assert.ok(reference, 'busybox image not pushed');
    return reference;
  };
}

/** Pushes layers, config and manifest; `tag` null pushes the manifest by digest only (for indexes). */
export async function pushImage(
  registry: TestRegistry,
  repo: string,
  tag: string | null,
  spec: ImageSpec,
): Promise<PushedImage> {
  const format = spec.format ?? 'oci';
  const platform = spec.platform ?? hostPlatform();
  const config = Buffer.from(
    JSON.stringify({
      created: new Date(MTIME * 1000).toISOString(),
      architecture: platform.architecture,
      os: platform.os,
      ...(platform.variant !== undefined ? { variant: platform.variant } : {}),
      config: { Env: DEFAULT_ENV, ...spec.config },
      rootfs: { type: 'layers', diff_ids: spec.layers.map((l) => l.diffId) },
      history: spec.layers.map(() => ({
        created: new Date(MTIME * 1000).toISOString(),
        created_by: 'berth test harness',
      })),
    }),
  );
  for (const layer of spec.layers) await registry.pushBlob(repo, layer.bytes);
  const configBlob = await registry.pushBlob(repo, config);

  const mediaType = format === 'oci' ? MEDIA_TYPES.ociManifest : MEDIA_TYPES.dockerManifest;
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType,
      config: {
        mediaType: format === 'oci' ? MEDIA_TYPES.ociConfig : MEDIA_TYPES.dockerConfig,
        digest: configBlob.digest,
        size: configBlob.size,
      },
      layers: spec.layers.map((l) => ({
        mediaType: format === 'oci' ? l.mediaType : dockerLayerType(l.compression),
        digest: l.digest,
        size: l.bytes.length,
      })),
      ...(spec.annotations && { annotations: spec.annotations }),
    }),
  );
  const manifestDigest = sha256(manifest);
  await registry.pushManifest(repo, tag ?? manifestDigest, manifest, mediaType);
  return {
    reference: `${registry.host}/${repo}${tag !== null ? `:${tag}` : `@${manifestDigest}`}`,
    manifestDigest,
    manifestSize: manifest.length,
    manifestMediaType: mediaType,
    manifest,
    configDigest: configBlob.digest,
    config,
    layers: spec.layers,
    platform,
  };
}

function dockerLayerType(c: Compression): string {
  if (c === 'gzip') return MEDIA_TYPES.dockerLayerGzip;
  if (c === 'none') return 'application/vnd.docker.image.rootfs.diff.tar';
  // Docker schema 2 has no zstd type of its own; Docker and containerd write the OCI one.
  return MEDIA_TYPES.ociLayerZstd;
}

export interface PushedIndex {
  reference: string;
  digest: string;
  mediaType: string;
  bytes: Buffer;
  images: readonly PushedImage[];
}

/**
 * Pushes an OCI index or Docker manifest list over already pushed images (push them with tag null
 * and each its own platform; Docker lists should hold Docker-format images).
 */
export async function pushIndex(
  registry: TestRegistry,
  repo: string,
  tag: string,
  images: readonly PushedImage[],
  format: ImageFormat = 'oci',
): Promise<PushedIndex> {
  const mediaType = format === 'oci' ? MEDIA_TYPES.ociIndex : MEDIA_TYPES.dockerManifestList;
  const manifests: Descriptor[] = images.map((img) => ({
    mediaType: img.manifestMediaType,
    digest: img.manifestDigest,
    size: img.manifestSize,
    platform: img.platform,
  }));
  const bytes = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType, manifests }));
  const digest = await registry.pushManifest(repo, tag, bytes, mediaType);
  return { reference: `${registry.host}/${repo}:${tag}`, digest, mediaType, bytes, images };
}

// ---------------------------------------------------------------------------------------------
// A ready-made base layer

const BUSYBOX = '/bin/busybox';
/** Applets linked into /bin; enough for the container tests' commands. */
export const BUSYBOX_APPLETS = [
  'sh',
  'ls',
  'cat',
  'sleep',
  'echo',
  'id',
  'hostname',
  'ip',
  'env',
  'ps',
  'kill',
  'mkdir',
  'touch',
  'rm',
  'stat',
  'test',
  'true',
  'false',
  'pwd',
  'printf',
  'grep',
  'head',
  'wc',
  'readlink',
  'mount',
  'whoami',
  'nc',
] as const;

export const PASSWD = [
  'root:x:0:0:root:/root:/bin/sh',
  'app:x:1000:1000:app:/home/app:/bin/sh',
  'nobody:x:65534:65534:nobody:/nonexistent:/bin/false',
  '',
].join('\n');

export const GROUP = ['root:x:0:', 'app:x:1000:', 'extra:x:2000:app', 'nogroup:x:65534:', ''].join('\n');

/**
 * Entries of a minimal root filesystem: the static busybox from Debian's busybox-static with applet
 * symlinks in /bin, /etc/passwd (root; app 1000:1000) and /etc/group (extra 2000 has app).
 * `extraApplets` are linked too, for a suite's commands beyond BUSYBOX_APPLETS.
 */
export function busyboxEntries(extraApplets: readonly string[] = []): LayerEntry[] {
  return [
    { type: 'dir', path: 'bin' },
    { type: 'file', path: 'bin/busybox', content: readFileSync(BUSYBOX), mode: 0o755 },
    ...BUSYBOX_APPLETS.map((a): LayerEntry => ({ type: 'symlink', path: `bin/${a}`, target: 'busybox' })),
    { type: 'dir', path: 'etc' },
    { type: 'file', path: 'etc/passwd', content: PASSWD },
    { type: 'file', path: 'etc/group', content: GROUP },
    { type: 'dir', path: 'root', mode: 0o700 },
    { type: 'dir', path: 'home' },
    { type: 'dir', path: 'home/app', mode: 0o755, uid: 1000, gid: 1000 },
    { type: 'dir', path: 'tmp', mode: 0o1777 },
    ...extraApplets.map((a): LayerEntry => ({ type: 'symlink', path: `bin/${a}`, target: 'busybox' })),
  ];
}

/** What a suite adds to the busybox layer: applets its commands need, and files of its own. */
export interface BusyboxExtras {
  applets?: readonly string[];
  entries?: readonly LayerEntry[];
}

export function busyboxLayer(
  compression: Compression = 'gzip',
  extras: BusyboxExtras = {},
): Promise<BuiltLayer> {
  return buildLayer([...busyboxEntries(extras.applets), ...(extras.entries ?? [])], compression);
}
