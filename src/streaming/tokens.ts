import { randomBytes } from 'node:crypto';

/**
 * Single-use tokens for prepared streaming requests, as kubelet's streaming package hands out:
 * a URL is good for one connection within the TTL. The map is bounded so that a client calling
 * Exec in a loop without connecting cannot grow it without limit.
 */
export class TokenCache<T> {
  private readonly entries = new Map<string, { value: T; expires: number }>();

  constructor(
    private readonly ttlMs: number,
    private readonly maxEntries = 10_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Stores `value` and returns its token (URL-safe base64 of 16 random bytes). */
  insert(value: T): string {
    this.sweep();
    if (this.entries.size >= this.maxEntries) {
      // The oldest entry goes first: Map iterates in insertion order.
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    const token = randomBytes(16).toString('base64url');
    this.entries.set(token, { value, expires: this.now() + this.ttlMs });
    return token;
  }

  /** The value for `token`, removed so that the token cannot be used again; undefined when unknown or expired. */
  consume(token: string): T | undefined {
    const entry = this.entries.get(token);
    if (!entry) return undefined;
    this.entries.delete(token);
    return entry.expires > this.now() ? entry.value : undefined;
  }

  get size(): number {
    this.sweep();
    return this.entries.size;
  }

  private sweep(): void {
    const now = this.now();
    for (const [token, entry] of this.entries) {
      if (entry.expires > now) break;
      this.entries.delete(token);
    }
  }
}
