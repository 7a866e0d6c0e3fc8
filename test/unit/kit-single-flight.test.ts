/** Shared work and callers who give up: the work stops only when nobody waits for it. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SingleFlight } from '../../src/kit/single-flight.js';
import { deferred } from '../harness/wait.js';

describe('SingleFlight', () => {
  it('callers of one key share one run', async () => {
    const flight = new SingleFlight<number>();
    let runs = 0;
    const g = deferred();
    const work = async (): Promise<number> => {
      runs++;
      await g.promise;
      return 42;
    };
    const both = Promise.all([flight.run('k', work), flight.run('k', work)]);
    g.resolve();
    assert.deepEqual(await both, [42, 42]);
    assert.equal(runs, 1);
  });

  it('a caller that gives up is answered at once; the others still get the result', async () => {
    const flight = new SingleFlight<string>();
    const g = deferred();
    let workSignal: AbortSignal | undefined;
    const work = async (signal: AbortSignal): Promise<string> => {
      workSignal = signal;
      await g.promise;
      return 'pulled';
    };
    const leaving = new AbortController();
    const a = flight.run('k', work, leaving.signal);
    const b = flight.run('k', work, new AbortController().signal);
    leaving.abort(new Error('client cancelled'));
    await assert.rejects(a, /client cancelled/);
    assert.equal(workSignal?.aborted, false);
    g.resolve();
    assert.equal(await b, 'pulled');
  });

  it('the work is aborted when every caller has gone, and a later caller starts afresh', async () => {
    const flight = new SingleFlight<string>();
    const signals: AbortSignal[] = [];
    const work = (signal: AbortSignal): Promise<string> =>
      new Promise((resolve, reject) => {
        signals.push(signal);
        signal.addEventListener('abort', () => reject(new Error('aborted')));
        if (signals.length > 1) resolve('second run');
      });
    const x = new AbortController();
    const y = new AbortController();
    const first = [flight.run('k', work, x.signal), flight.run('k', work, y.signal)];
    x.abort();
    assert.equal(signals[0]?.aborted, false);
    y.abort();
    assert.equal(signals[0]?.aborted, true);
    await Promise.allSettled(first);
    assert.equal(await flight.run('k', work), 'second run');
    assert.equal(signals.length, 2);
  });
});
