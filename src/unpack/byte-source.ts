const EMPTY = Buffer.alloc(0);

/**
 * Exact-length reads over a stream of chunks of any size, without copying data that arrives in
 * one piece. Pull-based, so a slow consumer (the disk) slows the producer instead of buffering.
 */
export class ByteSource {
  private pending: Buffer = EMPTY;
  private ended = false;

  constructor(private readonly chunks: AsyncIterator<Buffer>) {}

  /**
   * Reads exactly `n` bytes. Returns the bytes it got when the stream ends first (possibly none):
   * the caller tells a clean end between records from a truncation.
   */
  async readExact(n: number): Promise<Buffer> {
    if (!(await this.fill())) return EMPTY;
    if (this.pending.length >= n) return this.take(n);
    const parts: Buffer[] = [];
    let have = 0;
    while (have < n && (await this.fill())) {
      const part = this.take(Math.min(n - have, this.pending.length));
      parts.push(part);
      have += part.length;
    }
    return Buffer.concat(parts, have);
  }

  /** Reads between 1 and `max` bytes, whatever is at hand; undefined once the stream has ended. */
  async readSome(max: number): Promise<Buffer | undefined> {
    if (!(await this.fill())) return undefined;
    return this.take(Math.min(max, this.pending.length));
  }

  /** Reads and discards everything left; returns how many bytes that was. */
  async drain(): Promise<number> {
    let n = this.pending.length;
    this.pending = EMPTY;
    while (await this.fill()) {
      n += this.pending.length;
      this.pending = EMPTY;
    }
    return n;
  }

  private async fill(): Promise<boolean> {
    while (this.pending.length === 0) {
      if (this.ended) return false;
      const next = await this.chunks.next();
      if (next.done) {
        this.ended = true;
        return false;
      }
      this.pending = next.value;
    }
    return true;
  }

  private take(n: number): Buffer {
    const part = this.pending.subarray(0, n);
    this.pending = this.pending.subarray(n);
    return part;
  }
}
