/**
 * The host side of a container's CRI mounts: real source paths, and host mounts whose propagation
 * lets the asked-for HOST_TO_CONTAINER or BIDIRECTIONAL propagation work at all. A container's
 * mount namespace is a copy of the host's; only a mount that is shared on the host when that copy
 * is made has a peer in the container to receive (or send) mounts.
 */
import { mkdir, realpath } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { FailedPreconditionError, InvalidArgumentError } from '../errors.js';
import { mountContaining, readMountInfo, type MountInfoEntry } from '../mounts/mountinfo.js';
import { changePropagation, MountFlags } from '../mounts/syscalls.js';

/** CRI MountPropagation: PRIVATE, HOST_TO_CONTAINER (rslave), BIDIRECTIONAL (rshared). */
export type MountPropagation = 'PRIVATE' | 'HOST_TO_CONTAINER' | 'BIDIRECTIONAL';

/** A CRI mount, as far as the runtime spec reads it. */
export interface BindMount {
  /** Absolute, inside the container. */
  containerPath: string;
  /** Absolute, on the host. A symlink is resolved when the spec is built. */
  hostPath: string;
  readonly: boolean;
  /** Read-only all the way down (submounts too); needs readonly and PRIVATE propagation. */
  recursiveReadOnly: boolean;
  propagation: MountPropagation;
}

/**
 * The CRI's rule for recursive_read_only, which the edge and the spec both apply: it needs readonly
 * set too, and private propagation (runc applies rro with mount_setattr, which a shared mount would
 * spread, and a submount propagated in later could not be made read-only). Null when it may be.
 */
export function recursiveReadOnlyProblem(
  m: Pick<BindMount, 'readonly' | 'recursiveReadOnly' | 'propagation'>,
): string | null {
  if (!m.recursiveReadOnly) return null;
  if (!m.readonly) return 'requires readonly to be set';
  return m.propagation === 'PRIVATE' ? null : 'requires PROPAGATION_PRIVATE';
}

export interface ResolvedMount extends BindMount {
  /** The real path (symlinks resolved) that is bind mounted. */
  hostPath: string;
  /** The host path as the request gave it, which ContainerStatus reports. */
  requestedHostPath: string;
}

export interface ResolvedMounts {
  mounts: ResolvedMount[];
  /** Host mount points this call made shared, for the caller to log. */
  madeShared: string[];
  /** The same as log lines. */
  notes: string[];
}

export interface ResolveMountsOptions {
  mountInfoPath?: string;
  /** Directories (real paths) in which a missing source is never created: berth's own. */
  noCreateUnder?: readonly string[];
  /** Files (real paths) no container may mount: berth's database and socket. */
  forbiddenSources?: readonly string[];
}

export async function resolveMounts(
  mounts: readonly BindMount[],
  opts: ResolveMountsOptions = {},
): Promise<ResolvedMounts> {
  const resolved: ResolvedMount[] = [];
  for (const [i, m] of mounts.entries()) {
    const hostPath = await realHostPath(m.hostPath, i, opts.noCreateUnder ?? []);
    refuseOwnSource(`config.mounts[${i}].host_path`, m.hostPath, hostPath, opts.forbiddenSources ?? []);
    resolved.push({ ...m, hostPath, requestedHostPath: m.hostPath });
  }
  const madeShared: string[] = [];
  const propagating = resolved.filter((m) => m.propagation !== 'PRIVATE');
  if (propagating.length > 0) {
    let table = await readMountInfo(opts.mountInfoPath);
    for (const m of propagating) {
      const host = mountContaining(table, m.hostPath);
      if (!host || propagationSatisfied(host, m.propagation)) continue;
      await changePropagation(host.mountPoint, MountFlags.SHARED);
      madeShared.push(host.mountPoint);
      table = await readMountInfo(opts.mountInfoPath);
    }
  }
  const notes = madeShared.map(
    (mp) => `made host mount ${mp} shared, as mount propagation into or out of a container needs`,
  );
  return { mounts: resolved, madeShared, notes };
}

/**
 * Throws when `real` (the real path of the mount source `requested`, given by `field`) is one of
 * berth's own files (`forbidden`): a CRI mount's and a CDI spec's alike.
 */
export function refuseOwnSource(
  field: string,
  requested: string,
  real: string,
  forbidden: readonly string[],
): void {
  if (forbidden.includes(real)) {
    throw new FailedPreconditionError(
      `${field}: ${requested} is the container runtime's own ${real}; it is never mounted into a container`,
    );
  }
}

/**
 * The source as a real path. A missing one is created as a directory, as containerd and kubelet's
 * hostPath DirectoryOrCreate expect of the runtime.
 */
async function realHostPath(hostPath: string, i: number, noCreateUnder: readonly string[]): Promise<string> {
  const field = `config.mounts[${i}].host_path`;
  try {
    return await realpath(hostPath);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw pathError(field, hostPath, err);
  }
  // Where the nearest existing ancestor really is decides, so a symlink cannot smuggle it in.
  const real = await realAncestor(hostPath);
  const owner = noCreateUnder.find((dir) => real === dir || real.startsWith(`${dir}/`));
  if (owner !== undefined) {
    throw new FailedPreconditionError(
      `${field}: ${hostPath} does not exist and would be created inside the container runtime's own ${owner}`,
    );
  }
  try {
    await mkdir(hostPath, { recursive: true, mode: 0o755 });
    return await realpath(hostPath);
  } catch (err) {
    // A dangling symlink lands here (mkdir finds the link): its target is not ours to invent.
    throw pathError(field, hostPath, err);
  }
}

/** The real path `path` would have: its nearest existing ancestor resolved, the rest appended. */
async function realAncestor(path: string): Promise<string> {
  const rest: string[] = [];
  for (let dir = path; ; dir = dirname(dir)) {
    const real = await realpath(dir).catch(() => null);
    if (real !== null) return join(real, ...rest.reverse());
    if (dir === dirname(dir)) return path;
    rest.push(basename(dir));
  }
}

function pathError(field: string, hostPath: string, err: unknown): InvalidArgumentError {
  const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
  return new InvalidArgumentError(field, `${hostPath}: ${code}`);
}

/** BIDIRECTIONAL needs a shared host mount; HOST_TO_CONTAINER a shared or slave one. */
export function propagationSatisfied(entry: MountInfoEntry, propagation: MountPropagation): boolean {
  const shared = entry.optionalFields.some((f) => f.startsWith('shared:'));
  if (propagation === 'BIDIRECTIONAL') return shared;
  if (propagation === 'HOST_TO_CONTAINER')
    return shared || entry.optionalFields.some((f) => f.startsWith('master:'));
  return true;
}
