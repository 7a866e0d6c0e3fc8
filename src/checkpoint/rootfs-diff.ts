/**
 * What a container changed in its image's files, read from its overlay's upper dir: the files it
 * added or changed (for rootfs-diff.tar) and the image files it deleted (deleted.files). overlayfs
 * marks a deletion with a 0/0 character device, and a dir made anew over one of the image's with
 * the opaque xattr, which hides everything the image had there; neither marker is a file of the
 * container's, so neither goes into the tar.
 */
import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../exec.js';
import { isErrno } from '../imagestore/fsutil.js';
import { OVERLAY_OPAQUE_XATTR } from '../unpack/whiteout.js';

export interface RootfsDiff {
  /** Relative to the upper dir, parents before their children. */
  changed: string[];
  /** Absolute paths in the container ("/etc/victim"), sorted. */
  deleted: string[];
}

export async function readRootfsDiff(
  layers: { upper: string; lowers: readonly string[] },
  timeoutMs: number,
): Promise<RootfsDiff> {
  const opaque = await opaqueDirs(layers.upper, timeoutMs);
  const changed: string[] = [];
  const deleted = new Set<string>();
  const walk = async (rel: string): Promise<void> => {
    const names = await readdir(join(layers.upper, rel));
    for (const name of names.sort()) {
      const path = rel === '' ? name : `${rel}/${name}`;
      const st = await lstat(join(layers.upper, path));
      if (st.isCharacterDevice() && st.rdev === 0) {
        deleted.add(`/${path}`);
        continue;
      }
      changed.push(path);
      if (!st.isDirectory()) continue;
      if (opaque.has(path)) {
        const kept = new Set(await readdir(join(layers.upper, path)));
        for (const hidden of await lowerNames(layers.lowers, path)) {
          if (!kept.has(hidden)) deleted.add(`/${path}/${hidden}`);
        }
      }
      await walk(path);
    }
  };
  await walk('');
  return { changed, deleted: [...deleted].sort() };
}

/** What the image layers have in dir `rel`; a layer without the dir has nothing there. */
async function lowerNames(lowers: readonly string[], rel: string): Promise<Set<string>> {
  const names = new Set<string>();
  for (const lower of lowers) {
    try {
      for (const name of await readdir(join(lower, rel))) names.add(name);
    } catch (err) {
      if (!isErrno(err, 'ENOENT', 'ENOTDIR')) throw err;
    }
  }
  return names;
}

/**
 * The upper dir's opaque dirs, relative to it. Node reads no xattrs: getfattr walks the tree once
 * and prints only the dirs that have the attribute.
 */
async function opaqueDirs(upper: string, timeoutMs: number): Promise<Set<string>> {
  const pattern = `^${OVERLAY_OPAQUE_XATTR.replaceAll('.', '\\.')}$`;
  const { stdout } = await run(
    'getfattr',
    ['--recursive', '--physical', '--no-dereference', '--absolute-names', '-d', '-m', pattern, upper],
    { timeoutMs },
  );
  const found = new Set<string>();
  let file: string | null = null;
  for (const line of stdout.split('\n')) {
    if (line.startsWith('# file: ')) file = unescapeOctal(line.slice('# file: '.length));
    else if (file !== null && line === `${OVERLAY_OPAQUE_XATTR}="y"` && file.startsWith(`${upper}/`)) {
      found.add(file.slice(upper.length + 1));
    }
  }
  return found;
}

/** getfattr writes bytes outside printable ASCII, and backslashes, as \ooo. */
function unescapeOctal(text: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const octal = /^\\([0-7]{3})/.exec(text.slice(i, i + 4));
    if (octal?.[1] !== undefined) {
      bytes.push(parseInt(octal[1], 8));
      i += 3;
    } else bytes.push(...Buffer.from(text[i] ?? '', 'utf8'));
  }
  return Buffer.from(bytes).toString('utf8');
}
