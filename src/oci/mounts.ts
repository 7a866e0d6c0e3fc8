/**
 * A container's CRI mounts as the spec reads them, and the rules they must keep. What the host
 * holds (real source paths, the propagation of the host mount a source sits on) is looked up by
 * the caller (src/container/mount-sources.ts) and comes in as input: nothing here touches the host.
 */
import { FailedPreconditionError } from '../errors.js';

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
  /**
   * Set for an image volume (KEP-4639): the image's files, which are bound nosuid and nodev, so
   * that a setuid binary or a device node an image holds grants a container nothing.
   */
  image?: { reference: string } | null;
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

/**
 * The propagation of the host mount a source sits on, as /proc/self/mountinfo shows it: shared (a
 * peer group), slave (receives from a master), or private (neither; unbindable counts as private).
 */
export type SourcePropagation = 'shared' | 'slave' | 'private';

/** A CRI mount with what the host said of its source. */
export interface SourcedMount extends BindMount {
  /** The propagation of the host mount `hostPath` sits on. */
  sourcePropagation: SourcePropagation;
}

export interface ResolvedMount extends SourcedMount {
  /** The real path (symlinks resolved) that is bind mounted. */
  hostPath: string;
  /** The host path as the request gave it, which ContainerStatus reports. */
  requestedHostPath: string;
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
 * A container's mount namespace is a copy of the host's: only a source on a shared host mount has
 * a peer in the container to send mounts to the host (BIDIRECTIONAL), and only one on a shared or
 * slave mount receives the host's later mounts (HOST_TO_CONTAINER). berth never changes the host's
 * propagation to make a request work (one request could make the node's / shared): as containerd
 * and CRI-O do, it refuses. FailedPreconditionError naming the mount and both propagations.
 */
export function requireSourcePropagation(m: SourcedMount, i: number): void {
  const ok =
    m.propagation === 'PRIVATE' ||
    m.sourcePropagation === 'shared' ||
    (m.propagation === 'HOST_TO_CONTAINER' && m.sourcePropagation === 'slave');
  if (ok) return;
  const needs = m.propagation === 'BIDIRECTIONAL' ? 'a shared' : 'a shared or slave';
  throw new FailedPreconditionError(
    `config.mounts[${i}]: propagation ${m.propagation} of ${m.containerPath} (host path ${m.hostPath}) needs ${needs} host mount, and the mount it is on is ${m.sourcePropagation}`,
  );
}
