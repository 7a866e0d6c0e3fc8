import type { ServiceDefinition } from '@grpc/grpc-js';
import { loadSync, type MethodDefinition, type PackageDefinition } from '@grpc/proto-loader';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError } from '../errors.js';
import { checkValueCount, WireShapes } from './wire-budget.js';

/** From dist/src/cri (or src/cri) up to the package root, where proto/ lives. */
export const PROTO_PATH = fileURLToPath(new URL('../../../proto/runtime/v1/api.proto', import.meta.url));

export interface CriServices<Service> {
  runtime: Service;
  image: Service;
}

/** A service as the proto declares it: its methods by rpc name. */
export type ServiceMethods = Record<string, MethodDefinition<object, object>>;

/**
 * int64 nanosecond timestamps lose precision as JS numbers, so longs travel as strings. `npm run
 * generate` makes the wire types with the same options (test/unit/cri-messages.test.ts holds them
 * together), so the types say what decoding really yields.
 */
export const PROTO_LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
} as const;

/** The services as the proto defines them, for clients. */
export function loadCriDefinitions(protoPath = PROTO_PATH): CriServices<ServiceMethods> {
  return servicesOf(loadSync(protoPath, PROTO_LOADER_OPTIONS));
}

/**
 * The services as berthd serves them: a request is counted (wire-budget.ts) before it is decoded,
 * and one that is too big or does not decode still reaches the handler wrapper.
 */
export function loadCriServices(protoPath = PROTO_PATH): CriServices<ServiceDefinition> {
  const definition = loadSync(protoPath, PROTO_LOADER_OPTIONS);
  const shapes = new WireShapes(definition, PACKAGE);
  const { runtime, image } = servicesOf(definition);
  return { runtime: checkedRequests(runtime, shapes), image: checkedRequests(image, shapes) };
}

const PACKAGE = 'runtime.v1';

function servicesOf(definition: PackageDefinition): CriServices<ServiceMethods> {
  return { runtime: service(definition, 'RuntimeService'), image: service(definition, 'ImageService') };
}

function service(definition: PackageDefinition, name: string): ServiceMethods {
  const found = definition[`${PACKAGE}.${name}`];
  // Messages and enums carry a format; a service is its methods alone.
  if (!found || 'format' in found) throw new Error(`the CRI proto has no service ${PACKAGE}.${name}`);
  return found;
}

/** What a request that could not be decoded, or was too big to, becomes; the handler wrapper answers it. */
export class MalformedRequest {
  constructor(readonly error: InvalidArgumentError) {}
}

/**
 * grpc-js answers a request whose bytes do not decode with INTERNAL before any handler runs; the
 * client sent it, so it is INVALID_ARGUMENT. Requests holding more values than berth decodes, and
 * decoding failures, become a MalformedRequest instead.
 */
function checkedRequests(service: ServiceMethods, shapes: WireShapes): ServiceMethods {
  const out: ServiceMethods = {};
  for (const [rpc, method] of Object.entries(service)) {
    const decode = method.requestDeserialize;
    const shape = shapes.of(method.requestType.type);
    out[rpc] = {
      ...method,
      requestDeserialize: (bytes: Buffer) => {
        try {
          checkValueCount(shape, bytes);
          return decode(bytes);
        } catch (err) {
          if (err instanceof InvalidArgumentError) return new MalformedRequest(err);
          const reason = err instanceof Error ? err.message : String(err);
          return new MalformedRequest(
            new InvalidArgumentError('request', `is not a valid ${rpc} request: ${reason}`),
          );
        }
      },
    };
  }
  return out;
}
