/** CNI spec versions berth can drive: 0.3.0 introduced chaining and the rich result, 1.1.0 is the newest. */
export const MIN_CNI_VERSION = '0.3.0';
export const MAX_CNI_VERSION = '1.1.0';

type Triple = [number, number, number];

/** Parses a strict `major.minor.patch` version; undefined for anything else. */
export function parseCniVersion(v: string): Triple | undefined {
  const m = /^(\d+)\.(\d+)\.(\d+)$/.exec(v);
  if (!m) return undefined;
  return [Number(m[1]), Number(m[2]), Number(m[3])];
}

/** Negative, zero or positive like a sort comparator. Both inputs must be valid versions. */
export function compareCniVersions(a: string, b: string): number {
  const pa = parseCniVersion(a);
  const pb = parseCniVersion(b);
  if (!pa || !pb) throw new Error(`invalid CNI version comparison: "${a}" vs "${b}"`);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

export function isSupportedCniVersion(v: string): boolean {
  return (
    parseCniVersion(v) !== undefined &&
    compareCniVersions(v, MIN_CNI_VERSION) >= 0 &&
    compareCniVersions(v, MAX_CNI_VERSION) <= 0
  );
}
