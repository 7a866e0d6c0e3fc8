/**
 * What the streaming server hands to the runtime, and what the runtime implements: plain Node
 * streams and an abort signal, with no trace of SPDY or WebSocket.
 */
import { EventEmitter } from 'node:events';
import type { Duplex, Readable, Writable } from 'node:stream';

export interface TerminalSize {
  width: number;
  height: number;
}

/**
 * The client's terminal sizes. Clients send their size as soon as the session opens, before the
 * process has a terminal: `current` keeps the latest, for the terminal to start at.
 */
export class TerminalResizes extends EventEmitter<{ resize: [TerminalSize] }> {
  current: TerminalSize | null = null;

  push(size: TerminalSize): void {
    this.current = size;
    this.emit('resize', size);
  }
}

/** One exec or attach session's I/O, as negotiated with the client. */
export interface StreamIo {
  /** null when the client sends no input. Ends when the client closes its stdin. */
  stdin: Readable | null;
  stdout: Writable | null;
  /** null when not requested, and always with a terminal (its output is all on stdout). */
  stderr: Writable | null;
  tty: boolean;
  /** Emits 'resize' with a TerminalSize each time the client's terminal changes size. */
  resize: TerminalResizes;
  /** Aborted when the client went away: whatever serves the session must stop and clean up. */
  signal: AbortSignal;
}

export interface ExecStreamRequest {
  containerId: string;
  cmd: string[];
  tty: boolean;
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
}

export interface AttachStreamRequest {
  containerId: string;
  tty: boolean;
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
}

export interface PortForwardStreamRequest {
  podSandboxId: string;
  /** Ports the client may forward; empty means any (SPDY clients name the port per stream). */
  ports: number[];
}

/** How an exec ended: the command's exit code (128+n for a signal, as runc reports it). */
export interface ExecOutcome {
  exitCode: number;
}

/** The runtime side of the streaming server. Errors thrown are reported on the error stream. */
export interface StreamRuntime {
  exec(req: ExecStreamRequest, io: StreamIo): Promise<ExecOutcome>;
  attach(req: AttachStreamRequest, io: StreamIo): Promise<void>;
  /** Connects to `port` on localhost inside the pod's network; the Duplex is that connection. */
  dialPod(podSandboxId: string, port: number, signal: AbortSignal): Promise<Duplex>;
}

export type StreamRequest =
  | ({ kind: 'exec' } & ExecStreamRequest)
  | ({ kind: 'attach' } & AttachStreamRequest)
  | ({ kind: 'portforward' } & PortForwardStreamRequest);
