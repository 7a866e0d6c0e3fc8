/**
 * CDI spec files parsed off the event loop, in a worker thread with a heap and time limit of its
 * own. A spec can be megabytes (a big node's inventory) and a hostile one can make the YAML parser
 * spend seconds and gigabytes; on berthd's thread either would stall every CRI call and keep the
 * heap it grew. The worker parses one file at a time; one that runs out of heap or time is ended,
 * the file refused naming why, and the next file gets a fresh worker. An idle worker ends soon, so
 * a node whose specs do not change holds none.
 */
import { Worker } from 'node:worker_threads';
import { CdiSpecError, type CdiSpec } from './spec.js';

export interface ParseRequest {
  file: string;
  text: string;
}

export type ParseReply = { spec: CdiSpec } | { problem: string };

/** Bounds of one file's parse: ten times what the biggest spec the size cap allows needs. */
export const PARSE_LIMITS = { heapMb: 256, timeoutMs: 10_000 } as const;
const IDLE_MS = 1000;

interface Job extends ParseRequest {
  done: (result: CdiSpec | CdiSpecError) => void;
}

export class CdiSpecParser {
  private readonly queue: Job[] = [];
  private worker: Worker | null = null;
  private busy = false;
  private idle: NodeJS.Timeout | null = null;

  constructor(private readonly limits: { heapMb: number; timeoutMs: number } = PARSE_LIMITS) {}

  parse(file: string, text: string): Promise<CdiSpec | CdiSpecError> {
    return new Promise((done) => {
      this.queue.push({ file, text, done });
      this.next();
    });
  }

  private next(): void {
    if (this.busy) return;
    const job = this.queue.shift();
    if (!job) {
      this.idle ??= setTimeout(() => this.stop(), IDLE_MS).unref();
      return;
    }
    if (this.idle) clearTimeout(this.idle);
    this.idle = null;
    this.busy = true;
    const worker = (this.worker ??= this.start());
    const finish = (result: CdiSpec | CdiSpecError, failed: boolean): void => {
      clearTimeout(timer);
      worker.off('message', onMessage);
      worker.off('error', onError);
      worker.off('exit', onExit);
      if (failed) this.stop();
      this.busy = false;
      job.done(result);
      this.next();
    };
    const onMessage = (reply: ParseReply): void =>
      finish('spec' in reply ? reply.spec : new CdiSpecError(job.file, reply.problem), false);
    const onError = (err: Error & { code?: string }): void => {
      const why =
        err.code === 'ERR_WORKER_OUT_OF_MEMORY'
          ? `needs more than ${this.limits.heapMb} MB to parse`
          : `could not be parsed: ${err.message}`;
      finish(new CdiSpecError(job.file, why), true);
    };
    const onExit = (code: number): void =>
      finish(new CdiSpecError(job.file, `could not be parsed: its parser exited with code ${code}`), true);
    const timer = setTimeout(
      () => finish(new CdiSpecError(job.file, `takes over ${this.limits.timeoutMs} ms to parse`), true),
      this.limits.timeoutMs,
    );
    worker.on('message', onMessage);
    worker.on('error', onError);
    worker.on('exit', onExit);
    worker.postMessage({ file: job.file, text: job.text } satisfies ParseRequest);
  }

  private start(): Worker {
    const worker = new Worker(new URL('./parse-worker.js', import.meta.url), {
      resourceLimits: { maxOldGenerationSizeMb: this.limits.heapMb, maxYoungGenerationSizeMb: 16 },
    });
    // A worker between jobs never keeps berthd from exiting; one ended late reports to no one.
    worker.unref();
    worker.on('error', () => undefined);
    return worker;
  }

  private stop(): void {
    if (this.idle) clearTimeout(this.idle);
    this.idle = null;
    const worker = this.worker;
    this.worker = null;
    void worker?.terminate();
  }
}
