/**
 * How a runtime turns CRI cpu shares (cgroup v1's 2..262144, default 1024) into a cgroup v2
 * cpu.weight (1..10000, default 100). runc changed its formula in 1.3.2: before, 1024 shares became
 * weight 39, less than half of what a cgroup that asks for nothing gets; since, 1024 becomes 100.
 * berth writes a pod's own cgroup with the formula of the pod's runtime, so that the pod's weight
 * compares with its containers' and its neighbours' as the runtime's own do.
 */
export type WeightConversion = 'linear' | 'log-quadratic';

/** The kernel's weight of a cgroup that sets none, which 0 shares (none asked) stands for. */
const DEFAULT_WEIGHT = 100;
const MIN_SHARES = 2;
/** cgroup v1's ceiling for cpu.shares. */
export const MAX_SHARES = 262_144;
const MAX_WEIGHT = 10_000;

export function cpuWeightOf(shares: number, conversion: WeightConversion): number {
  if (shares === 0) return DEFAULT_WEIGHT;
  if (conversion === 'linear') {
    // runc ≤ 1.3.1: the shares' range laid onto the weights' in a straight line.
    const weight = 1 + Math.floor(((shares - MIN_SHARES) * (MAX_WEIGHT - 1)) / (MAX_SHARES - MIN_SHARES));
    return Math.min(Math.max(weight, 1), MAX_WEIGHT);
  }
  // runc ≥ 1.3.2: a quadratic in log2(shares) through (2, 1), (1024, 100) and (262144, 10000).
  if (shares <= MIN_SHARES) return 1;
  if (shares >= MAX_SHARES) return MAX_WEIGHT;
  const l = Math.log2(shares);
  return Math.ceil(10 ** ((l * l + 125 * l) / 612 - 7 / 34));
}
