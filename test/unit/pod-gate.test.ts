/** The order between a pod's Stop/Remove and its container operations. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FailedPreconditionError } from '../../src/errors.js';
import { PodGate } from '../../src/sandbox/gate.js';
import { deferred } from '../harness/wait.js';

describe('PodGate', () => {
  it('a close waits for the container operations already inside', async () => {
    const gate = new PodGate();
    const order: string[] = [];
    const create = deferred();
    const inside = gate.enter('p', async () => {
      await create.promise;
      order.push('create done');
    });
    const closing = gate.close('p', async () => {
      order.push('remove runs');
    });
    await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(order, []);
    create.resolve();
    await Promise.all([inside, closing]);
    assert.deepEqual(order, ['create done', 'remove runs']);
  });

  it('refuses container operations while the pod is closing, and takes them again after', async () => {
    const gate = new PodGate();
    const remove = deferred();
    const closing = gate.close('p', () => remove.promise);
    await assert.rejects(
      gate.enter('p', async () => 'never'),
      (err: unknown) =>
        err instanceof FailedPreconditionError && /being stopped or removed/.test(err.message),
    );
    assert.equal(await gate.enter('other-pod', async () => 'fine'), 'fine');
    remove.resolve();
    await closing;
    assert.equal(await gate.enter('p', async () => 'open again'), 'open again');
  });

  it('stays closed until the last of two overlapping closes ends', async () => {
    const gate = new PodGate();
    const stop = deferred();
    const remove = deferred();
    const a = gate.close('p', () => stop.promise);
    const b = gate.close('p', () => remove.promise);
    stop.resolve();
    await a;
    await assert.rejects(
      gate.enter('p', async () => undefined),
      FailedPreconditionError,
    );
    remove.resolve();
    await b;
    await gate.enter('p', async () => undefined);
  });

  it('a failing operation or close leaves the gate usable', async () => {
    const gate = new PodGate();
    await assert.rejects(
      gate.enter('p', () => Promise.reject(new Error('boom'))),
      /boom/,
    );
    await assert.rejects(
      gate.close('p', () => Promise.reject(new Error('bang'))),
      /bang/,
    );
    assert.equal(await gate.enter('p', async () => 1), 1);
  });
});
