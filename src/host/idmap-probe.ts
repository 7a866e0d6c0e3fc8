/**
 * Whether this kernel can idmap what a user-namespaced pod needs idmapped: a directory of the image
 * store's filesystem used as an overlay lower layer (Linux 5.19 on), and a tmpfs (6.3 on, for
 * emptyDir of medium Memory and the pod's shm). Asked of the kernel by doing it once in a scratch
 * dir, since distributions backport and filesystems differ: no version is trusted.
 */
import { chown, mkdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { errorMessage } from '../errors.js';
import { idmappedBind } from '../mounts/idmap.js';
import { withScratchDir } from '../mounts/scratch.js';
import { mountSyscall } from '../mounts/syscalls.js';
import { createPinnedUserns } from '../netns/userns.js';
import type { IdMapping } from '../oci/userns.js';
import { PRIVATE_DIR } from '../file-modes.js';

export interface IdmapSupport {
  /** An idmapped directory of the image store's filesystem works as an overlay lower layer. */
  overlayLower: boolean;
  /** A tmpfs can be idmapped. */
  tmpfs: boolean;
  /** Why not, for the log and verbose Status; null when both work. */
  reason: string | null;
}

/** Where the probe's namespace maps root: any id does, nothing runs as it. */
const PROBE_ROOT = 65536;
const PROBE_MAPPING: IdMapping[] = [{ containerId: 0, hostId: PROBE_ROOT, length: 65536 }];

/**
 * Makes a user namespace, an idmapped overlay and an idmapped tmpfs in a fresh dir below
 * `scratchParent` (on the image store's filesystem), checks each shows root's files as the mapped
 * root, and removes everything again. What fails is reported false, with why.
 */
export function probeIdmapSupport(scratchParent: string, timeoutMs: number): Promise<IdmapSupport> {
  return withScratchDir(
    { parent: scratchParent, prefix: 'idmap-', mode: PRIVATE_DIR, mounts: SCRATCH_MOUNTS },
    (dir) => probeIn(dir, timeoutMs),
  );
}

/** What the probe mounts in its scratch dir, those mounted on others' paths first. */
const SCRATCH_MOUNTS = ['merged', 'lower-mapped', 'tmpfs-mapped', 'tmpfs', 'userns'];

async function probeIn(dir: string, timeoutMs: number): Promise<IdmapSupport> {
  const pin = join(dir, 'userns');
  const reasons: string[] = [];
  const attempt = async (what: string, act: () => Promise<void>): Promise<boolean> => {
    try {
      await act();
      return true;
    } catch (err) {
      reasons.push(`${what}: ${errorMessage(err)}`);
      return false;
    }
  };
  const idmap = async (source: string, target: string): Promise<void> => {
    await mkdir(target);
    await idmappedBind({ source, target, userns: pin, recursive: false });
  };
  if (!(await attempt('user namespace', () => createPinnedUserns(pinRequest(pin), timeoutMs)))) {
    return { overlayLower: false, tmpfs: false, reason: reasons.join('; ') };
  }
  const overlayLower = await attempt('idmapped overlay lower layer', async () => {
    const [lower, mapped, upper, work, merged] = ['lower', 'lower-mapped', 'upper', 'work', 'merged'].map(
      (name) => join(dir, name),
    ) as [string, string, string, string, string];
    for (const d of [lower, upper, work, merged]) await mkdir(d);
    await writeFile(join(lower, 'file'), '');
    await chown(join(lower, 'file'), 0, 0);
    await idmap(lower, mapped);
    const data = `lowerdir=${mapped},upperdir=${upper},workdir=${work}`;
    await mountSyscall({ source: 'overlay', target: merged, fstype: 'overlay', flags: 0, data });
    await expectMappedRoot(join(merged, 'file'));
  });
  const tmpfs = await attempt('idmapped tmpfs', async () => {
    const source = join(dir, 'tmpfs');
    await mkdir(source);
    await mountSyscall({
      source: 'berth-probe',
      target: source,
      fstype: 'tmpfs',
      flags: 0,
      data: 'size=64k',
    });
    await idmap(source, join(dir, 'tmpfs-mapped'));
    await expectMappedRoot(join(dir, 'tmpfs-mapped'));
  });
  return { overlayLower, tmpfs, reason: reasons.length > 0 ? reasons.join('; ') : null };
}

function pinRequest(path: string): Parameters<typeof createPinnedUserns>[0] {
  return { path, uids: PROBE_MAPPING, gids: PROBE_MAPPING };
}

/** A kernel that accepts the mount but ignores the mapping would show root's 0. */
async function expectMappedRoot(path: string): Promise<void> {
  const { uid, gid } = await stat(path);
  if (uid !== PROBE_ROOT || gid !== PROBE_ROOT) {
    throw new Error(`${path} shows owner ${uid}:${gid} through the idmapped mount, not ${PROBE_ROOT}`);
  }
}
