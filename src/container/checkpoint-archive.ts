/**
 * Reading a checkpoint archive, as CheckpointContainer writes it (CRI-O's layout, which kubelet's
 * tooling reads: model/checkpoint-archive.ts). The archive comes from outside berth, so it is read
 * as untrusted input: checked whole before anything is made from it, and unpacked only with the
 * layer unpacker's guards.
 */
import { createReadStream } from 'node:fs';
import { cp, lstat, mkdir, readFile, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { InvalidArgumentError, errorMessage } from '../errors.js';
import { ARCHIVE_FILES } from '../model/checkpoint-archive.js';
import type { Spec } from '../oci/spec.js';
import { isObject, isStringArray } from '../store/columns.js';
import { entryComponents } from '../unpack/safety.js';
import { TarReader } from '../unpack/tar-reader.js';
import { RefusedEntryError, UnpackError, unpackLayer } from '../unpack/index.js';
import { PRIVATE_DIR } from '../file-modes.js';

/** The request field that named the archive: every complaint about it names that field. */
export const ARCHIVE_FIELD = 'config.image.image';

/** Each JSON member is read into memory: a spec or config of more is no honest one. */
const MAX_JSON_BYTES = 4 * 1024 * 1024;

/** What config.dump says of the checkpointed container that a restore needs. */
export interface CheckpointConfig {
  /** The checkpointed container's id and name, for logs. */
  id: string;
  name: string;
  /** The image as the user named it. */
  rootfsImage: string;
  /** Its id, `sha256:...`: what berth looks it up by first. */
  rootfsImageRef: string;
}

export interface CheckedArchive {
  /** The archive: a tar file, or a dir holding its files (a checkpoint image's layer). */
  path: string;
  kind: 'tar' | 'dir';
  config: CheckpointConfig;
  spec: Spec;
  /** Paths of the image the container deleted, as components under the root. */
  deleted: string[][];
  hasRootfsDiff: boolean;
}

function invalid(path: string, problem: string): InvalidArgumentError {
  return new InvalidArgumentError(ARCHIVE_FIELD, `checkpoint archive ${path}: ${problem}`);
}

/**
 * rootfs-diff.tar, a tar inside the archive, read through once as the outer one is: every member
 * whole (a member claiming more than the tar holds is a truncated archive) and no path leading out
 * of the rootfs. Where its members may write is known only when it is applied over the image
 * (applyRootfsChanges); what this can refuse is refused before anything is made.
 */
async function checkRootfsDiff(path: string, chunks: AsyncIterable<Buffer>): Promise<void> {
  const reader = new TarReader(chunks);
  try {
    for (let entry = await reader.next(); entry !== undefined; entry = await reader.next()) {
      if (entry.path.startsWith('/')) throw new Error(`member ${JSON.stringify(entry.path)} is absolute`);
      entryComponents(entry.path);
    }
  } catch (err) {
    throw invalid(path, `member ${ARCHIVE_FILES.rootfsDiff}: ${errorMessage(err)}`);
  }
}

/**
 * Reads the archive at `path` through once: a tar holding only files and dirs, no path leading
 * out of it, with config.dump, spec.dump and checkpoint/ (each of the right kind). Throws
 * InvalidArgumentError naming the request field and what is wrong; makes nothing.
 */
export async function checkArchive(path: string, timeoutMs: number): Promise<CheckedArchive> {
  const st = await lstat(path).catch(() => null);
  if (!st?.isFile()) throw invalid(path, st ? 'is not a regular file' : 'does not exist');
  const stream = createReadStream(path);
  const timer = setTimeout(() => stream.destroy(new Error(`not read within ${timeoutMs} ms`)), timeoutMs);
  const found = new Map<string, Buffer>();
  let checkpointDir = false;
  let rootfsDiff = false;
  let members = 0;
  try {
    const reader = new TarReader(stream as AsyncIterable<Buffer>);
    for (let entry = await reader.next(); entry !== undefined; entry = await reader.next()) {
      members++;
      if (entry.path.startsWith('/')) throw invalid(path, `member ${JSON.stringify(entry.path)} is absolute`);
      const parts = entryComponents(entry.path);
      if (parts.length === 0) continue;
      if (entry.type !== 'file' && entry.type !== 'dir') {
        throw invalid(
          path,
          `member ${JSON.stringify(entry.path)} is a ${entry.type}; only files and dirs belong`,
        );
      }
      const top = parts[0];
      if (top === ARCHIVE_FILES.checkpoint) {
        if (parts.length === 1 && entry.type !== 'dir') throw invalid(path, 'checkpoint is not a directory');
        checkpointDir = true;
        continue;
      }
      if (parts.length !== 1) continue;
      if (top === ARCHIVE_FILES.rootfsDiff) {
        rootfsDiff = entry.type === 'file';
        if (rootfsDiff) await checkRootfsDiff(path, reader.body());
        continue;
      }
      if (top !== ARCHIVE_FILES.config && top !== ARCHIVE_FILES.spec && top !== ARCHIVE_FILES.deleted)
        continue;
      if (entry.type !== 'file') throw invalid(path, `${top} is not a file`);
      if (entry.size > MAX_JSON_BYTES) throw invalid(path, `${top} is larger than ${MAX_JSON_BYTES} bytes`);
      const chunks: Buffer[] = [];
      for await (const chunk of reader.body()) chunks.push(chunk);
      found.set(top, Buffer.concat(chunks));
    }
  } catch (err) {
    if (err instanceof InvalidArgumentError) throw err;
    throw invalid(path, unreadable(err, members));
  } finally {
    clearTimeout(timer);
    stream.destroy();
  }
  if (!checkpointDir) throw invalid(path, `has no ${ARCHIVE_FILES.checkpoint}/ directory`);
  return checked(path, 'tar', found, rootfsDiff);
}

/**
 * Why `path` could not be read as a tar, in words that quote none of its bytes: the path may name
 * any file on the node (/etc/shadow), and what the reader saw in it (a header's name or fields)
 * would go to the client and the log. A file that is no tar at all fails on its first header.
 */
function unreadable(err: unknown, members: number): string {
  if (!(err instanceof UnpackError))
    return `is not a readable tar archive: ${withoutQuoted(errorMessage(err))}`;
  if (members === 0)
    return `is not a tar archive: its first 512 bytes are no valid tar header (${withoutQuoted(err.problem)})`;
  // Past the first header the file is a tar, and the member named is one of its own.
  const at = err.entry === undefined ? '' : ` member ${JSON.stringify(err.entry)}:`;
  return `is not a readable tar archive: after ${members} members,${at} ${withoutQuoted(err.problem)}`;
}

/** Text with every quoted part (a file's bytes, as a reader or JSON.parse quotes them) left out. */
function withoutQuoted(text: string): string {
  return text.replace(/"(?:[^"\\]|\\.)*"(?:\.\.\.)?|'(?:[^'\\]|\\.)*'/g, '(…)');
}

