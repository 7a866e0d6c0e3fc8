/**
 * The worker thread that parses CDI spec files for src/cdi/parser.ts: one file per message, the
 * spec or the problem posted back. A file that makes the parse run long or big costs this thread,
 * which its parent ends, and never berthd's event loop or heap.
 */
import { parentPort } from 'node:worker_threads';
import { CdiSpecError, parseCdiSpec } from './spec.js';
import type { ParseReply, ParseRequest } from './parser.js';

parentPort?.on('message', ({ file, text }: ParseRequest) => {
  let reply: ParseReply;
  try {
    reply = { spec: parseCdiSpec(file, text) };
  } catch (err) {
    reply = { problem: err instanceof CdiSpecError ? err.problem : (err as Error).message };
  }
  parentPort?.postMessage(reply);
});
