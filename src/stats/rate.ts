/**
 * Rates of cumulative counters between two calls, per key: CRI's usage_nano_cores is the cpu
 * counter's growth since the previous sample, which the runtime has to remember because kubelet
 * does not compute it for pods.
 */
export class CounterRate {
  private readonly previous = new Map<string, { value: bigint; atNs: bigint }>();

  /**
   * The growth per second of `value` since the last sample of `key`, then remembers this one.
   * Null on the first sample, when no time has passed, or when the counter went backwards (a new
   * cgroup under the same key), as containerd leaves it unset then.
   */
  sample(key: string, value: bigint, atNs: bigint): bigint | null {
    const last = this.previous.get(key);
    this.previous.set(key, { value, atNs });
    if (!last || atNs <= last.atNs || value < last.value) return null;
    return ((value - last.value) * 1_000_000_000n) / (atNs - last.atNs);
  }

  /** Forgets every key not in `live`, so removed pods do not accumulate. */
  retain(live: ReadonlySet<string>): void {
    for (const key of this.previous.keys()) if (!live.has(key)) this.previous.delete(key);
  }
}
