/**
 * The operation kernel every RunPodSandbox and CreateContainer runs on: named steps journaled and
 * undone, keyed locks, keyed gates, the test-only pause. Pure logic, no daemon.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { StepError } from '../../src/errors.js';
import { KeyedGate } from '../../src/operation/gate.js';
import { KeyedLock } from '../../src/operation/lock.js';
import { pauseIfAsked } from '../../src/operation/pause.js';
import {
  Steps,
  asStep,
  watchSteps,
  type AbandonedOperation,
  type StepOutcome,
} from '../../src/operation/steps.js';
import { UndoStack } from '../../src/operation/undo.js';
import { capturingLogger } from '../harness/log.js';
import { deferred, waitFor } from '../harness/wait.js';

const silent = pino({ level: 'silent' });

/** A kernel bug here shows as a wait that never ends: bound it, generously. */
const HANG_BOUND_MS = 30_000;

/** An AbandonedOperation that records which ending it got. */
function ending(): AbandonedOperation & { outcome: string[] } {
  const outcome: string[] = [];
  return {
    operation: 'TestOperation',
    outsideStep: 'outside',
    outcome,
    forget: () => outcome.push('forget'),
    keepFailed: (failure) => outcome.push(`keepFailed ${failure.step}`),
  };
}

describe('Steps', { timeout: HANG_BOUND_MS }, () => {
  it('journals each step before it acts, and runs them in order', async () => {
    const events: string[] = [];
    const steps = new Steps('TestOperation', silent, async (step) => {
      events.push(`begin ${step}`);
    });
    await steps.run('first', async () => events.push('act first'));
    await steps.run('second', async () => events.push('act second'));
    assert.deepEqual(events, ['begin first', 'act first', 'begin second', 'act second']);
    assert.deepEqual(Object.keys(steps.timingsMs), ['first', 'second']);
  });

  it('does not act on a step whose journal entry cannot be written', async () => {
    let acted = false;
    const steps = new Steps('TestOperation', silent, () => Promise.reject(new Error('disk full')));
    await assert.rejects(
      steps.run('first', async () => {
        acted = true;
      }),
      /disk full/,
    );
    assert.equal(acted, false);
  });

  it('a failure names its step; a StepError from inside keeps the step it names', async () => {
    const steps = new Steps('TestOperation', silent, async () => undefined);
    await assert.rejects(
      steps.run('mount', () => Promise.reject(new Error('EBUSY'))),
      (err: unknown) => err instanceof StepError && err.step === 'mount' && err.message === 'mount: EBUSY',
    );
    await assert.rejects(
      steps.run('outer', () => asStep('inner', () => Promise.reject(new Error('no')))),
      (err: unknown) => err instanceof StepError && err.step === 'inner',
    );
  });

  it('tells watchers how each step ended, until they stop watching', async () => {
    const seen: StepOutcome[] = [];
    const stop = watchSteps((outcome) => seen.push(outcome));
    const steps = new Steps('TestOperation', silent, async () => undefined);
    try {
      await steps.run('good', async () => undefined);
      await steps.run('bad', () => Promise.reject(new Error('no'))).catch(() => undefined);
    } finally {
      stop();
    }
    await steps.run('unwatched', async () => undefined);
    assert.deepEqual(
      seen.map(({ operation, step, ok }) => ({ operation, step, ok })),
      [
        { operation: 'TestOperation', step: 'good', ok: true },
        { operation: 'TestOperation', step: 'bad', ok: false },
      ],
    );
    assert.ok(seen.every((outcome) => outcome.seconds >= 0));
  });

  it('a failure undoes exactly what was done, newest first, the failed step included', async () => {
    const undone: string[] = [];
    const steps = new Steps('TestOperation', silent, async () => undefined);
    // As the services do: each step registers its undo before it acts, so a step that fails
    // halfway is undone too.
    const step = (name: string, act: () => Promise<void>): Promise<void> =>
      steps.run(name, async () => {
        steps.onUndo(name, async () => {
          undone.push(name);
        });
        await act();
      });
    const end = ending();
    let failure: StepError | undefined;
    try {
      await step('dir', async () => undefined);
      await step('netns', async () => undefined);
      await step('network', () => Promise.reject(new Error('plugin failed')));
      await step('never', async () => undefined);
    } catch (err) {
      failure = await steps.abandon(err, end);
    }
    assert.deepEqual(undone, ['network', 'netns', 'dir']);
    assert.equal(failure?.step, 'network');
    assert.deepEqual(end.outcome, ['forget']);
  });

  it('an undo that fails is reported and the others still run; the record is kept failed', async () => {
    const { logger, lines } = capturingLogger();
    const undone: string[] = [];
    const steps = new Steps('TestOperation', logger, async () => undefined);
    steps.onUndo('a', async () => {
      undone.push('a');
    });
    steps.onUndo('b', () => Promise.reject(new Error('umount: busy')));
    steps.onUndo('c', async () => {
      undone.push('c');
    });
    const end = ending();
    const failure = await steps.abandon(new Error('after every step'), end);
    assert.deepEqual(undone, ['c', 'a']);
    // An error from outside every step is blamed on the operation's outside step.
    assert.equal(failure.step, 'outside');
    assert.deepEqual(end.outcome, ['keepFailed outside']);
    assert.ok(lines.some((l) => l.msg === 'undo failed' && l.step === 'b' && l.err === 'umount: busy'));
    assert.ok(lines.some((l) => l.msg === 'TestOperation failed, undoing' && l.step === 'outside'));
  });

  it('after release, nothing is undone', async () => {
    let undone = false;
    const steps = new Steps('TestOperation', silent, async () => undefined);
    steps.onUndo('a', async () => {
      undone = true;
    });
    steps.release();
    const end = ending();
    await steps.abandon(new Error('late'), end);
    assert.equal(undone, false);
    assert.deepEqual(end.outcome, ['forget']);
  });
});

