import {
  status,
  type handleServerStreamingCall,
  type handleUnaryCall,
  type sendUnaryData,
  type ServerUnaryCall,
  type ServerWritableStream,
} from '@grpc/grpc-js';
import { errorMessage, UnimplementedError } from '../errors.js';
import type { Logger } from '../log.js';
import { MalformedRequest } from './loader.js';
import type { Decoded } from './messages.js';
import { toServiceError } from './status.js';

/** What a handler knows of its call besides the request. */
export interface CallContext {
  /** Aborted when the client cancels the call or its deadline passes: work for it can stop. */
  signal: AbortSignal;
}

/** A unary RPC in domain terms: request object in, response object out, typed errors thrown. */
export type UnaryHandler<Req, Res> = (request: Req, context: CallContext) => Promise<Res>;

/**
 * The unary rpcs of a generated service handler interface (`RuntimeServiceHandlers`), each as the
 * UnaryHandler of its own request and response. A module's table `satisfies` it, so a misspelled
 * rpc or a wrong request type does not compile.
 */
export type UnaryHandlers<Service> = {
  [
    Rpc in keyof Service as Rpc extends string ? (string extends Rpc ? never : Rpc) : never
  ]?: Service[Rpc] extends handleUnaryCall<infer Req, infer Res> ? UnaryHandler<Decoded<Req>, Res> : never;
};

/**
 * A server-streaming RPC in domain terms: the messages to send, in order, as an async iterable. It
 * ends the stream by finishing and fails it by throwing a typed error. When the client goes away,
 * the context's signal aborts: a handler waiting for its next message must finish then.
 */
export type StreamHandler<Req, Res> = (request: Req, context: CallContext) => AsyncIterable<Res>;

/** As UnaryHandlers, for the server-streaming rpcs of a generated service handler interface. */
export type StreamHandlers<Service> = {
  [
    Rpc in keyof Service as Rpc extends string ? (string extends Rpc ? never : Rpc) : never
  ]?: Service[Rpc] extends handleServerStreamingCall<infer Req, infer Res>
    ? StreamHandler<Decoded<Req>, Res>
    : never;
};

/** How one call ended: `code` is the gRPC status name (OK, NOT_FOUND, CANCELLED, ...). */
export interface RpcDone {
  service: string;
  method: string;
  code: string;
  seconds: number;
}

/**
 * Turns domain handlers into grpc-js ones: logging, cancellation, errors mapped to status codes
 * (src/cri/status.ts), and every call's end told to `onDone`, the same for every rpc of both services.
 */
export class RpcEdge {
  constructor(
    private readonly logger: Logger,
    private readonly onDone: (done: RpcDone) => void = () => {},
  ) {}

  unary<Req, Res>(handler: UnaryHandler<Req, Res>): handleUnaryCall<Req, Res> {
    return (call, callback) => this.serve(call, handler, callback);
  }

  /**
   * An rpc not served: kubelet relies on UNIMPLEMENTED naming the rpc to fall back (as it does from
   * UpdatePodSandboxResources on older runtimes). berth serves every rpc of its proto today.
   */
  unimplemented<Req, Res>(): handleUnaryCall<Req, Res> {
    return (call, callback) => this.serve(call, refuse(call), callback);
  }

  /**
   * Writes what the handler yields as the client takes it (a slow client holds the handler back
   * rather than filling berthd's memory), and ends the stream with OK or the error's status.
   */
  serverStream<Req, Res>(handler: StreamHandler<Req, Res>): handleServerStreamingCall<Req, Res> {
    return (call) => {
      this.stream(call, handler).catch((err: unknown) => this.logger.error({ err }, 'stream failed'));
    };
  }

