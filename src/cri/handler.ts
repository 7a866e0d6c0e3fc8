import {
  status,
  type handleServerStreamingCall,
  type handleUnaryCall,
  type sendUnaryData,
  type ServerUnaryCall,
} from '@grpc/grpc-js';
import { InvalidArgumentError, UnimplementedError } from '../errors.js';
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
 * Turns domain handlers into grpc-js ones: logging, cancellation, and errors mapped to status codes
 * (src/cri/status.ts), the same for every rpc of both services.
 */
export class RpcEdge {
  constructor(private readonly logger: Logger) {}

  unary<Req, Res>(handler: UnaryHandler<Req, Res>): handleUnaryCall<Req, Res> {
    return (call, callback) => this.serve(call, handler, callback);
  }

  /** kubelet relies on UNIMPLEMENTED naming the rpc to fall back (e.g. from the Stream* lists). */
  unimplemented<Req, Res>(): handleUnaryCall<Req, Res> {
    return (call, callback) => this.serve(call, refuse(call), callback);
  }

  unimplementedStream<Req, Res>(): handleServerStreamingCall<Req, Res> {
    return (call) => this.serve(call, refuse(call), (err) => (err ? call.emit('error', err) : call.end()));
  }

  private serve<Req, Res>(
    // A streaming call is a unary one that can also write.
    call: ServerUnaryCall<Req, unknown>,
    handler: UnaryHandler<Req, Res>,
    reply: sendUnaryData<Res>,
  ): void {
    const rpc = rpcOf(call).method;
    const started = process.hrtime.bigint();
    const elapsedMs = (): number => Number(process.hrtime.bigint() - started) / 1e6;
    // loader.ts hands over a request whose bytes did not decode as a MalformedRequest.
    if (call.request instanceof MalformedRequest) {
      this.logger.warn({ rpc, err: call.request.reason }, 'malformed request');
      reply(toServiceError(malformed(call.request)));
      return;
    }
    const cancelled = new AbortController();
    call.once('cancelled', () => cancelled.abort(new Error('the client cancelled the call')));
    handler(call.request, { signal: cancelled.signal }).then(
      (response) => {
        this.logger.debug({ rpc, ms: elapsedMs() }, 'rpc');
        reply(null, response);
      },
      (err: unknown) => {
        const serviceError = toServiceError(err);
        this.logger[levelOf(serviceError.code)](
          { rpc, ms: elapsedMs(), code: status[serviceError.code], err: serviceError.message },
          'rpc failed',
        );
        reply(serviceError);
      },
    );
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

function refuse(call: Pick<ServerUnaryCall<unknown, unknown>, 'getPath'>): UnaryHandler<unknown, never> {
  const { service, method } = rpcOf(call);
  return async () => {
    throw new UnimplementedError(`${service}.${method} is not implemented by berth`);
  };
}

function malformed(req: MalformedRequest): InvalidArgumentError {
  return new InvalidArgumentError('request', `is not a valid ${req.message}: ${req.reason}`);
}