describe('UndoStack', { timeout: HANG_BOUND_MS }, () => {
  it('unwinds newest first, returns the steps whose undo failed, and is empty after', async () => {
    const undone: string[] = [];
    const stack = new UndoStack(silent);
    for (const step of ['one', 'two', 'three']) {
      stack.push(step, async () => {
        undone.push(step);
        if (step === 'two') throw new Error('failed');
      });
    }
    assert.deepEqual(await stack.unwind(), ['two']);
    assert.deepEqual(undone, ['three', 'two', 'one']);
    assert.deepEqual(await stack.unwind(), []);
    assert.equal(undone.length, 3);
  });
});

describe('KeyedLock', { timeout: HANG_BOUND_MS }, () => {
  it('serialises work on one key, in arrival order', async () => {
    const lock = new KeyedLock();
    const events: string[] = [];
    const first = deferred();
    const a = lock.with('pod', async () => {
      events.push('a starts');
      await first.promise;
      events.push('a ends');
    });
    const b = lock.with('pod', async () => {
      events.push('b starts');
    });
    const c = lock.with('pod', async () => {
      events.push('c starts');
    });
    await sleep(10);
    assert.deepEqual(events, ['a starts']);
    first.resolve();
    await Promise.all([a, b, c]);
    assert.deepEqual(events, ['a starts', 'a ends', 'b starts', 'c starts']);
  });

  it('lets other keys proceed meanwhile', async () => {
    const lock = new KeyedLock();
    const held = deferred();
    const a = lock.with('one', () => held.promise);
    assert.equal(await lock.with('two', async () => 'not blocked'), 'not blocked');
    held.resolve();
    await a;
  });

  it('a failure releases the key and reaches only its own caller', async () => {
    const lock = new KeyedLock();
    const failed = lock.with('pod', () => Promise.reject(new Error('step failed')));
    const next = lock.with('pod', async () => 'ran');
    await assert.rejects(failed, /step failed/);
    assert.equal(await next, 'ran');
    assert.equal(await lock.with('pod', async () => 'again'), 'again');
  });
});

describe('KeyedGate', { timeout: HANG_BOUND_MS }, () => {
  const refusal = (key: string): Error => new Error(`${key} is closing`);

  it('an operation that fails still leaves the gate, so a close does not wait for it forever', async () => {
    const gate = new KeyedGate(refusal);
    await assert.rejects(
      gate.enter('k', () => Promise.reject(new Error('create failed'))),
      /create failed/,
    );
    assert.equal(await gate.close('k', async () => 'closed'), 'closed');
  });

  it('a close that fails opens the key again, and refuses with the error refusal makes', async () => {
    const gate = new KeyedGate(refusal);
    const closing = deferred();
    const failedClose = gate.close('k', async () => {
      await closing.promise;
      throw new Error('remove failed');
    });
    await assert.rejects(
      gate.enter('k', async () => undefined),
      (err: unknown) => err instanceof Error && err.message === 'k is closing',
    );
    closing.resolve();
    await assert.rejects(failedClose, /remove failed/);
    assert.equal(await gate.enter('k', async () => 'open'), 'open');
  });

  it('operations inside the gate run side by side; the close waits for the last', async () => {
    const gate = new KeyedGate(refusal);
    const events: string[] = [];
    const one = deferred();
    const two = deferred();
    const a = gate.enter('k', async () => {
      await one.promise;
      events.push('one done');
    });
    const b = gate.enter('k', async () => {
      await two.promise;
      events.push('two done');
    });
    const closed = gate.close('k', async () => {
      events.push('close runs');
    });
    two.resolve();
    await b;
    await sleep(10);
    assert.deepEqual(events, ['two done']);
    one.resolve();
    await Promise.all([a, closed]);
    assert.deepEqual(events, ['two done', 'one done', 'close runs']);
  });
});

describe('pauseIfAsked', { timeout: HANG_BOUND_MS }, () => {
  it('passes every step but the one named', async () => {
    await pauseIfAsked(
      { pauseBeforeStep: 'other', stateDir: '/nonexistent', operation: 'Op' },
      'step',
      silent,
    );
    await pauseIfAsked(
      { pauseBeforeStep: undefined, stateDir: '/nonexistent', operation: 'Op' },
      'step',
      silent,
    );
  });

  it('at the named step, leaves its marker with our pid and never goes on', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'berth-pause-'));
    try {
      let settled = false;
      void pauseIfAsked({ pauseBeforeStep: 'step', stateDir: dir, operation: 'Op' }, 'step', silent).finally(
        () => (settled = true),
      );
      const marker = join(dir, 'test-paused-step');
      let pid = '';
      await waitFor(
        async () => (pid = await readFile(marker, 'utf8').catch(() => '')) !== '',
        HANG_BOUND_MS,
        {
          what: 'the pause marker',
        },
      );
      assert.equal(pid, String(process.pid));
      await sleep(20);
      assert.equal(settled, false);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
