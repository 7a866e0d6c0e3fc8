/**
 * The checkpoint archive's layout, the one CRI-O writes and checkpointctl reads, so that other
 * tools can open berth's archives and berth theirs. An uncompressed tar with, at its root:
 *
 *   config.dump      the container's identity and image (ConfigDump)
 *   spec.dump        its OCI config.json, as runc ran it
 *   checkpoint/      criu's images
 *   rootfs-diff.tar  the files its writable layer added or changed
 *   deleted.files    the image files it deleted, as a JSON array
 *   dump.log         criu's log of the dump
 *   container.log    its CRI log, when it has one
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../exec.js';
import { PRIVATE_FILE } from '../file-modes.js';

export const CONFIG_DUMP = 'config.dump';
export const SPEC_DUMP = 'spec.dump';
export const CHECKPOINT_DIR = 'checkpoint';
export const ROOTFS_DIFF_TAR = 'rootfs-diff.tar';
export const DELETED_FILES = 'deleted.files';
/** criu's log, under the name runc gives it in the work dir. */
export { DUMP_LOG } from '../runtime/index.js';
export const CONTAINER_LOG = 'container.log';

/** checkpointctl's ContainerConfig, with its key names. */
export interface ConfigDump {
  id: string;
  name: string;
  /** The image as the container's request named it. */
  rootfsImage: string;
  /** The image id, "sha256:…". */
  rootfsImageRef: string;
  /** The image's name (a repo tag or digest), or what the request named when the image has none. */
  rootfsImageName: string;
  /** The runtime handler's name. */
  runtime: string;
  /** RFC 3339. */
  createdTime: string;
  checkpointedTime: string;
}

export async function writeJson(path: string, value: unknown): Promise<void> {
  await writeFile(path, JSON.stringify(value, null, 2), { mode: PRIVATE_FILE });
}

/**
 * rootfs-diff.tar of `upper`'s entries `changed` (relative, parents first), owners and modes as
 * they are: tar runs as root, and its --no-recursion takes exactly the listed entries, so that the
 * whiteouts left out stay out. The list goes through a file, NUL-separated: names may hold
 * newlines, and a command line has a length limit.
 */
export async function writeRootfsDiffTar(
  upper: string,
  changed: readonly string[],
  tarPath: string,
  listPath: string,
  timeoutMs: number,
): Promise<void> {
  await writeFile(listPath, changed.map((path) => `${path}\0`).join(''), { mode: PRIVATE_FILE });
  await run(
    'tar',
    ['--create', '--file', tarPath, '--numeric-owner', '--no-recursion', '--directory', upper].concat([
      '--null',
      '--verbatim-files-from',
      '--files-from',
      listPath,
    ]),
    { timeoutMs },
  );
}

/** The archive itself, of `names` in `dir` (dirs with all they hold). */
export async function writeArchive(
  dir: string,
  names: readonly string[],
  tarPath: string,
  timeoutMs: number,
): Promise<void> {
  await run('tar', ['--create', '--file', tarPath, '--numeric-owner', '--directory', dir, '--', ...names], {
    timeoutMs,
  });
}

/** What the staging dir of one checkpoint holds besides the archive's contents. */
export const STAGING = {
  /** The archive's contents, as they go into it. */
  contents: 'archive',
  /** criu's work dir. */
  work: 'work',
  /** rootfs-diff.tar's list of entries. */
  diffList: 'diff.list',
} as const;

export function stagingPaths(dir: string) {
  const contents = join(dir, STAGING.contents);
  return {
    contents,
    images: join(contents, CHECKPOINT_DIR),
    work: join(dir, STAGING.work),
    diffList: join(dir, STAGING.diffList),
  };
}
