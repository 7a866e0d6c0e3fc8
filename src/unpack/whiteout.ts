/**
 * OCI layer whiteouts, and their overlayfs form. OCI marks a deleted `name` with a file
 * `.wh.<name>`, and "hide everything below from lower layers" with `.wh..wh..opq` in the dir;
 * overlayfs wants a 0/0 character device named `name`, and the xattr trusted.overlay.opaque=y on
 * the dir.
 */

const PREFIX = '.wh.';
const OPAQUE = '.wh..wh..opq';

export const OVERLAY_OPAQUE_XATTR = 'trusted.overlay.opaque';
/** Whiteouts and opaque markers are overlayfs's own business: a layer must not set these directly. */
export const OVERLAY_XATTR_PREFIX = 'trusted.overlay.';

export type Whiteout =
  /** An ordinary name. */
  | { kind: 'none' }
  /** `.wh.<name>`: `name` is deleted. */
  | { kind: 'file'; name: string }
  /** The dir holding this is opaque. */
  | { kind: 'opaque' }
  /** Other `.wh..wh.*` names: AUFS bookkeeping (e.g. `.wh..wh.plnk`), meaningless here. */
  | { kind: 'meta' };

export function classifyWhiteout(baseName: string): Whiteout {
  if (!baseName.startsWith(PREFIX)) return { kind: 'none' };
  if (baseName === OPAQUE) return { kind: 'opaque' };
  if (baseName.startsWith(`${PREFIX}${PREFIX}`)) return { kind: 'meta' };
  return { kind: 'file', name: baseName.slice(PREFIX.length) };
}
