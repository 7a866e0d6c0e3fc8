import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { inPool } from '../../src/kit/pool.js';

test('every item runs, at most `concurrency` at once, and results keep the items order', async () => {
  let running = 0;
  let most = 0;
  const results = await inPool([5, 1, 4, 2, 3], 2, async (n) => {
    running++;
    most = Math.max(most, running);
    await sleep(n);
    running--;
    return n * 10;
  });
  assert.deepEqual(results, [50, 10, 40, 20, 30]);
  assert.equal(most, 2);
});

test('no items, no calls', async () => {
  assert.deepEqual(await inPool([], 4, () => Promise.reject(new Error('called'))), []);
});

test('after a failure no item starts; the running ones finish before the first failure is thrown', async () => {
  const started: number[] = [];
  const finished: number[] = [];
  await assert.rejects(
    inPool([0, 1, 2, 3, 4, 5], 2, async (n) => {
      started.push(n);
      if (n === 0) throw new Error('item 0 failed');
      if (n === 1) await sleep(30);
      finished.push(n);
    }),
    /item 0 failed/,
  );
  // 0 fails at once; 1 was already running and is waited for; nothing after that starts.
  assert.deepEqual(started, [0, 1]);
  assert.deepEqual(finished, [1]);
});
