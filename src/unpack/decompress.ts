import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { pipeline, type Readable, type Writable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { beforeDeadline } from '../kit/deadline.js';
import { checkSpawned } from '../process/spawn.js';
import { UnpackError } from './errors.js';

/**
 * The zstd CLI, not a JavaScript decoder: the pure-JS decoder tried (fzstd 0.1.1) is 2-3 times
 * slower, degrades badly on long-window frames (`zstd --long`: 15x slower) and produced wrong
 * output for a frame with a 2 GiB window. The CLI is the reference decoder, checks the frame
 * checksums, and decodes in parallel with extraction.
 */
const ZSTD = 'zstd';
/**
 * zstd's own default window limit (windowLog 27), made explicit: it covers every compression
 * level including --ultra -22 and plain --long, and caps what a hostile frame can make it allocate.
 */
const ZSTD_MAX_WINDOW = '--memory=128MB';
const STDERR_KEEP = 4096;
/** How long a zstd that has closed its output gets to report its exit status before it is killed. */
const ZSTD_EXIT_GRACE_MS = 5000;

/** Compression of a layer blob, from its media type (and, when that is vague, its magic bytes). */
export type LayerCompression = 'gzip' | 'zstd' | 'none';

/** The uncompressed tar bytes of a layer blob, and control over what produces them. */
export interface Decompressor {
  /** The uncompressed bytes. Errors of the source or the decoder surface here as stream errors. */
  readonly output: Readable;
  /**
   * Resolves once the decoder has seen the whole blob and found it intact (gzip CRC and length,
   * zstd exit status). Call after `output` has been read to its end.
   */
  finished(): Promise<void>;
  /**
   * Stops the source and the decoder, and waits until a zstd child is gone. Returns the source's
   * or decoder's own failure if one happened before the stop: when extraction fails on a truncated
   * or corrupt stream, that is the root cause worth reporting.
   */
  abort(reason: Error): Promise<UnpackError | undefined>;
}

export function openDecompressor(source: Readable, compression: LayerCompression): Decompressor {
  switch (compression) {
    case 'none':
      return plain(source);
    case 'gzip':
      return gzip(source);
    case 'zstd':
      return zstd(source);
  }
}

function plain(source: Readable): Decompressor {
  return {
    output: source,
    finished: async () => {
      if (source.errored) throw streamError(source.errored, 'reading layer');
    },
    abort: async (reason) => {
      const own = source.errored;
      source.destroy(reason);
      return own ? streamError(own, 'reading layer') : undefined;
    },
  };
}

function gzip(source: Readable): Decompressor {
  // 64 KiB output chunks instead of the default 16 KiB: fewer trips through the tar reader.
  const gunzip = createGunzip({ chunkSize: 64 * 1024 });
  const done = new Promise<void>((resolve, reject) => {
    // pipeline() destroys gunzip with a source error, so whoever reads gunzip sees that error too.
    pipeline(source, gunzip, (err) => {
      if (!err) return resolve();
      reject(streamError(err, source.errored === err ? 'reading layer' : 'gzip'));
    });
  });
  // Reported through finished() or abort(); this only keeps an early rejection from being "unhandled".
  done.catch(() => undefined);
  return {
    output: gunzip,
    finished: () => done,
    abort: async (reason) => {
      // `errored` is set before anyone reacts to an error, so it cannot be our own destroy() below.
      // pipeline() hands a source error on to gunzip: check the source first to name it rightly.
      const own = source.errored
        ? streamError(source.errored, 'reading layer')
        : gunzip.errored && streamError(gunzip.errored, 'gzip');
      source.destroy(reason);
      gunzip.destroy(reason);
      return own ?? undefined;
    },
  };
}

type ZstdChild = ChildProcessByStdio<Writable, Readable, Readable>;

function zstd(source: Readable): Decompressor {
  const child: ZstdChild = checkSpawned(
    spawn(ZSTD, ['-d', '-c', '-q', ZSTD_MAX_WINDOW], { stdio: ['pipe', 'pipe', 'pipe'] }),
    ZSTD,
  );
  let spawnError: Error | undefined;
  let sourceError: Error | undefined;
  let killedByUs = false;
  let aborting = false;
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (s: string) => {
    if (stderr.length < STDERR_KEEP) stderr += s;
  });
  // 'close' also follows a failed spawn, so this always settles. (events.once() would reject on
  // 'error' instead, unhandled until someone awaits it.)
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => resolve([code, signal])),
  );
  child.once('error', (err: NodeJS.ErrnoException) => (spawnError ??= err));
  let outputEnded = false;
  child.stdout.once('end', () => (outputEnded = true));

  const kill = (): void => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    killedByUs = true;
    child.kill('SIGKILL');
  };

  pipeline(source, child.stdin, (err) => {
    // EPIPE: zstd quit reading, and its exit status says why. After abort(): our own doing.
    if (!err || aborting || (err as NodeJS.ErrnoException).code === 'EPIPE') return;
    sourceError ??= err;
    // zstd may see a clean end at a frame boundary: the reader must not take that for the whole layer.
    child.stdout.destroy(streamError(err, 'reading layer'));
    kill();
  });

  const failure = async (): Promise<UnpackError | undefined> => {
    const [code, signal] = await exited;
    if (spawnError) {
      const err = spawnError as NodeJS.ErrnoException;
      const problem =
        err.code === 'ENOENT' ? 'the zstd program is not installed (needed for zstd layers)' : err.message;
      return new UnpackError(`zstd: ${problem}`, undefined, { cause: err });
    }
    if (sourceError) return streamError(sourceError, 'reading layer');
    if (code === 0 || killedByUs) return undefined;
    const how = signal ? `was killed by ${signal}` : `exited with code ${code ?? 'unknown'}`;
    const said = stderr.trim();
    return new UnpackError(`zstd ${how}${said ? `: ${said}` : ''}`);
  };

  return {
    output: child.stdout,
    finished: async () => {
      const err = await failure();
      if (err) throw err;
    },
    abort: async (reason) => {
      // A zstd that closed its output is exiting on its own (truncated input, say): let it tell why.
      if (outputEnded) await beforeDeadline(exited, ZSTD_EXIT_GRACE_MS, undefined, { ref: false });
      // A source error whose pipeline callback has not run yet is still the source's own failure.
      if (source.errored) sourceError ??= source.errored;
      aborting = true;
      kill();
      source.destroy(reason);
      child.stdout.destroy(reason);
      return failure();
    },
  };
}

function streamError(err: Error, context: string): UnpackError {
  if (err instanceof UnpackError) return err;
  return new UnpackError(`${context}: ${err.message}`, undefined, { cause: err });
}
