import {
  status,
  type ServerUnaryCall,
  type ServerWritableStream,
  type ServiceDefinition,
  type UntypedServiceImplementation,
  type sendUnaryData,
} from '@grpc/grpc-js';
import { InvalidArgumentError, UnimplementedError } from '../errors.js';
import type { Logger } from '../log.js';
import { MalformedRequest } from './loader.js';
import { toServiceError } from './status.js';

/** What a handler knows of its call besides the request. */
export interface CallContext {
  /** Aborted when the client cancels the call or its deadline passes: work for it can stop. */
  signal: AbortSignal;
}

/** A unary RPC in domain terms: request object in, response object out, typed errors thrown. */
export type UnaryHandler<Req, Res> = (request: Req, context: CallContext) => Promise<Res>;

/** Keyed by rpc name; `never` accepts a handler of any request type, each checked in its own module. */
export type UnaryTable = Record<string, UnaryHandler<never, unknown>>;

/**
 * Builds a grpc-js implementation for every rpc of a service: the ones in `handlers` are wrapped with
 * logging and error mapping; every other rpc answers UNIMPLEMENTED naming itself, which kubelet
 * relies on to fall back (e.g. from the Stream* list calls).
 */
export function implement(
  service: ServiceDefinition,
  serviceName: string,
  handlers: UnaryTable,
  logger: Logger,
): UntypedServiceImplementation {
  const impl: UntypedServiceImplementation = {};
  for (const [rpc, method] of Object.entries(service)) {
    const handler = handlers[rpc];
    if (method.responseStream) {
      impl[rpc] = (call: ServerWritableStream<unknown, unknown>) => {
        if (call.request instanceof MalformedRequest) {
          call.emit('error', toServiceError(malformed(call.request)));
          return;
        }
        logger.debug({ rpc }, 'unimplemented streaming rpc called');
        call.emit('error', toServiceErrorUnimplemented(serviceName, rpc));
      };
    } else if (handler) {
      impl[rpc] = wrapUnary(rpc, handler, logger);
    } else {
      impl[rpc] = (call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<unknown>) => {
        if (call.request instanceof MalformedRequest) {
          callback(toServiceError(malformed(call.request)));
          return;
        }
        logger.debug({ rpc }, 'unimplemented rpc called');
        callback(toServiceErrorUnimplemented(serviceName, rpc));
      };
    }
  }
  return impl;
}

function malformed(req: MalformedRequest): InvalidArgumentError {
  return new InvalidArgumentError('request', `is not a valid ${req.message}: ${req.reason}`);
}

function toServiceErrorUnimplemented(serviceName: string, rpc: string) {
  return toServiceError(new UnimplementedError(`${serviceName}.${rpc} is not implemented by berth`));
}

function wrapUnary(rpc: string, handler: UnaryHandler<never, unknown>, logger: Logger) {
  return (call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<unknown>): void => {
    const started = process.hrtime.bigint();
    const elapsedMs = (): number => Number(process.hrtime.bigint() - started) / 1e6;
    if (call.request instanceof MalformedRequest) {
      logger.warn({ rpc, err: call.request.reason }, 'malformed request');
      callback(toServiceError(malformed(call.request)));
      return;
    }
    const cancelled = new AbortController();
    call.once('cancelled', () => cancelled.abort(new Error('the client cancelled the call')));
    // The request type is the handler's own; grpc-js decoded it from the matching proto message.
    handler(call.request as never, { signal: cancelled.signal }).then(
      (response) => {
        logger.debug({ rpc, ms: elapsedMs() }, 'rpc');
        callback(null, response);
      },
      (err: unknown) => {
        const serviceError = toServiceError(err);
        // Runtime failures are errors; the client's own mistakes (bad input, unknown ids) warnings.
        const level =
          serviceError.code === status.INTERNAL || serviceError.code === status.UNKNOWN ? 'error' : 'warn';
        logger[level](
          { rpc, ms: elapsedMs(), code: status[serviceError.code], err: serviceError.message },
          'rpc failed',
        );
        callback(serviceError);
      },
    );
  };
}
