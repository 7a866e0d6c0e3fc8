/**
 * A process is the one recorded only while its pid and its start time both match: what keeps
 * berth from taking a later process given a dead infra's pid for that infra.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { isRunning, parseStat, startTimeOf } from '../../src/process/index.js';
import { infraRunning } from '../../src/sandbox/infra.js';

test('a stat line is read past a command name that holds spaces and parentheses', () => {
  const fields = ['S', '1', ...Array.from({ length: 17 }, (_, i) => String(i + 5)), '4711', '0'];
  assert.deepEqual(parseStat(`4242 (a) (b c) ${fields.join(' ')}`), { state: 'S', ppid: 1, startTime: 4711 });
  assert.equal(parseStat('4242 (cut) S 1'), null);
});

test('a pid whose start time differs is not running; the recorded one is, until it exits', async () => {
  const child = spawn('sleep', ['60'], { stdio: 'ignore' });
  const pid = child.pid;
  assert.ok(pid);
  try {
    const startTime = await startTimeOf(pid);
    assert.ok(startTime !== null && startTime > 0, 'a live process has a start time');
    assert.equal(await isRunning({ pid, startTime }), true);
    assert.equal(await isRunning({ pid, startTime: startTime + 1 }), false, 'another process at that pid');
    assert.equal(await isRunning(pid), true, 'a bare pid says only that some process has it');

    const infra = { infra: true, pid };
    assert.equal(await infraRunning({ ...infra, infraStartTime: startTime }), true);
    assert.equal(await infraRunning({ ...infra, infraStartTime: startTime + 1 }), false);
    assert.equal(
      await infraRunning({ ...infra, infraStartTime: 0 }),
      false,
      'an unknown start time is no infra',
    );
  } finally {
    child.kill('SIGKILL');
    await once(child, 'exit');
  }
  assert.equal(await startTimeOf(pid), null);
  assert.equal(await isRunning(pid), false);
});
