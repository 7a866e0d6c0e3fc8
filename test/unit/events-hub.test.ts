import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { pino } from 'pino';
import { ResourceExhaustedError, UnavailableError } from '../../src/errors.js';
import { EventHub, type Subscription } from '../../src/events/hub.js';
import { LifecyclePublisher, containerChange, type LifecycleEvent } from '../../src/events/lifecycle.js';

const logger = pino({ level: 'silent' });

function hub(opts: { capacity?: number; retainMs?: number; now?: () => number } = {}): EventHub<number> {
  return new EventHub<number>({
    capacity: opts.capacity ?? 10,
    retainMs: opts.retainMs ?? 60_000,
    logger,
    ...opts,
  });
}

/** What the subscription has ready now, without waiting for more. */
async function ready(subscription: Subscription<number>, count: number): Promise<number[]> {
  const values: number[] = [];
  for (let i = 0; i < count; i++) {
    const next = await subscription.next();
    assert.equal(next.done, false);
    values.push(next.value as number);
  }
  return values;
}

async function waitUntil(done: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.ok(done(), 'never happened');
}

describe('EventHub', () => {
  test('every subscriber gets every event, in order', async () => {
    const events = hub();
    const a = events.subscribe();
    const b = events.subscribe();
    for (const n of [1, 2, 3]) events.publish(n);
    assert.deepEqual(await ready(a, 3), [1, 2, 3]);
    assert.deepEqual(await ready(b, 3), [1, 2, 3]);
  });

  test('a subscriber that falls behind by more than the capacity is dropped; the others are not', async () => {
    const events = hub({ capacity: 3 });
    const slow = events.subscribe();
    const fast = events.subscribe();
    const got: number[] = [];
    for (const n of [1, 2, 3, 4, 5]) {
      events.publish(n);
      got.push(...(await ready(fast, 1)));
    }
    assert.deepEqual(got, [1, 2, 3, 4, 5]);
    await assert.rejects(
      slow.next(),
      (err) => err instanceof ResourceExhaustedError && /fell 3/.test(err.message),
    );
    events.publish(6);
    assert.deepEqual(await ready(fast, 1), [6]);
  });

  test('events nobody hears are kept, within capacity and age, for the next subscriber', async () => {
    let now = 0;
    const events = hub({ capacity: 3, retainMs: 1_000, now: () => now });
    events.publish(1);
    now = 600;
    for (const n of [2, 3, 4]) events.publish(n);
    // 1 went for the capacity; 2.. are young enough.
    now = 1_500;
    events.publish(5);
    // Now 2, 3 and 4 are 900 ms old and 5 is new: all kept; 2 goes with the capacity.
    const first = events.subscribe();
    assert.deepEqual(await ready(first, 3), [3, 4, 5]);
    // The backlog went to the first subscriber only.
    const second = events.subscribe();
    events.publish(6);
    assert.deepEqual(await ready(second, 1), [6]);
    assert.deepEqual(await ready(first, 1), [6]);
  });

  test('old events expire before the next subscriber comes', async () => {
    let now = 0;
    const events = hub({ retainMs: 1_000, now: () => now });
    events.publish(1);
    now = 800;
    events.publish(2);
    now = 1_500;
    const subscription = events.subscribe();
    events.publish(3);
    assert.deepEqual(await ready(subscription, 2), [2, 3]);
  });

  test('old events are let go even when nothing is published or subscribed after them', async () => {
    const dropped: unknown[] = [];
    const recording = pino({ level: 'warn' }, { write: (line: string) => dropped.push(JSON.parse(line)) });
    const events = new EventHub<number>({ capacity: 10, retainMs: 20, logger: recording });
    events.publish(1);
    events.publish(2);
    const droppedSoFar = (): number =>
      dropped.reduce<number>((sum, entry) => sum + (entry as { dropped: number }).dropped, 0);
    await waitUntil(() => droppedSoFar() === 2);
    events.close();
  });

  test('a closed subscription ends its reader and no longer holds events back', async () => {
    const events = hub();
    const subscription = events.subscribe();
    const pending = subscription.next();
    subscription.close();
    assert.deepEqual(await pending, { value: undefined, done: true });
    // With nobody subscribed, the next event is kept for the next subscriber.
    events.publish(7);
    assert.deepEqual(await ready(events.subscribe(), 1), [7]);
  });

  test('closing the hub ends every subscription with UNAVAILABLE and refuses new ones', async () => {
    const events = hub();
    const subscription = events.subscribe();
    const pending = subscription.next();
    events.close();
    await assert.rejects(pending, UnavailableError);
    assert.throws(() => events.subscribe(), UnavailableError);
  });
});

describe('LifecyclePublisher', () => {
  test('describes the pod when the change happens, with strictly increasing times', async () => {
    const events = new EventHub<LifecycleEvent<string>>({ capacity: 10, retainMs: 60_000, logger });
    const publisher = new LifecyclePublisher<string>(events, logger);
    let state = 'before';
    // Changes reported before the pods can be described wait for it, in order.
    publisher.publish(containerChange('STOPPED', { id: 'c0', sandboxId: 'p' }));
    publisher.describeWith((sandboxId) => (sandboxId === 'p' ? `${sandboxId}:${state}` : undefined));
    publisher.publish(containerChange('CREATED', { id: 'c1', sandboxId: 'p' }));
    const later = publisher.capture(containerChange('DELETED', { id: 'c1', sandboxId: 'p' }));
    state = 'after';
    publisher.publish(containerChange('STARTED', { id: 'c2', sandboxId: 'gone' }));
    later();
    const subscription = events.subscribe();
    const got: LifecycleEvent<string>[] = [];
    for (let i = 0; i < 3; i++) {
      const next = await subscription.next();
      assert.ok(!next.done);
      got.push(next.value);
    }
    assert.deepEqual(
      got.map((e) => `${e.change} ${e.containerId} ${e.pod}`),
      ['STOPPED c0 p:before', 'CREATED c1 p:before', 'DELETED c1 p:before'],
    );
    const times = got.map((e) => BigInt(e.createdAt));
    assert.ok(times[0]! < times[1]! && times[1]! < times[2]!);
  });
});
