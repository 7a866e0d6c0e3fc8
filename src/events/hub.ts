import { ResourceExhaustedError, UnavailableError } from '../errors.js';
import type { Logger } from '../log.js';

export interface EventHubOptions {
  /** Events one subscriber may have waiting; past that it is dropped, so it can never hold up others. */
  capacity: number;
  /** How long events published while nobody listens are kept for the next subscriber. */
  retainMs: number;
  logger: Logger;
  /** For tests of the retention; milliseconds like Date.now. */
  now?: () => number;
}

/**
 * Fans events out to every subscriber, in publish order, without ever blocking the publisher: each
 * subscriber has a bounded queue of its own, and one that falls behind by more than the capacity is
 * ended with an error (it subscribes again) while the others go on. Events published while nobody
 * listens are kept, within the capacity and for retainMs, and handed to the next subscriber first:
 * a client that reconnects, or subscribes after a restart, still learns what happened meanwhile.
 */
export class EventHub<T> {
  private readonly subscribers = new Set<Subscription<T>>();
  private backlog: { event: T; at: number }[] = [];
  /** Drops the backlog once it is too old even if nothing is published or subscribed after it. */
  private expiryTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly now: () => number;

  constructor(private readonly opts: EventHubOptions) {
    this.now = opts.now ?? Date.now;
  }

  publish(event: T): void {
    if (this.closed) return;
    if (this.subscribers.size === 0) {
      this.retain(event);
      return;
    }
    for (const subscriber of this.subscribers) subscriber.push(event);
  }

  subscribe(): Subscription<T> {
    if (this.closed) throw new UnavailableError('berthd is shutting down: no new event subscriptions');
    const subscription = new Subscription<T>(this.opts.capacity, (ended, reason) => {
      this.subscribers.delete(ended);
      // At shutdown every subscriber ends; that is no news.
      if (reason && !this.closed) this.opts.logger.warn({ reason }, 'event subscriber dropped');
    });
    this.expire();
    for (const { event } of this.backlog) subscription.push(event);
    this.dropBacklog();
    this.subscribers.add(subscription);
    return subscription;
  }

  /** Ends every subscription with UNAVAILABLE; later events go nowhere. */
  close(): void {
    this.closed = true;
    this.dropBacklog();
    for (const subscriber of this.subscribers) {
      subscriber.fail(new UnavailableError('berthd is shutting down: event stream closed by the server'));
    }
  }

  private retain(event: T): void {
    this.expire();
    this.backlog.push({ event, at: this.now() });
    if (this.backlog.length > this.opts.capacity) {
      const dropped = this.backlog.length - this.opts.capacity;
      this.backlog.splice(0, dropped);
      this.opts.logger.warn({ dropped }, 'event discarded: nobody subscribed and the backlog is full');
    }
    this.scheduleExpiry();
  }

  private scheduleExpiry(): void {
    const oldest = this.backlog[0];
    if (this.expiryTimer !== undefined || oldest === undefined) return;
    const dueIn = Math.max(0, oldest.at + this.opts.retainMs - this.now());
    this.expiryTimer = setTimeout(() => {
      this.expiryTimer = undefined;
      this.expire();
      this.scheduleExpiry();
    }, dueIn + 1);
    // A daemon that is shutting down does not wait for its backlog to expire.
    this.expiryTimer.unref();
  }

  private dropBacklog(): void {
    this.backlog = [];
    clearTimeout(this.expiryTimer);
    this.expiryTimer = undefined;
  }

  private expire(): void {
    const oldest = this.now() - this.opts.retainMs;
    const kept = this.backlog.findIndex((entry) => entry.at >= oldest);
    const expired = kept < 0 ? this.backlog.length : kept;
    if (expired === 0) return;
    this.backlog.splice(0, expired);
    this.opts.logger.warn({ dropped: expired }, 'event discarded: nobody subscribed in time');
  }
}

/** One subscriber's queue, read with next() or for await; close() when the reader goes away. */
export class Subscription<T> implements AsyncIterable<T> {
  private queue: T[] = [];
  private failure: Error | null = null;
  private done = false;
  private waiter: { resolve: (r: IteratorResult<T>) => void; reject: (err: Error) => void } | null = null;

  constructor(
    private readonly capacity: number,
    private readonly onEnd: (subscription: Subscription<T>, reason?: string) => void,
  ) {}

  /** @internal Called by the hub. */
  push(event: T): void {
    if (this.done || this.failure) return;
    if (this.waiter) {
      const { resolve } = this.waiter;
      this.waiter = null;
      resolve({ value: event, done: false });
      return;
    }
    if (this.queue.length < this.capacity) {
      this.queue.push(event);
      return;
    }
    this.fail(
      new ResourceExhaustedError(
        `event subscriber fell ${this.capacity} events behind and was dropped; subscribe again (and relist)`,
      ),
    );
  }

  /** @internal Ends the subscription with `err`, dropping what it had not read. */
  fail(err: Error): void {
    if (this.done || this.failure) return;
    this.failure = err;
    this.queue = [];
    this.onEnd(this, err.message);
    if (this.waiter) {
      const { reject } = this.waiter;
      this.waiter = null;
      reject(err);
    }
  }

  /** Resolves with the next event; rejects once the subscription failed; done once closed. */
  next(): Promise<IteratorResult<T>> {
    const event = this.queue.shift();
    if (event !== undefined) return Promise.resolve({ value: event, done: false });
    if (this.failure) return Promise.reject(this.failure);
    if (this.done) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve, reject) => (this.waiter = { resolve, reject }));
  }

  close(): void {
    if (this.done) return;
    this.done = true;
    this.queue = [];
    if (!this.failure) this.onEnd(this);
    this.waiter?.resolve({ value: undefined, done: true });
    this.waiter = null;
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => this.next(),
      return: async () => {
        this.close();
        return { value: undefined, done: true };
      },
    };
  }
}
