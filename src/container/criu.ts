/**
 * Whether this node can drive criu for a runtime handler, and in criu's own words why not: the
 * node's state, not the request's, so the callers (CheckpointContainer, and CreateContainer of a
 * checkpoint) refuse with FAILED_PRECONDITION before they make anything.
 */
import type { CriuHost } from '../host/features.js';
import type { RuntimeHandler } from '../runtime/index.js';

/** Null when `runtime` can checkpoint and restore here. */
export function criuUnavailable(
  criu: CriuHost | null,
  runtime: Pick<RuntimeHandler, 'name' | 'features'>,
  verb: 'checkpoint' | 'restore',
): string | null {
  if (runtime.features.checkpointRestore) return null;
  if (criu === null) return 'criu is not installed (or does not answer `criu --version`)';
  if (!criu.usable)
    return `criu ${criu.version} cannot ${verb} on this host: ${criu.reason ?? 'criu check failed'}`;
  return `runtime handler "${runtime.name}" has no checkpoint command`;
}
