/** Settle-all-then-throw: no failure is reported while a sibling still acts. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { allSettledOrThrow } from '../../src/kit/settle.js';

describe('allSettledOrThrow', () => {
  it('gives the values in the tasks order', async () => {
    const values = await allSettledOrThrow([sleep(20, 'slow'), Promise.resolve(2)]);
    assert.deepEqual(values, ['slow', 2]);
  });

  it('throws only once every sibling has settled', async () => {
    let siblingDone = false;
    const sibling = sleep(30).then(() => {
      siblingDone = true;
    });
    await assert.rejects(allSettledOrThrow([Promise.reject(new Error('early')), sibling]), /early/);
    assert.equal(siblingDone, true);
  });

  it('throws the first failure in the tasks order, not the first in time', async () => {
    const late = sleep(20).then(() => Promise.reject(new Error('first in order')));
    const early = Promise.reject(new Error('first in time'));
    await assert.rejects(allSettledOrThrow([late, early]), /first in order/);
  });

  it('no tasks, no values', async () => {
    assert.deepEqual(await allSettledOrThrow([]), []);
  });
});
