import { randomBytes } from 'node:crypto';
import { ResourceExhaustedError } from '../errors.js';

export interface TokenCacheOptions<T> {
  /** Entries held at most; the oldest goes first. */
  maxEntries?: number;
  /** An entry's size in bytes (an exec's command line); together they hold at most maxBytes. */
  weigh?: (value: T) => number;
  maxBytes?: number;
  now?: () => number;
}

const DEFAULT_MAX_ENTRIES = 10_000;
const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;

interface Entry<T> {
  value: T;
  expires: number;
  bytes: number;
}

/**
 * Single-use tokens for prepared streaming requests, as kubelet's streaming package hands out:
 * a URL is good for one connection within the TTL. Bounded in entries and bytes so that a client
 * calling Exec in a loop without connecting cannot grow it without limit, and an entry is dropped
 * once it expires whether or not anyone looks it up, so that what it holds is freed.
 */
export class TokenCache<T> {
  /** In insertion order, which is expiry order: every entry lives the same TTL. */
  private readonly entries = new Map<string, Entry<T>>();
  private heldBytes = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly maxEntries: number;
  private readonly maxBytes: number;
  private readonly weigh: (value: T) => number;
  private readonly now: () => number;

  constructor(
    private readonly ttlMs: number,
    opts: TokenCacheOptions<T> = {},
  ) {
    this.maxEntries = opts.maxEntries ?? DEFAULT_MAX_ENTRIES;
    this.maxBytes = opts.maxBytes ?? DEFAULT_MAX_BYTES;
    this.weigh = opts.weigh ?? (() => 0);
    this.now = opts.now ?? Date.now;
  }

  /** Stores `value` and returns its token (URL-safe base64 of 16 random bytes). */
  insert(value: T): string {
    const bytes = this.weigh(value);
    if (bytes > this.maxBytes) {
      throw new ResourceExhaustedError(
        `streaming request of ${bytes} bytes is larger than the ${this.maxBytes} bytes held for all pending streams`,
      );
    }
    this.sweep();
    // The oldest entries go first: Map iterates in insertion order.
    for (const token of this.entries.keys()) {
      if (this.entries.size < this.maxEntries && this.heldBytes + bytes <= this.maxBytes) break;
      this.remove(token);
    }
    const token = randomBytes(16).toString('base64url');
    this.entries.set(token, { value, expires: this.now() + this.ttlMs, bytes });
    this.heldBytes += bytes;
    this.schedule();
    return token;
  }

  /** The value for `token`, removed so that the token cannot be used again; undefined when unknown or expired. */
  consume(token: string): T | undefined {
    const entry = this.entries.get(token);
    if (!entry) return undefined;
    this.remove(token);
    return entry.expires > this.now() ? entry.value : undefined;
  }

  /** Entries held, expired ones not yet swept included. */
  get size(): number {
    return this.entries.size;
  }

  get bytes(): number {
    return this.heldBytes;
  }

  /** Drops every entry and the sweep timer. */
  clear(): void {
    this.entries.clear();
    this.heldBytes = 0;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private remove(token: string): void {
    const entry = this.entries.get(token);
    if (!entry) return;
    this.entries.delete(token);
    this.heldBytes -= entry.bytes;
  }

  private sweep(): void {
    const now = this.now();
    for (const [token, entry] of this.entries) {
      if (entry.expires > now) break;
      this.remove(token);
    }
  }

  /** A timer for the oldest entry's expiry, while there is one; it never keeps berthd running. */
  private schedule(): void {
    if (this.timer !== undefined) return;
    const oldest = this.entries.values().next().value;
    if (oldest === undefined) return;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.sweep();
        this.schedule();
      },
      Math.max(0, oldest.expires - this.now()) + 1,
    );
    this.timer.unref();
  }
}
