import type { WeightConversion } from '../cgroups/index.js';

/** The first runc release with the log-quadratic formula (cgroups/cpu-weight.ts). */
const RUNC_LOG_QUADRATIC: readonly number[] = [1, 3, 2];

/**
 * The formula a handler's runtime turns cpu shares into a v2 weight with, from the version its
 * `features` name (runc's org.opencontainers.runc.version annotation), and why. A runtime that names
 * no runc version (crun, or a build whose `features` has no annotations) is taken to use the older
 * formula, which every runtime used until 2025; the reason says so.
 */
export function weightConversionOf(runcVersion: string | undefined): {
  conversion: WeightConversion;
  why: string;
} {
  const parts = runcVersion
    ?.match(/^v?(\d+)\.(\d+)\.(\d+)/)
    ?.slice(1)
    .map(Number);
  if (runcVersion === undefined || parts === undefined) {
    const named = runcVersion === undefined ? 'names no runc version' : `names runc version "${runcVersion}"`;
    return { conversion: 'linear', why: `the runtime ${named}: taken to convert as runc before 1.3.2` };
  }
  return atLeast(parts, RUNC_LOG_QUADRATIC)
    ? { conversion: 'log-quadratic', why: `runc ${runcVersion} converts as runc 1.3.2 and later` }
    : { conversion: 'linear', why: `runc ${runcVersion} converts as runc before 1.3.2` };
}

function atLeast(version: readonly number[], least: readonly number[]): boolean {
  for (let i = 0; i < least.length; i++) {
    const a = version[i] ?? 0;
    const b = least[i] ?? 0;
    if (a !== b) return a > b;
  }
  return true;
}
