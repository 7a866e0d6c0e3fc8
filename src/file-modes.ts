/**
 * The modes of what berthd keeps on the host, set explicitly wherever it creates something, so
 * that none depends on the umask it was started with.
 */
import { chmodSync } from 'node:fs';
import { chmod, chown, mkdir } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';

/**
 * berthd's own umask, set at start-up. runc, conmon, CNI plugins and the containers' processes
 * inherit it (runc passes it on when the spec sets none), so it is the usual 022 that images
 * expect: a stricter one would make files containers create unreadable to their other users.
 */
export const DAEMON_UMASK = 0o022;

/**
 * Dirs no other user may enter: the root dir (but see PASSABLE_DIR) and everything holding image
 * content (setuid files, file capabilities, device nodes), container rootfs, pods' files and
 * secrets.
 */
export const PRIVATE_DIR = 0o700;

/** Files that may hold secrets (the database, OCI specs with the containers' env, logs). */
export const PRIVATE_FILE = 0o600;

/**
 * Dirs others may pass through but not list: the state dir, which the CRI socket may be in; and
 * the root dir, containers/ and sandboxes/ once a pod of its own user namespace has a container
 * (see passableToPod): none of their other entries lets anyone but root in.
 */
export const PASSABLE_DIR = 0o711;

/**
 * A user-namespaced pod's sandbox dir and its containers' dirs: root's, passable by the pod root's
 * group alone. runc sets a container up as the pod's root, an unprivileged host id, which must get
 * through to the rootfs and the pod's bind-mounted files; no other host user does, and nobody but
 * root lists them. Their entries keep their own modes (bundle/ and ns/ stay root's).
 */
const POD_PASSABLE_DIR = 0o710;

/**
 * Makes `path` (root's) passable by the host gid of a user-namespaced pod's root, and the dirs on
 * the way to it (`through`: the root dir, containers/ or sandboxes/) passable by all.
 */
export async function passableToPod(
  path: string,
  rootGid: number,
  through: readonly string[],
): Promise<void> {
  await Promise.all(through.map((dir) => chmod(dir, PASSABLE_DIR)));
  await chown(path, 0, rootGid);
  await chmod(path, POD_PASSABLE_DIR);
}

/**
 * mkdir -p, then `mode` on the dir itself also when it was there already: made by an older berth
 * with a looser mode, or under another umask.
 */
export async function ensureDir(path: string, mode: number): Promise<void> {
  await mkdir(path, { recursive: true, mode });
  await chmod(path, mode);
}

/**
 * mkdir -p of `path` at `mode`, where the parents it makes are left passable (PASSABLE_DIR), not
 * `mode`, as mkdir would make them: they are berth's, hold nothing but the way down, and a
 * user-namespaced pod's root must get through them (host/passable.ts).
 */
export async function makeDirWithParents(path: string, mode: number): Promise<void> {
  const target = resolve(path);
  const first = await mkdir(target, { recursive: true, mode });
  if (first === undefined) return;
  const made = resolve(first);
  for (let dir = dirname(target); dir.length >= made.length && dir !== dirname(dir); dir = dirname(dir)) {
    await chmod(dir, PASSABLE_DIR);
  }
}

/** `mode` on each of `paths` that exists. Synchronous: for start-up, before anything is served. */
export function chmodExisting(paths: readonly string[], mode: number): void {
  for (const path of paths) {
    try {
      chmodSync(path, mode);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}