  private async stream<Req, Res>(
    call: ServerWritableStream<Req, Res>,
    handler: StreamHandler<Req, Res>,
  ): Promise<void> {
    const { rpc, elapsedMs, done } = this.begin(call);
    if (call.request instanceof MalformedRequest) {
      this.logger.warn({ rpc, err: call.request.error.message }, 'malformed request');
      done(status.INVALID_ARGUMENT);
      call.emit('error', toServiceError(call.request.error));
      return;
    }
    const cancelled = new AbortController();
    call.once('cancelled', () => cancelled.abort(new Error('the client cancelled the call')));
    this.logger.debug({ rpc }, 'stream opened');
    let sent = 0;
    try {
      const messages = handler(call.request, { signal: cancelled.signal })[Symbol.asyncIterator]();
      for (;;) {
        const next = await messages.next();
        if (next.done || cancelled.signal.aborted) break;
        sent++;
        if (!call.write(next.value)) await drained(call, cancelled.signal);
      }
      if (cancelled.signal.aborted) {
        // Lets the handler's finally blocks run; nothing is pending on it any more.
        await messages.return?.();
        this.logger.debug({ rpc, sent, ms: elapsedMs() }, 'stream cancelled by the client');
        done(status.CANCELLED);
        return;
      }
      this.logger.debug({ rpc, sent, ms: elapsedMs() }, 'stream ended');
      done(status.OK);
      call.end();
    } catch (err) {
      const serviceError = toServiceError(err);
      this.logger[levelOf(serviceError.code)](
        { rpc, sent, ms: elapsedMs(), code: status[serviceError.code], err: serviceError.message },
        'stream failed',
      );
      done(cancelled.signal.aborted ? status.CANCELLED : serviceError.code);
      if (!cancelled.signal.aborted) call.emit('error', serviceError);
    }
  }

  private serve<Req, Res>(
    // A streaming call is a unary one that can also write.
    call: ServerUnaryCall<Req, unknown>,
    handler: UnaryHandler<Req, Res>,
    reply: sendUnaryData<Res>,
  ): void {
    const { rpc, elapsedMs, done } = this.begin(call);
    // loader.ts hands over a request it did not decode as a MalformedRequest.
    if (call.request instanceof MalformedRequest) {
      this.logger.warn({ rpc, err: call.request.error.message }, 'malformed request');
      done(status.INVALID_ARGUMENT);
      reply(toServiceError(call.request.error));
      return;
    }
    const cancelled = new AbortController();
    call.once('cancelled', () => cancelled.abort(new Error('the client cancelled the call')));
    handler(call.request, { signal: cancelled.signal }).then(
      (response) => {
        this.logger.debug({ rpc, ms: elapsedMs() }, 'rpc');
        done(status.OK);
        reply(null, response);
      },
      (err: unknown) => {
        // A cancelled call (the client gave up, or berthd's shutdown cut it short) ends however its
        // handler noticed; what that handler says about it is no failure of berth's.
        if (cancelled.signal.aborted) {
          this.logger.debug({ rpc, ms: elapsedMs(), err: errorMessage(err) }, 'rpc cancelled');
          done(status.CANCELLED);
          reply(toServiceError(err));
          return;
        }
        const serviceError = toServiceError(err);
        this.logger[levelOf(serviceError.code)](
          { rpc, ms: elapsedMs(), code: status[serviceError.code], err: serviceError.message },
          'rpc failed',
        );
        done(serviceError.code);
        reply(serviceError);
      },
    );
  }

  /** The call's name for the log, its clock, and the one place its end is reported. */
  private begin(call: Pick<ServerUnaryCall<unknown, unknown>, 'getPath'>): {
    rpc: string;
    elapsedMs: () => number;
    done: (code: status) => void;
  } {
    const { service, method } = rpcOf(call);
    const started = process.hrtime.bigint();
    const elapsedMs = (): number => Number(process.hrtime.bigint() - started) / 1e6;
    const done = (code: status): void =>
      this.onDone({ service, method, code: status[code], seconds: elapsedMs() / 1000 });
    return { rpc: method, elapsedMs, done };
  }
}

/**
 * Runtime failures are errors; the client's own mistakes (bad input, unknown ids) warnings; an rpc
 * berth does not serve is a question kubelet asks on purpose before falling back.
 */
function levelOf(code: status): 'error' | 'warn' | 'debug' {
  if (code === status.INTERNAL || code === status.UNKNOWN) return 'error';
  return code === status.UNIMPLEMENTED ? 'debug' : 'warn';
}

/** From the call's path, "/runtime.v1.RuntimeService/Version". */
function rpcOf(call: Pick<ServerUnaryCall<unknown, unknown>, 'getPath'>): {
  service: string;
  method: string;
} {
  const [, qualified = '', method = ''] = call.getPath().split('/');
  return { service: qualified.slice(qualified.lastIndexOf('.') + 1), method };
}

/** Until the client has taken what was written, or is gone. */
function drained<Req, Res>(call: ServerWritableStream<Req, Res>, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      call.off('drain', done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    call.once('drain', done);
    signal.addEventListener('abort', done, { once: true });
  });
}

function refuse(call: Pick<ServerUnaryCall<unknown, unknown>, 'getPath'>): UnaryHandler<unknown, never> {
  const { service, method } = rpcOf(call);
  return async () => {
    throw new UnimplementedError(`${service}.${method} is not implemented by berth`);
  };
}
