/** berthd's own log (pino JSON lines on its stderr) as tests read it. */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { pino, type Level, type Logger } from 'pino';
import type { TestDaemon } from './daemon.js';
import { waitFor } from './wait.js';

/** One pino line of berthd's stderr. */
export type LogEntry = Record<string, unknown> & { msg?: string };

/** The JSON lines of `text`; anything else (a line cut by a kill, a stray print) is skipped. */
export function parseLog(text: string): LogEntry[] {
  const entries: LogEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      entries.push(JSON.parse(line) as LogEntry);
    } catch {
      // A line cut by a kill: not a log entry.
    }
  }
  return entries;
}

/** Some entry has message `msg` and every one of `fields` with the same (===) value. */
export function assertLogged(log: LogEntry[], msg: string, fields: Record<string, unknown> = {}): void {
  const found = log.some((e) => e.msg === msg && Object.entries(fields).every(([k, v]) => e[k] === v));
  const wanted = JSON.stringify({ msg, ...fields });
  assert.ok(found, `no log line ${wanted} in:\n${log.map((e) => JSON.stringify(e)).join('\n')}`);
}

/**
 * Starts the daemon and returns what it logged during this start-up (its recovery included), and
 * the time just before it was started, in ns since the epoch. The wait for this start's own
 * "serving CRI" is why: after a kill -9 the old socket file is still there and `output` already
 * holds an earlier one.
 */
export async function startAndLog(
  d: TestDaemon,
  env: Record<string, string> = {},
): Promise<{ log: LogEntry[]; at: bigint }> {
  const mark = d.output.length;
  const at = BigInt(Date.now()) * 1_000_000n;
  await d.start(env);
  await waitFor(async () => d.output.includes('"serving CRI"', mark), 30_000);
  return { log: parseLog(d.output.slice(mark)), at };
}

/** A logger for a unit test, whose lines (parsed) the test reads back. */
export function capturingLogger(level: Level = 'debug'): { logger: Logger; lines: LogEntry[] } {
  const lines: LogEntry[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString('utf8')) as LogEntry);
      done();
    },
  });
  return { logger: pino({ level }, sink), lines };
}
