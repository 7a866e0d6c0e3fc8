import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Limiter } from '../../src/kit/limiter.js';

test('callers that share a limiter have at most `concurrency` tasks running together', async () => {
  const limiter = new Limiter(3);
  let running = 0;
  let most = 0;
  const task = async (ms: number): Promise<number> => {
    running++;
    most = Math.max(most, running);
    await sleep(ms);
    running--;
    return ms;
  };
  // Four "calls" of five items each, all at once.
  const calls = Array.from({ length: 4 }, () =>
    Promise.all([5, 1, 4, 2, 3].map((ms) => limiter.run(() => task(ms)))),
  );
  for (const results of await Promise.all(calls)) assert.deepEqual(results, [5, 1, 4, 2, 3]);
  assert.equal(most, 3);
  assert.equal(running, 0);
});

test('tasks start in the order they came, and a failure frees its place', async () => {
  const limiter = new Limiter(1);
  const order: number[] = [];
  const first = limiter.run(async () => {
    order.push(0);
    await sleep(5);
    throw new Error('task 0 failed');
  });
  const rest = [1, 2, 3].map((n) => limiter.run(async () => void order.push(n)));
  await assert.rejects(first, /task 0 failed/);
  await Promise.all(rest);
  assert.deepEqual(order, [0, 1, 2, 3]);
});

test('a task whose signal was aborted while it waited does not start', async () => {
  const limiter = new Limiter(1);
  const gone = new AbortController();
  let started = false;
  const holder = limiter.run(() => sleep(10));
  const waiter = limiter.run(async () => void (started = true), gone.signal);
  gone.abort(new Error('the client went away'));
  await holder;
  await assert.rejects(waiter, /the client went away/);
  assert.equal(started, false);
  // Its place went on: the limiter still runs tasks.
  assert.equal(await limiter.run(async () => 'after'), 'after');
});
