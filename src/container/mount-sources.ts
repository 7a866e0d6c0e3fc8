/**
 * The host side of a container's CRI mounts: real source paths (a missing one created), berth's
 * own files kept out, and the propagation of the host mount each source sits on, which the spec's
 * rules (src/oci/mounts.ts) then judge. Reads the host and makes missing source dirs; never
 * mounts, and never changes a host mount's propagation.
 */
import { mkdir, realpath } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { FailedPreconditionError, InvalidArgumentError } from '../errors.js';
import { mountContaining, propagationOf, readMountInfo } from '../mounts/mountinfo.js';
import {
  refuseOwnSource,
  requireSourcePropagation,
  type BindMount,
  type ResolvedMount,
} from '../oci/mounts.js';

export interface ResolveMountsOptions {
  mountInfoPath?: string;
  /** Directories (real paths) in which a missing source is never created: berth's own. */
  noCreateUnder?: readonly string[];
  /** Files (real paths) no container may mount: berth's database and socket. */
  forbiddenSources?: readonly string[];
}

/**
 * Each mount with its real source and that source's host propagation. A propagating mount whose
 * source's host mount cannot carry it is refused here, before anything is staged for it.
 */
export async function resolveMounts(
  mounts: readonly BindMount[],
  opts: ResolveMountsOptions = {},
): Promise<ResolvedMount[]> {
  const sources: string[] = [];
  for (const [i, m] of mounts.entries()) {
    const hostPath = await realHostPath(m.hostPath, i, opts.noCreateUnder ?? []);
    refuseOwnSource(`config.mounts[${i}].host_path`, m.hostPath, hostPath, opts.forbiddenSources ?? []);
    sources.push(hostPath);
  }
  // Only a propagating mount needs the table: a private one is private whatever its source.
  const table = mounts.some((m) => m.propagation !== 'PRIVATE')
    ? await readMountInfo(opts.mountInfoPath)
    : [];
  return mounts.map((m, i) => {
    const hostPath = sources[i] ?? m.hostPath;
    const host = m.propagation === 'PRIVATE' ? undefined : mountContaining(table, hostPath);
    const resolved: ResolvedMount = {
      ...m,
      hostPath,
      requestedHostPath: m.hostPath,
      sourcePropagation: host === undefined ? 'private' : propagationOf(host),
    };
    requireSourcePropagation(resolved, i);
    return resolved;
  });
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
