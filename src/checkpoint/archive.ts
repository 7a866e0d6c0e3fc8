/** Writing a checkpoint archive (its layout: model/checkpoint-archive.ts). */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../exec.js';
import { PRIVATE_FILE } from '../file-modes.js';
import { ARCHIVE_FILES } from '../model/checkpoint-archive.js';

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
    images: join(contents, ARCHIVE_FILES.checkpoint),
    work: join(dir, STAGING.work),
    diffList: join(dir, STAGING.diffList),
  };
}
