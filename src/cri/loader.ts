import type { ServiceDefinition } from '@grpc/grpc-js';
import { loadSync, type MethodDefinition, type PackageDefinition } from '@grpc/proto-loader';
import { fileURLToPath } from 'node:url';

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
  const definition = loadSync(protoPath, PROTO_LOADER_OPTIONS);
  return { runtime: service(definition, 'RuntimeService'), image: service(definition, 'ImageService') };
}

/** The services as berthd serves them: a request that does not decode still reaches the handler wrapper. */
export function loadCriServices(protoPath = PROTO_PATH): CriServices<ServiceDefinition> {
  const { runtime, image } = loadCriDefinitions(protoPath);
  return { runtime: tolerateMalformed(runtime), image: tolerateMalformed(image) };
}

function service(definition: PackageDefinition, name: string): ServiceMethods {
  const found = definition[`runtime.v1.${name}`];
  // Messages and enums carry a format; a service is its methods alone.
  if (!found || 'format' in found) throw new Error(`the CRI proto has no service runtime.v1.${name}`);
  return found;
}

/** What a request that could not be decoded becomes; the handler wrapper answers it. */
export class MalformedRequest {
  constructor(
    readonly message: string,
    readonly reason: string,
  ) {}
}

/**
 * grpc-js answers a request whose bytes do not decode with INTERNAL before any handler runs; the
 * client sent it, so it is INVALID_ARGUMENT. Decoding failures become a MalformedRequest instead.
 */
function tolerateMalformed(service: ServiceMethods): ServiceMethods {
  const out: ServiceMethods = {};
  for (const [rpc, method] of Object.entries(service)) {
    const decode = method.requestDeserialize;
    const message = `${rpc} request`;
    out[rpc] = {
      ...method,
      requestDeserialize: (bytes: Buffer) => {
        try {
          return decode(bytes);
        } catch (err) {
          return new MalformedRequest(message, err instanceof Error ? err.message : String(err));
        }
      },
    };
  }
  return out;
}