/** JSON.parse quotes the text it failed on; only where it failed is said. */
function notJson(err: unknown): string {
  const at = /position (\d+)/.exec(errorMessage(err))?.[1];
  return at === undefined ? 'is not JSON' : `is not JSON (at position ${at})`;
}

function checked(
  path: string,
  kind: CheckedArchive['kind'],
  found: Map<string, Buffer>,
  rootfsDiff: boolean,
): CheckedArchive {
  return {
    path,
    kind,
    config: checkpointConfig(path, jsonMember(path, found, ARCHIVE_FILES.config)),
    spec: checkpointSpec(path, jsonMember(path, found, ARCHIVE_FILES.spec)),
    deleted: deletedPaths(path, found.get(ARCHIVE_FILES.deleted)),
    hasRootfsDiff: rootfsDiff,
  };
}

function jsonMember(path: string, found: Map<string, Buffer>, name: string): unknown {
  const bytes = found.get(name);
  if (bytes === undefined) throw invalid(path, `has no ${name}`);
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    throw invalid(path, `${name} ${notJson(err)}`);
  }
}

function checkpointConfig(path: string, value: unknown): CheckpointConfig {
  if (!isObject(value)) throw invalid(path, `${ARCHIVE_FILES.config} is not a JSON object`);
  const text = (key: string): string => (typeof value[key] === 'string' ? value[key] : '');
  const config = {
    id: text('id'),
    name: text('name'),
    rootfsImage: text('rootfsImage'),
    rootfsImageRef: text('rootfsImageRef'),
  };
  if (config.rootfsImage === '' && config.rootfsImageRef === '') {
    throw invalid(path, `${ARCHIVE_FILES.config} names no image (rootfsImage, rootfsImageRef)`);
  }
  return config;
}

function checkpointSpec(path: string, value: unknown): Spec {
  if (!isSpecOutline(value)) {
    throw invalid(path, `${ARCHIVE_FILES.spec} is not an OCI spec (no ociVersion, process, root or linux)`);
  }
  // The user is compared with the request's (restored-spec.ts): it must be ids to compare.
  if (!isUserOutline(value.process?.user)) {
    throw invalid(path, `${ARCHIVE_FILES.spec}: process.user is not uid, gid and additionalGids of ids`);
  }
  return value;
}

function isUserOutline(user: unknown): boolean {
  if (user === undefined) return true;
  if (!isObject(user)) return false;
  const { uid, gid, additionalGids } = user;
  return (
    (uid === undefined || isId(uid)) &&
    (gid === undefined || isId(gid)) &&
    (additionalGids === undefined || (Array.isArray(additionalGids) && additionalGids.every(isId)))
  );
}

function isId(value: unknown): boolean {
  return Number.isSafeInteger(value) && (value as number) >= 0 && (value as number) <= 0xffffffff;
}

/** The parts a restore reads or keeps; runc checks the rest as it does any spec. */
function isSpecOutline(value: unknown): value is Spec {
  return (
    isObject(value) &&
    typeof value.ociVersion === 'string' &&
    isObject(value.process) &&
    isObject(value.linux) &&
    isObject(value.root)
  );
}

