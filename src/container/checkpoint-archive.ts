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
import { UnpackError } from '../unpack/errors.js';
import { entryComponents } from '../unpack/safety.js';
import { TarReader } from '../unpack/tar-reader.js';
import { unpackLayer } from '../unpack/index.js';
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
      if (top === ARCHIVE_FILES.rootfsDiff) rootfsDiff = entry.type === 'file';
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
  return `is not a readable tar archive: after ${members} members, ${withoutQuoted(err.problem)}`;
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
  checkRlimits(path, value.process?.rlimits);
  return value;
}

/** The resource limits runc knows (its strToRlimit); any other name fails runc's restore. */
const RLIMITS = new Set(
  ['AS', 'CORE', 'CPU', 'DATA', 'FSIZE', 'LOCKS', 'MEMLOCK', 'MSGQUEUE', 'NICE', 'NOFILE', 'NPROC', 'RSS']
    .concat(['RTPRIO', 'RTTIME', 'SIGPENDING', 'STACK'])
    .map((name) => `RLIMIT_${name}`),
);

/**
 * The restored process keeps the checkpointed one's rlimits, written back into config.json. A
 * value JSON numbers cannot hold exactly (past 2^53-1) would be written back rounded, as runc
 * cannot read it (2^64-1, runc's "unlimited", comes back as 18446744073709552000, past uint64):
 * such a value, like a limit runc does not know or one that is no whole number, is refused here
 * naming the member's field, rather than failing in runc.
 */
function checkRlimits(path: string, rlimits: unknown): void {
  if (rlimits === undefined) return;
  const field = `${ARCHIVE_FILES.spec} process.rlimits`;
  if (!Array.isArray(rlimits)) throw invalid(path, `${field} is not an array`);
  for (const [i, r] of (rlimits as unknown[]).entries()) {
    if (!isObject(r)) throw invalid(path, `${field}[${i}] is not an object`);
    if (typeof r.type !== 'string' || !RLIMITS.has(r.type)) {
      throw invalid(path, `${field}[${i}].type is not a resource limit runc knows`);
    }
    for (const key of ['soft', 'hard'] as const) {
      const v = r[key];
      if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
        throw invalid(path, `${field}[${i}].${key} is not a whole number of 0 or more`);
      }
      if (!Number.isSafeInteger(v)) {
        throw invalid(
          path,
          `${field}[${i}].${key} (${r.type}) is beyond 2^53-1, which berth cannot write back exactly (2^64-1, unlimited, included)`,
        );
      }
    }
  }
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
  const diff = await lstat(join(path, ARCHIVE_FILES.rootfsDiff)).catch(() => null);
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
  await unpackLayer(createReadStream(archive.path), 'none', dir, { timeoutMs });
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
    await unpackLayer(createReadStream(diff), 'none', rootfs, { timeoutMs });
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
