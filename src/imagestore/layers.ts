/**
 * Unpacked layers: `<root>/layers/<diffid hex>/fs`, one per uncompressed layer, shared by every
 * image and container that has it. fs/ only appears by renaming a complete temporary tree into
 * place, so a layer that has one is whole; a pull or removal killed half way leaves only
 * `<hex>.tmp-<random>` dirs (and at worst an fs-less `<hex>`), which cleanupTemporary() deletes
 * at start-up. The `<hex>` level leaves room for per-layer metadata next to the tree.
 *
 * Committing does not sync: the writer flushes once (StoreFlush) before the database marks the
 * layer unpacked, and start-up recovery deletes every layer not marked so. A power loss before
 * that flush can leave a committed tree with missing contents, but never one a row relies on.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';

import { digestHex, isDigestHex } from './digest.js';
import { isErrno } from './fsutil.js';
import { PRIVATE_DIR } from '../file-modes.js';

const TMP_MARK = '.tmp-';

export class LayerStore {
  readonly layersDir: string;

  constructor(readonly rootDir: string) {
    this.layersDir = join(resolve(rootDir), 'layers');
  }

  /** `<root>/layers/<hex>`: the committed layer (its tree is under fs/). */
  layerDir(diffId: string): string {
    return join(this.layersDir, digestHex(diffId));
  }

  /** `<root>/layers/<hex>/fs`: what overlayfs gets as a lowerdir. */
  fsDir(diffId: string): string {
    return join(this.layerDir(diffId), 'fs');
  }

  /** Whether the layer is committed (its dir can only exist whole). */
  async has(diffId: string): Promise<boolean> {
    try {
      return (await stat(this.fsDir(diffId))).isDirectory();
    } catch (err) {
      if (isErrno(err, 'ENOENT', 'ENOTDIR')) return false;
      throw err;
    }
  }

  /**
   * Creates an empty `<root>/layers/<hex>.tmp-<random>` and returns it: unpack the layer's tree
   * straight into it, then commitLayer(). Each caller gets its own dir, so two pulls of the same
   * layer never write into one tree.
   */
  async tmpLayerDir(diffId: string): Promise<string> {
    const dir = join(this.layersDir, `${digestHex(diffId)}${TMP_MARK}${randomBytes(6).toString('hex')}`);
    // Root's alone: layers hold images' setuid files, file capabilities and device nodes, which
    // anyone who could reach them would use on the host (CVE-2021-41103's class).
    await mkdir(this.layersDir, { recursive: true, mode: PRIVATE_DIR });
    // The tree's root; an unpacker applies the tar's own "./" entry over this, if it has one.
    await mkdir(dir, { mode: 0o755 });
    return dir;
  }

  /**
   * Moves a fully unpacked temporary dir into place as the layer's fs/. Returns false, after
   * deleting `tmpDir`, when another unpack of the same layer got there first: both trees are the
   * same diff, so either will do.
   */
  async commitLayer(tmpDir: string, diffId: string): Promise<boolean> {
    const final = this.layerDir(diffId);
    const tmp = resolve(tmpDir);
    // Only a dir from tmpLayerDir: anything else may be on another filesystem (rename fails) or
    // escape cleanupTemporary() if we crash.
    if (dirname(tmp) !== this.layersDir || !basename(tmp).startsWith(basename(final) + TMP_MARK)) {
      throw new Error(`commitLayer: ${tmpDir} is not a temporary dir of layer ${diffId}`);
    }
    await mkdir(final, { recursive: true, mode: PRIVATE_DIR });
    try {
      await rename(tmp, join(final, 'fs'));
    } catch (err) {
      // rename(2) onto a non-empty dir: another unpack committed the same layer.
      if (!isErrno(err, 'ENOTEMPTY', 'EEXIST')) throw err;
      await rm(tmp, { recursive: true, force: true });
      return false;
    }
    return true;
  }

  /**
   * Deletes a committed layer; no-op when absent. The dir is first renamed to a temporary name,
   * so a crash mid-delete leaves garbage for cleanupTemporary() rather than a half-empty layer
   * under its real name. The caller makes sure no mounted rootfs still uses it.
   */
  async removeLayer(diffId: string): Promise<void> {
    const final = this.layerDir(diffId);
    const doomed = `${final}${TMP_MARK}rm-${randomBytes(6).toString('hex')}`;
    try {
      await rename(final, doomed);
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return;
      throw err;
    }
    await rm(doomed, { recursive: true, force: true });
  }

  /** Diff ids of the committed layers, for reconciling with the database at start-up. */
  async list(): Promise<string[]> {
    const committed: string[] = [];
    for (const name of await this.names()) {
      if (isDigestHex(name) && (await this.has(`sha256:${name}`))) committed.push(`sha256:${name}`);
    }
    return committed;
  }

  /**
   * Deletes every temporary layer dir, and layer dirs a crashed commit left without fs/; returns
   * their paths. Only safe while nothing unpacks (at start-up).
   */
  async cleanupTemporary(): Promise<string[]> {
    const doomed: string[] = [];
    for (const name of await this.names()) {
      const incomplete = isDigestHex(name) && !(await this.has(`sha256:${name}`));
      if (name.includes(TMP_MARK) || incomplete) doomed.push(join(this.layersDir, name));
    }
    for (const path of doomed) await rm(path, { recursive: true, force: true });
    return doomed;
  }

  private async names(): Promise<string[]> {
    try {
      return await readdir(this.layersDir);
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return [];
      throw err;
    }
  }
}
