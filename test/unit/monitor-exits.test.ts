/** ExitWatcher against exit files written the ways conmon (and cruder writers) write them. */
import { after, afterEach, beforeEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, open, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../src/log.js';
import { ExitWatcher, OOM_MARKER, type ExitRecord } from '../../src/runtime/exits.js';
import { parseCriLogLine } from '../harness/cri-log.js';

const logger = createLogger('silent');
const dirs: string[] = [];
let exitDir = '';
let persistDir = '';
let watcher: ExitWatcher;

beforeEach(async () => {
  const base = await mkdtemp(join(tmpdir(), 'berth-exits-'));
  dirs.push(base);
  exitDir = join(base, 'exits');
  persistDir = join(base, 'persist');
  watcher = new ExitWatcher(exitDir, logger, persistDir);
});

afterEach(() => watcher.close());

after(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

/** As conmon does it (g_file_set_contents): a temp file renamed into place. */
async function writeAtomically(id: string, text: string): Promise<void> {
  await mkdir(exitDir, { recursive: true });
  const tmp = join(exitDir, `${id}.Ab12Cd`);
  await writeFile(tmp, text);
  await rename(tmp, join(exitDir, id));
}

function collect(): { records: ExitRecord[]; next: (n: number) => Promise<void> } {
  const records: ExitRecord[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  const onExit = (rec: ExitRecord): void => {
    records.push(rec);
    for (const w of waiters.filter((x) => records.length >= x.n)) w.resolve();
  };
  void watcher.start(onExit);
  return {
    records,
    next: (n) =>
      records.length >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve })),
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

test('read: null without a file; code, mtime in ns and no OOM with one', async () => {
  assert.equal(await watcher.read('c1'), null);
  await writeAtomically('c1', '3');
  // Whole seconds: utimes takes floating-point seconds, so fractions would not round-trip exactly.
  await utimes(join(exitDir, 'c1'), 1714557600, 1714557600);
  const rec = await watcher.read('c1');
  assert.deepEqual(rec, { id: 'c1', exitCode: 3, finishedAt: '1714557600000000000', oomKilled: false });
  assert.equal(await watcher.read('../c1'), null, 'a path is not an id');
});

test('read: the OOM marker in the persist directory sets oomKilled', async () => {
  await writeAtomically('c2', '137');
  await mkdir(join(persistDir, 'c2'), { recursive: true });
  await writeFile(join(persistDir, 'c2', OOM_MARKER), '');
  const rec = await watcher.read('c2');
  assert.equal(rec?.exitCode, 137);
  assert.equal(rec?.oomKilled, true);
});

test('read: without a marker the witness is asked; its yes is kept as a marker', async () => {
  const asked: Array<[string, number]> = [];
  const witnessed = new ExitWatcher(exitDir, logger, persistDir, (id, code) => {
    asked.push([id, code]);
    return Promise.resolve(id === 'w1');
  });
  for (const id of ['w1', 'w2']) {
    await writeAtomically(id, '137');
    await mkdir(join(persistDir, id), { recursive: true });
  }
  assert.equal((await witnessed.read('w1'))?.oomKilled, true);
  assert.equal((await witnessed.read('w2'))?.oomKilled, false);
  assert.deepEqual(asked, [
    ['w1', 137],
    ['w2', 137],
  ]);
  // A later read (a restart's) says the same, though the witness may know nothing by then.
  assert.equal((await watcher.read('w1'))?.oomKilled, true);
  witnessed.close();
});

test('read: a witness that fails is no OOM kill, and the exit is still read', async () => {
  const failing = new ExitWatcher(exitDir, logger, persistDir, () => Promise.reject(new Error('no bus')));
  await writeAtomically('w3', '137');
  assert.deepEqual(await failing.read('w3'), {
    id: 'w3',
    exitCode: 137,
    finishedAt: (await stat(join(exitDir, 'w3'), { bigint: true })).mtimeNs.toString(),
    oomKilled: false,
  });
  failing.close();
});

test('read: a file created empty and written later is read once written', async () => {
  await mkdir(exitDir, { recursive: true });
  const fh = await open(join(exitDir, 'c3'), 'w');
  const pending = watcher.read('c3');
  await sleep(30);
  await fh.write('0');
  await fh.close();
  assert.equal((await pending)?.exitCode, 0);
});

test('read: garbage content is exit code -1, not a crash', async () => {
  await writeAtomically('c4', 'not a number');
  assert.equal((await watcher.read('c4'))?.exitCode, -1);
});

test('start reports files already there, then new ones, each once', async () => {
  await writeAtomically('old', '1');
  const { records, next } = collect();
  await next(1);
  assert.deepEqual(
    records.map((r) => [r.id, r.exitCode]),
    [['old', 1]],
  );
  await writeAtomically('new', '2');
  await next(2);
  // More events for the same file (touching it) must not report it again.
  const now = (await stat(join(exitDir, 'new'))).mtime;
  await utimes(join(exitDir, 'new'), now, now);
  await writeFile(join(exitDir, 'unrelated.tmp'), '9');
  await sleep(100);
  assert.deepEqual(
    records.map((r) => [r.id, r.exitCode]),
    [
      ['old', 1],
      ['new', 2],
    ],
  );
});

test('the watcher handles a non-atomic writer: created empty, then written', async () => {
  const { records, next } = collect();
  await sleep(20);
  const fh = await open(join(exitDir, 'slow'), 'w');
  await sleep(50);
  await fh.write('42');
  await fh.close();
  await next(1);
  assert.equal(records[0]?.exitCode, 42);
  assert.equal(records.length, 1);
});

test("conmon's temp files are not exits", async () => {
  const { records } = collect();
  await sleep(20);
  await writeFile(join(exitDir, 'c5.Xy12Zq'), '7');
  await sleep(100);
  assert.deepEqual(records, []);
});

test('wait: resolves when the file appears, or null on timeout', async () => {
  const started = Date.now();
  assert.equal(await watcher.wait('never', 80), null);
  assert.ok(Date.now() - started >= 70);

  const waiting = watcher.wait('later', 30_000);
  await sleep(30);
  await writeAtomically('later', '5');
  const rec = await waiting;
  assert.equal(rec?.exitCode, 5);
});

test('wait: a file already there resolves at once', async () => {
  await writeAtomically('done', '0');
  const started = Date.now();
  assert.equal((await watcher.wait('done', 60_000))?.exitCode, 0);
  // Not the minute it would wait for a file that never comes.
  assert.ok(Date.now() - started < 10_000);
});

test('forget removes the exit file and the persist directory, and re-arms the report', async () => {
  const { records, next } = collect();
  // conmon's order: the OOM marker, then the exit file.
  await mkdir(join(persistDir, 'gone'), { recursive: true });
  await writeFile(join(persistDir, 'gone', OOM_MARKER), '');
  await writeAtomically('gone', '1');
  await next(1);
  await watcher.forget('gone');
  assert.equal(await watcher.read('gone'), null);
  await assert.rejects(stat(join(persistDir, 'gone')), { code: 'ENOENT' });
  await watcher.forget('gone');
  // The same id may run again; its new exit is a new report.
  await writeAtomically('gone', '4');
  await next(2);
  assert.deepEqual(
    records.map((r) => [r.id, r.exitCode, r.oomKilled]),
    [
      ['gone', 1, true],
      ['gone', 4, false],
    ],
  );
});

test('close resolves pending waits with null', async () => {
  const waiting = watcher.wait('x', 60_000);
  await sleep(10);
  watcher.close();
  assert.equal(await waiting, null);
});

test('parseCriLogLine', () => {
  assert.deepEqual(parseCriLogLine('2024-05-01T10:00:00.123456789+02:00 stdout F hello world'), {
    timestamp: '2024-05-01T10:00:00.123456789+02:00',
    stream: 'stdout',
    partial: false,
    message: 'hello world',
  });
  assert.deepEqual(parseCriLogLine('2024-05-01T10:00:00.1Z stderr P '), {
    timestamp: '2024-05-01T10:00:00.1Z',
    stream: 'stderr',
    partial: true,
    message: '',
  });
  assert.equal(parseCriLogLine('2024-05-01T10:00:00Z stdin F x'), null);
  assert.equal(parseCriLogLine('yesterday stdout F x'), null);
  assert.equal(parseCriLogLine('2024-05-01T10:00:00Z stdout X x'), null);
  assert.equal(parseCriLogLine(''), null);
});
