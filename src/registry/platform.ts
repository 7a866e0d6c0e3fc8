/** Choosing the manifest for this machine from an image index (or Docker manifest list). */
import type { Descriptor, ImageIndex, Platform } from './manifest.js';
import { PlatformNotFoundError } from './errors.js';

/** Node's process.arch names → OCI architecture (and variant) names. */
const NODE_ARCH: Readonly<Record<string, Platform>> = {
  x64: { os: 'linux', architecture: 'amd64' },
  arm64: { os: 'linux', architecture: 'arm64', variant: 'v8' },
  ia32: { os: 'linux', architecture: '386' },
  ppc64: { os: 'linux', architecture: 'ppc64le' },
  s390x: { os: 'linux', architecture: 's390x' },
  riscv64: { os: 'linux', architecture: 'riscv64' },
  loong64: { os: 'linux', architecture: 'loong64' },
  mips64el: { os: 'linux', architecture: 'mips64le' },
};

/** Other spellings found in the wild (uname, Debian) → OCI names, with the variant they imply. */
const ARCH_ALIASES: Readonly<Record<string, { architecture: string; variant?: string }>> = {
  x86_64: { architecture: 'amd64' },
  'x86-64': { architecture: 'amd64' },
  aarch64: { architecture: 'arm64' },
  armhf: { architecture: 'arm', variant: 'v7' },
  armel: { architecture: 'arm', variant: 'v6' },
  i386: { architecture: '386' },
  x86: { architecture: '386' },
};

/** The variant an architecture means when none is written. */
const DEFAULT_VARIANT: Readonly<Record<string, string>> = { arm64: 'v8', arm: 'v7', amd64: 'v1' };

/** The platform of this machine: linux plus process.arch in OCI terms (x64 → amd64, arm64 → arm64/v8). */
export function hostPlatform(arch: string = process.arch): Platform {
  const known = NODE_ARCH[arch];
  if (known) return { ...known };
  if (arch === 'arm') {
    // Node knows which ARM it was built for; v7 is what 32-bit ARM Linux distributions ship.
    const v = (process.config.variables as { arm_version?: string }).arm_version;
    return { os: 'linux', architecture: 'arm', variant: `v${v ?? '7'}` };
  }
  return { os: 'linux', architecture: arch };
}

/** Canonical names, with the default variant filled in, so equal platforms compare equal. */
export function normalizePlatform(p: Platform): Required<Platform> {
  const os = p.os.toLowerCase();
  const arch = p.architecture.toLowerCase();
  const alias = ARCH_ALIASES[arch];
  const architecture = alias?.architecture ?? arch;
  const variant = (p.variant ?? alias?.variant ?? DEFAULT_VARIANT[architecture] ?? '').toLowerCase();
  return { os, architecture, variant: architecture === 'arm64' && variant === '8' ? 'v8' : variant };
}

/** `linux/arm64/v8`, or `linux/amd64` when there is no variant. */
export function formatPlatform(p: Platform): string {
  return [p.os, p.architecture, p.variant].filter((x) => x !== undefined && x !== '').join('/');
}

/**
 * Variants that run on a machine of `variant`, best first: an ARMv7 runs v6 and v5 code, an
 * amd64 v3 runs v2 and v1 code.
 */
function compatibleVariants(architecture: string, variant: string): string[] {
  const n = /^v(\d+)$/.exec(variant)?.[1];
  if ((architecture !== 'arm' && architecture !== 'amd64') || n === undefined) return [variant];
  const lowest = architecture === 'arm' ? 5 : 1;
  const out: string[] = [];
  for (let i = Number(n); i >= lowest; i--) out.push(`v${i}`);
  return out;
}

/**
 * The index entry for `want` (default: this machine). An exact variant wins over a compatible
 * older one; among equals the first entry wins. Throws PlatformNotFoundError listing what the index has.
 */
export function selectPlatform(index: ImageIndex, want: Platform = hostPlatform()): Descriptor {
  const w = normalizePlatform(want);
  const candidates = index.manifests.filter((d) => d.platform !== undefined);
  for (const variant of compatibleVariants(w.architecture, w.variant)) {
    const found = candidates.find((d) => {
      const p = normalizePlatform(d.platform as Platform);
      return p.os === w.os && p.architecture === w.architecture && p.variant === variant;
    });
    if (found) return found;
  }
  const available = candidates
    // BuildKit's attestation manifests carry platform unknown/unknown; they are not images.
    .filter((d) => d.platform?.os !== 'unknown')
    .map((d) => formatPlatform(d.platform as Platform));
  throw new PlatformNotFoundError(formatPlatform(want), [...new Set(available)]);
}
