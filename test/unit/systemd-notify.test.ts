import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { DgramSocket } from 'node-unix-socket';
import { pino, type Logger } from 'pino';
import { ServiceNotifier } from '../../src/systemd/notify.js';

/** A logger whose lines' messages land in `lines`. */
function recordingLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push((JSON.parse(chunk.toString()) as { msg: string }).msg);
      done();
    },
  });
  return { logger: pino({ level: 'warn' }, sink), lines };
}

describe('ServiceNotifier', () => {
  let dir = '';
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-notify-unit-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('is none without NOTIFY_SOCKET', () => {
    const { logger, lines } = recordingLogger();
    assert.equal(ServiceNotifier.fromEnv({}, logger), undefined);
    assert.deepEqual(lines, []);
  });

  it('takes NOTIFY_SOCKET out of the environment children inherit', () => {
    const env = { NOTIFY_SOCKET: join(dir, 'gone'), PATH: '/usr/bin' };
    assert.ok(ServiceNotifier.fromEnv(env, recordingLogger().logger));
    assert.deepEqual(env, { PATH: '/usr/bin' });
  });

  it('warns and reports nothing for an abstract or relative socket', async () => {
    for (const socket of ['@/org/freedesktop/systemd1/notify', 'notify.sock']) {
      const { logger, lines } = recordingLogger();
      const env = { NOTIFY_SOCKET: socket };
      assert.equal(ServiceNotifier.fromEnv(env, logger), undefined);
      assert.deepEqual(env, {});
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(lines.length, 1, `one warning for ${socket}`);
      assert.match(lines[0] ?? '', /readiness is not reported/);
    }
  });

  it('sends READY with MAINPID and STATUS, then STOPPING, as KEY=VALUE lines', async () => {
    const path = join(dir, 'notify');
    const manager = new DgramSocket();
    manager.bind(path);
    const received: string[] = [];
    manager.on('data', (data: Buffer) => received.push(data.toString()));
    try {
      const notifier = ServiceNotifier.fromEnv({ NOTIFY_SOCKET: path }, recordingLogger().logger);
      assert.ok(notifier);
      await notifier.ready('serving CRI on /run/berth/berth.sock');
      await notifier.stopping('stopping');
      const deadline = Date.now() + 5_000;
      while (received.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      assert.deepEqual(received, [
        `READY=1\nMAINPID=${process.pid}\nSTATUS=serving CRI on /run/berth/berth.sock`,
        'STOPPING=1\nSTATUS=stopping',
      ]);
    } finally {
      manager.close();
    }
  });

  it('logs a send that fails and carries on', async () => {
    const { logger, lines } = recordingLogger();
    const notifier = ServiceNotifier.fromEnv({ NOTIFY_SOCKET: join(dir, 'nobody-listens') }, logger);
    assert.ok(notifier);
    await notifier.ready('serving');
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(lines, ['could not notify the service manager']);
  });
});