function deletedPaths(path: string, bytes: Buffer | undefined): string[][] {
  if (bytes === undefined) return [];
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    throw invalid(path, `${ARCHIVE_FILES.deleted} ${notJson(err)}`);
  }
  if (!isStringArray(value)) throw invalid(path, `${ARCHIVE_FILES.deleted} is not a JSON array of paths`);
  return value.map((deleted) => {
    try {
      const parts = entryComponents(deleted);
      if (parts.length === 0) throw new Error('names the root');
      return parts;
    } catch (err) {
      throw invalid(path, `${ARCHIVE_FILES.deleted}: ${JSON.stringify(deleted)}: ${errorMessage(err)}`);
    }
  });
}

/**
 * The archive's files as a checkpoint image holds them, unpacked in one of its layers' dirs: the
 * same checks as checkArchive, the layer unpacker having kept paths inside already. Links and
 * devices in checkpoint/ are refused as in a tar: criu would read whatever they lead to.
 */
export async function checkArchiveDir(path: string): Promise<CheckedArchive> {
  const found = new Map<string, Buffer>();
  for (const name of [ARCHIVE_FILES.config, ARCHIVE_FILES.spec, ARCHIVE_FILES.deleted]) {
    const st = await lstat(join(path, name)).catch(() => null);
    if (st === null) continue;
    if (!st.isFile()) throw invalid(path, `${name} is not a file`);
    if (st.size > MAX_JSON_BYTES) throw invalid(path, `${name} is larger than ${MAX_JSON_BYTES} bytes`);
    found.set(name, await readFile(join(path, name)));
  }
  const checkpoint = join(path, ARCHIVE_FILES.checkpoint);
  const st = await lstat(checkpoint).catch(() => null);
  if (!st?.isDirectory()) throw invalid(path, `has no ${ARCHIVE_FILES.checkpoint}/ directory`);
  for (const entry of await readdir(checkpoint, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() && !entry.isDirectory()) {
      throw invalid(path, `${join(entry.parentPath, entry.name)} is neither a file nor a dir`);
    }
  }
  const diffPath = join(path, ARCHIVE_FILES.rootfsDiff);
  const diff = await lstat(diffPath).catch(() => null);
  if (diff?.isFile()) await checkRootfsDiff(path, createReadStream(diffPath) as AsyncIterable<Buffer>);
  return checked(path, 'dir', found, diff?.isFile() ?? false);
}

/**
 * Unpacks a checked archive into `dir` (made here, private): a tar with the layer unpacker's
 * guards (it was checked, but it is read again and could have changed since), a dir copied.
 */
export async function unpackArchive(archive: CheckedArchive, dir: string, timeoutMs: number): Promise<void> {
  if (archive.kind === 'dir') {
    await cp(archive.path, dir, { recursive: true, errorOnExist: true, force: false });
    return;
  }
  await mkdir(dir, { mode: PRIVATE_DIR });
  await unpackLayer(createReadStream(archive.path), 'none', dir, { timeoutMs }).catch((err: unknown) => {
    throw archiveFault(err) ? invalid(archive.path, errorMessage(err)) : err;
  });
}

/**
 * What the unpacker says of the archive's bytes rather than of the node: a refused entry (a path
 * that leads out, through a link of the image's, a corrupt header) or a tar that ends early. A
 * file system failure (it carries its cause: ENOSPC, say) or the timeout stays what it is.
 */
function archiveFault(err: unknown): boolean {
  if (err instanceof RefusedEntryError) return true;
  return err instanceof UnpackError && err.cause === undefined && !/timed out/.test(err.message);
}

/**
 * Brings the rootfs (mounted, an overlay over the image's layers) to where the checkpointed
 * container's was: rootfs-diff.tar's files written through it, then deleted.files removed from it.
 * A path whose parent is not a real dir (a symlink, say) is refused: it could lead out of the rootfs.
 */
export async function applyRootfsChanges(
  archive: CheckedArchive,
  unpackedDir: string,
  rootfs: string,
  timeoutMs: number,
): Promise<void> {
  if (archive.hasRootfsDiff) {
    const diff = join(unpackedDir, ARCHIVE_FILES.rootfsDiff);
    await unpackLayer(createReadStream(diff), 'none', rootfs, { timeoutMs }).catch((err: unknown) => {
      throw archiveFault(err)
        ? invalid(archive.path, `member ${ARCHIVE_FILES.rootfsDiff}: ${errorMessage(err)}`)
        : err;
    });
  }
  for (const parts of archive.deleted) {
    for (let i = 1; i < parts.length; i++) {
      const parent = await lstat(join(rootfs, ...parts.slice(0, i))).catch(() => null);
      if (parent === null) break;
      if (!parent.isDirectory()) {
        throw invalid(archive.path, `${ARCHIVE_FILES.deleted}: /${parts.join('/')} is below a non-directory`);
      }
    }
    await rm(join(rootfs, ...parts), { recursive: true, force: true });
  }
}
