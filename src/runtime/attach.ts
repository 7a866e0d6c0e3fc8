/**
 * Attach: a client joins a running container's own stdio, which its conmon holds. conmon listens
 * on a SOCK_SEQPACKET unix socket (`attach` in the container's socket dir); each packet it sends
 * is one chunk of output led by a byte naming the pipe (2 stdout, 3 stderr), and what a client
 * writes reaches the container's stdin. Several clients may attach at once; leaving changes
 * nothing for the container. Node has no SEQPACKET sockets, hence node-unix-socket.
 */
import { closeSync, openSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { FailedPreconditionError, errorMessage } from '../errors.js';

export interface AttachIo {
  stdin: Readable | null;
  stdout: Writable | null;
  stderr: Writable | null;
  signal: AbortSignal;
}

export interface AttachOptions {
  /** The container's dir in conmon's socket dir (a link to its bundle), holding `attach`. */
  socketDir: string;
  /**
   * When the client's stdin ends: true half-closes the container's stdin (the container's
   * stdin_once, without a terminal); false ends the attach.
   */
  closeStdinOnEnd: boolean;
}

// conmon numbers its pipes from 1 (stdin 1, stdout 2, stderr 3), as CRI-O reads them.
const PIPE_STDOUT = 2;
const PIPE_STDERR = 3;
/** conmon reads client input in buffers of this size; a longer packet would be cut. */
const INPUT_PACKET = 8192;
/**
 * The socket cannot be paused, so output a client is not taking is buffered up to this much; past
 * it the client is too slow and its attach is ended rather than berthd's memory grown.
 */
const MAX_PENDING_OUTPUT = 16 * 1024 * 1024;

/**
 * Resolves when the attach is over: the container's output ended, the client went away, or the
 * client's stdin ended without closeStdinOnEnd.
 */
export async function attachToMonitor(opts: AttachOptions, io: AttachIo): Promise<void> {
  // Loaded by the first attach: a berthd nobody attaches to does not hold it.
  const { SeqpacketSocket } = await import('node-unix-socket');
  return new Promise((resolve, reject) => {
    const socket = new SeqpacketSocket();
    // A unix socket path is at most 107 bytes; the container's dir, opened, has a short name.
    let dirFd: number;
    try {
      dirFd = openSync(opts.socketDir, 'r');
    } catch (err) {
      reject(new FailedPreconditionError(`container has no attach socket: ${errorMessage(err)}`));
      return;
    }
    let settled = false;
    let pending = 0;
    const finish = (err?: Error): void => {
      if (settled) return;
      settled = true;
      io.signal.removeEventListener('abort', onAbort);
      io.stdin?.off('data', onInput);
      io.stdin?.off('end', onInputEnd);
      socket.destroy();
      if (err) reject(err);
      else resolve();
    };
    const onAbort = (): void => finish();
    io.signal.addEventListener('abort', onAbort, { once: true });

    const writeOut = (target: Writable | null, data: Buffer): void => {
      if (!target || target.destroyed || data.length === 0) return;
      pending += data.length;
      target.write(data, () => {
        pending -= data.length;
      });
      if (pending > MAX_PENDING_OUTPUT) finish(new Error('the client reads output too slowly; attach ended'));
    };
    socket.on('data', (packet: Buffer) => {
      const pipe = packet[0];
      const data = packet.subarray(1);
      if (pipe === PIPE_STDOUT) writeOut(io.stdout, data);
      else if (pipe === PIPE_STDERR) writeOut(io.stderr, data);
    });
    socket.on('end', () => finish());
    socket.on('close', () => finish());
    socket.on('error', (err: Error) => finish(new FailedPreconditionError(`attach socket: ${err.message}`)));

    const onInput = (chunk: Buffer): void => {
      for (let at = 0; at < chunk.length; at += INPUT_PACKET) {
        const piece = chunk.subarray(at, at + INPUT_PACKET);
        io.stdin?.pause();
        try {
          socket.write(piece, 0, piece.length, () => {
            if (!settled) io.stdin?.resume();
          });
        } catch (err) {
          finish(new FailedPreconditionError(`attach socket: ${errorMessage(err)}`));
          return;
        }
      }
    };
    // The client closed its stdin. With stdin_once (and no terminal) the container's stdin is
    // closed and its output stays attached until it ends, as kubectl expects of a process that
    // reads to EOF; otherwise the session is over (the container's stdin stays open for the next
    // attach), as containerd and CRI-O do: else `kubectl attach -i` with its stdin closed hangs.
    const onInputEnd = (): void => {
      if (settled) return;
      if (opts.closeStdinOnEnd) socket.end();
      else finish();
    };

    try {
      socket.connect(`/proc/self/fd/${dirFd}/attach`, () => {
        closeFd(dirFd);
        io.stdin?.on('data', onInput);
        io.stdin?.on('end', onInputEnd);
      });
    } catch (err) {
      closeFd(dirFd);
      finish(new FailedPreconditionError(`cannot attach: ${errorMessage(err)}`));
    }
  });
}

function closeFd(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // Already closed.
  }
}
