import { createHash } from 'node:crypto';
import { resolve } from 'node:path';
import type { Readable } from 'node:stream';
import type { Logger } from '../log.js';
import { LayerApplier } from './apply.js';
import { openDecompressor, type LayerCompression } from './decompress.js';
import { UnpackError, asUnpackError } from './errors.js';
import { TarReader } from './tar-reader.js';

export type { LayerCompression } from './decompress.js';
export { detectCompression } from './detect.js';
export { RefusedEntryError, UnpackError } from './errors.js';

export interface UnpackOptions {
  /** Deadline for the whole unpack; none when absent (the source is then trusted to end or fail). */
  timeoutMs?: number;
  logger?: Logger;
}

export interface UnpackResult {
  /** "sha256:<hex>" of the uncompressed tar stream: the layer's diff ID. */
  diffId: string;
  /** Bytes in the uncompressed tar stream. */
  size: number;
}

/** Ceiling for a single host program (mknod, setfattr) when the unpack itself has no deadline. */
const HOST_TIMEOUT_MS = 60_000;

/**
 * Unpacks one layer blob into `targetDir` (an existing, normally empty directory) as an overlayfs
 * lower layer, computing its diff ID on the way. Rejects with UnpackError on a corrupt or hostile
 * tar, a failed decompression, a source stream error or the timeout; by then the zstd child, if
 * any, is gone. What was written to `targetDir` stays: unpack into a temporary dir and rename.
 */
export async function unpackLayer(
  source: Readable,
  compression: LayerCompression,
  targetDir: string,
  opts: UnpackOptions = {},
): Promise<UnpackResult> {
  const started = Date.now();
  const deadline = opts.timeoutMs === undefined ? Infinity : started + opts.timeoutMs;
  const decompressor = openDecompressor(source, compression);
  const hash = createHash('sha256');
  let size = 0;
  async function* hashed(): AsyncGenerator<Buffer, void, undefined> {
    for await (const chunk of decompressor.output as AsyncIterable<Buffer>) {
      hash.update(chunk);
      size += chunk.length;
      yield chunk;
    }
  }
  const reader = new TarReader(hashed());
  const applier = new LayerApplier(resolve(targetDir), {
    logger: opts.logger,
    hostTimeoutMs: () => {
      const left = deadline - Date.now();
      if (left <= 0) throw timeoutError(opts.timeoutMs);
      return Math.min(left, HOST_TIMEOUT_MS);
    },
  });

  let timedOut = false;
  const timer =
    opts.timeoutMs === undefined
      ? undefined
      : setTimeout(() => {
          timedOut = true;
          // Wakes a reader waiting on a stalled source; the error then unwinds the unpack.
          decompressor.output.destroy(timeoutError(opts.timeoutMs));
        }, opts.timeoutMs);
  try {
    let entries = 0;
    for (let entry = await reader.next(); entry !== undefined; entry = await reader.next()) {
      await applier.apply(entry, reader.body());
      entries++;
    }
    // The diff ID covers the whole stream, including the padding after the end-of-archive blocks.
    await reader.drain();
    await decompressor.finished();
    await applier.finish();
    const diffId = `sha256:${hash.digest('hex')}`;
    opts.logger?.debug({ diffId, entries, bytes: size, ms: Date.now() - started }, 'unpack: layer applied');
    return { diffId, size };
  } catch (err) {
    const reason = err instanceof Error ? err : new Error(String(err));
    // The decoder's own failure (truncated gzip, zstd error, source error) explains a tar that
    // "ends early" better than the tar reader can.
    const cause = await decompressor.abort(reason);
    // Metadata still in flight finishes (or fails) now, not after the caller has moved on.
    await applier.settle();
    if (timedOut) throw timeoutError(opts.timeoutMs);
    throw cause ?? asUnpackError(err, 'unpacking layer');
  } finally {
    clearTimeout(timer);
  }
}

function timeoutError(timeoutMs: number | undefined): UnpackError {
  return new UnpackError(`unpacking the layer timed out after ${timeoutMs ?? 0} ms`);
}
