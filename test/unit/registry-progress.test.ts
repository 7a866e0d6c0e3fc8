import assert from 'node:assert/strict';
import { PassThrough, type Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { PullStalledError } from '../../src/registry/errors.js';
import { TransferWatch } from '../../src/registry/progress.js';
import { capturingLogger } from '../harness/log.js';

const BLOB = { digest: `sha256:${'ab'.repeat(32)}`, size: 10_000 };

async function readAll(stream: Readable): Promise<number> {
  let bytes = 0;
  for await (const chunk of stream) bytes += (chunk as Buffer).length;
  return bytes;
}

describe('TransferWatch', () => {
  it('logs the progress of a download still running, and passes its bytes through', async () => {
    const { logger, lines } = capturingLogger('info');
    const watch = new TransferWatch({
      image: 'r.test/app:1',
      stallTimeoutMs: 0,
      progressIntervalMs: 40,
      logger,
    });
    const source = new PassThrough();
    const read = readAll(watch.track(source, BLOB));
    source.write(Buffer.alloc(3000));
    await sleep(100);
    source.end(Buffer.alloc(2000));
    assert.equal(await read, 5000);

    const progress = lines.filter((l) => l.msg === 'pull progress');
    assert.ok(progress.length > 0, 'no progress logged');
    const first = progress[0];
    assert.equal(first?.image, 'r.test/app:1');
    assert.equal(first?.layer, BLOB.digest);
    assert.equal(first?.bytes, 3000);
    assert.equal(first?.total, BLOB.size);
    assert.equal(typeof first?.bytesPerSecond, 'number');
  });

  it('cancels a download that receives nothing for the stall timeout', async () => {
    const { logger } = capturingLogger('info');
    const watch = new TransferWatch({ image: 'r.test/app:1', stallTimeoutMs: 80, logger });
    const source = new PassThrough();
    const read = readAll(watch.track(source, BLOB));
    source.write(Buffer.alloc(1234));
    await assert.rejects(read, (err: unknown) => {
      assert.ok(err instanceof PullStalledError, String(err));
      assert.match(err.message, /r\.test\/app:1 stalled/);
      assert.ok(err.message.includes(`${BLOB.digest} at 1234 of 10000 bytes`), err.message);
      return true;
    });
    assert.equal(source.destroyed, true, 'the source is left open');
  });

  it('keeps a download that moves, however long it takes in total', async () => {
    const { logger } = capturingLogger('info');
    // 480 ms in total, more than the stall timeout, but data every 30 ms: room for a busy machine
    // to run the writer late.
    const watch = new TransferWatch({ image: 'r.test/app:1', stallTimeoutMs: 300, logger });
    const source = new PassThrough();
    const read = readAll(watch.track(source, BLOB));
    for (let i = 0; i < 16; i++) {
      source.write(Buffer.alloc(100));
      await sleep(30);
    }
    source.end();
    assert.equal(await read, 1600);
    // Nothing is running now: the timer must not fire for an idle pull.
    await sleep(150);
  });
});
