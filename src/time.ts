/** Wall clock at start-up plus monotonic time since: nanosecond resolution that never runs backwards. */
const WALL_BASE_NS = BigInt(Date.now()) * 1_000_000n;
const HR_BASE_NS = process.hrtime.bigint();

/** Nanoseconds since the epoch as a decimal string: the CRI's int64 timestamps overflow JS numbers. */
export function nowNanos(): string {
  return (WALL_BASE_NS + (process.hrtime.bigint() - HR_BASE_NS)).toString();
}
