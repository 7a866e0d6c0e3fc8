/** Racing work against a deadline: the wait ends, and leaves no timer or listener behind. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { beforeDeadline, settledWithin } from '../../src/kit/deadline.js';

const never = new Promise<never>(() => undefined);

/** Timers keeping the event loop alive now (an unref'd timer is not counted). */
function liveTimers(): number {
  return process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
}

describe('beforeDeadline', () => {
  it("gives the work's value when it settles in time, and clears its timer", async () => {
    const before = liveTimers();
    assert.equal(await beforeDeadline(sleep(10, 'done'), 60_000, 'late'), 'done');
    assert.equal(liveTimers(), before);
  });

  it('gives `late` when the deadline passes first', async () => {
    assert.equal(await beforeDeadline(never, 10, 'late'), 'late');
  });

  it('passes a rejection of the work on', async () => {
    await assert.rejects(beforeDeadline(Promise.reject(new Error('failed')), 60_000, 'late'), /failed/);
  });

  it('gives `late` at once when the signal aborts, and removes its listener', async () => {
    const controller = new AbortController();
    let listeners = 0;
    const signal = controller.signal;
    const add = signal.addEventListener.bind(signal);
    const remove = signal.removeEventListener.bind(signal);
    signal.addEventListener = (...args: Parameters<AbortSignal['addEventListener']>) => {
      listeners++;
      add(...args);
    };
    signal.removeEventListener = (...args: Parameters<AbortSignal['removeEventListener']>) => {
      listeners--;
      remove(...args);
    };
    const racing = beforeDeadline(never, 60_000, 'late', { signal });
    assert.equal(listeners, 1);
    controller.abort();
    assert.equal(await racing, 'late');
    assert.equal(listeners, 0);
  });

  it('an aborted signal wins over work already done, and a later rejection stays handled', async () => {
    let unhandled = 0;
    const count = (): void => {
      unhandled++;
    };
    process.on('unhandledRejection', count);
    try {
      const aborted = AbortSignal.abort();
      assert.equal(
        await beforeDeadline(Promise.resolve('done'), 60_000, 'late', { signal: aborted }),
        'late',
      );
      const failing = sleep(5).then(() => Promise.reject(new Error('after the abort')));
      assert.equal(await beforeDeadline(failing, 60_000, 'late', { signal: aborted }), 'late');
      assert.equal(await settledWithin(failing, 60_000, aborted), false);
      await sleep(30);
      assert.equal(unhandled, 0);
    } finally {
      process.off('unhandledRejection', count);
    }
  });

  it('with ref false, its timer does not keep the process alive', async () => {
    const before = liveTimers();
    const racing = beforeDeadline(never, 60_000, 'late', { ref: false });
    assert.equal(liveTimers(), before);
    const kept = beforeDeadline(never, 20, 'late');
    assert.equal(liveTimers(), before + 1);
    assert.equal(await kept, 'late');
    void racing;
  });
});

describe('settledWithin', () => {
  it('true once the work settles, false when the deadline passes first', async () => {
    assert.equal(await settledWithin(sleep(5), 60_000), true);
    assert.equal(await settledWithin(never, 10), false);
  });
});
