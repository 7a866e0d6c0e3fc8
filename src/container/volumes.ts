/**
 * Volumes kubelet sends with uidMappings and gidMappings (a pod of its own user namespace gets them
 * on every volume): runc 1.1 cannot make idmapped mounts, so berth binds each such volume idmapped
 * at a staging point in the container's dir (imagestore/rootfs.ts's v/) and runc binds that path as
 * it binds any volume, ro, rro and propagation as asked. A file owned by N on disk then shows as
 * the host id the mapping gives N, and what the container writes there as that id is stored as N.
 *
 * The user namespace that carries the mapping is the pod's when the mappings are its own (they
 * are, from kubelet), and otherwise one made for this create and dropped right after the binds:
 * an idmapped mount holds its own reference to the namespace.
 */
import { chmod, mkdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { FailedPreconditionError } from '../errors.js';
import { idmappedBind } from '../mounts/idmap.js';
import { mountContaining, readMountInfo } from '../mounts/mountinfo.js';
import { MountSyscallError } from '../mounts/syscalls.js';
import { createPinnedUserns, removeUserns } from '../netns/userns.js';
import type { ResolvedMount } from '../oci/mounts.js';
import type { IdMappings, PodUserNamespace } from '../oci/userns.js';

/**
 * runc's init in a user-namespaced container runs as an unprivileged host id, and must get through
 * to each staged volume: search, but no listing.
 */
const STAGING_DIR_MODE = 0o711;

/** Names of the transient user namespace pins in the staging dir; volumes are named by index. */
const TRANSIENT_PIN_PREFIX = 'userns-';

export interface VolumeStaging {
  /** The container's staging dir (imagestore/rootfs.ts volumesDir); made when a mount needs it. */
  dir: string;
  /** The pod's own user namespace, null for a pod in the host's. */
  podUserns: PodUserNamespace | null;
  timeoutMs: number;
}

/**
 * `mounts` as runc should bind them: each one whose `idmaps` entry (same index) is set is bound
 * idmapped, with all its submounts, at `<dir>/<index>` and named by that path; the others as they
 * were. On failure what was bound stays in the staging dir, for the rootfs undo to unmount; the
 * error names the mount and why.
 */
export async function stageIdmappedMounts(
  mounts: readonly ResolvedMount[],
  idmaps: readonly (IdMappings | null)[],
  staging: VolumeStaging,
): Promise<ResolvedMount[]> {
  if (!idmaps.some((idmap) => idmap !== null)) return [...mounts];
  await mkdir(staging.dir, { recursive: true });
  await chmod(staging.dir, STAGING_DIR_MODE);
  const transient = new Map<string, string>();
  const usernsFor = async (idmap: IdMappings): Promise<string> => {
    const { podUserns } = staging;
    const key = mappingKey(idmap);
    if (podUserns !== null && mappingKey(podUserns) === key) return podUserns.path;
    let pin = transient.get(key);
    if (pin === undefined) {
      pin = join(staging.dir, `${TRANSIENT_PIN_PREFIX}${transient.size}`);
      await createPinnedUserns({ path: pin, uids: idmap.uids, gids: idmap.gids }, staging.timeoutMs);
      transient.set(key, pin);
    }
    return pin;
  };
  try {
    const staged: ResolvedMount[] = [];
    for (const [i, m] of mounts.entries()) {
      const idmap = idmaps[i] ?? null;
      if (idmap === null) {
        staged.push(m);
        continue;
      }
      const target = join(staging.dir, String(i));
      await stagingPoint(m.hostPath, target);
      const userns = await usernsFor(idmap);
      try {
        // Recursive as runc's rbind is: a volume's submounts come along, every one idmapped.
        await idmappedBind({ source: m.hostPath, target, userns, recursive: true });
      } catch (err) {
        throw await idmapFailure(i, m, err);
      }
      staged.push({ ...m, hostPath: target });
    }
    return staged;
  } finally {
    // A pin that cannot go now is a mount in the staging dir, which the container's removal takes.
    for (const pin of transient.values()) await removeUserns(pin).catch(() => undefined);
  }
}

/** Mappings compare by value: the pod's, as its record has them, against a mount's. */
function mappingKey(idmap: IdMappings): string {
  const list = (mappings: IdMappings['uids']): string =>
    mappings.map((m) => `${m.containerId}:${m.hostId}:${m.length}`).join(',');
  return `${list(idmap.uids)}/${list(idmap.gids)}`;
}

/** A bind needs a target of the source's kind: a dir for a dir, a file for anything else. */
async function stagingPoint(source: string, target: string): Promise<void> {
  if ((await stat(source)).isDirectory()) await mkdir(target, { mode: 0o755 });
  else await writeFile(target, '', { flag: 'wx', mode: 0o644 });
}

/** A refusal that names the mount by both its paths, what the kernel said, and what that means. */
async function idmapFailure(i: number, m: ResolvedMount, err: unknown): Promise<Error> {
  const what = `config.mounts[${i}] (${m.requestedHostPath} at ${m.containerPath})`;
  if (!(err instanceof MountSyscallError)) return err instanceof Error ? err : new Error(String(err));
  let meaning = '';
  if (err.code === 'EINVAL') {
    const fsType = mountContaining(await readMountInfo(), m.hostPath)?.fsType ?? 'unknown';
    const tmpfs = fsType === 'tmpfs' ? ' (tmpfs does from Linux 6.3 on)' : '';
    const which = `its filesystem (${fsType}), or one mounted below it,`;
    meaning = `: ${which} does not support idmapped mounts${tmpfs}`;
  } else if (err.code === 'EPERM') {
    meaning = ': the kernel does not allow this mount to be idmapped';
  }
  return new FailedPreconditionError(`${what} cannot be mounted idmapped${meaning}; ${err.message}`);
}
