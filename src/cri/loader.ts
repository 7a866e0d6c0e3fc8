import { loadPackageDefinition, type GrpcObject, type ServiceDefinition } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { fileURLToPath } from 'node:url';

/** From dist/src/cri (or src/cri) up to the package root, where proto/ lives. */
export const PROTO_PATH = fileURLToPath(new URL('../../../proto/runtime/v1/api.proto', import.meta.url));

export interface CriServices {
  runtime: ServiceDefinition;
  image: ServiceDefinition;
}

/** int64 nanosecond timestamps lose precision as JS numbers, so longs travel as strings. */
export const PROTO_LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
} as const;

export function loadCriServices(protoPath = PROTO_PATH): CriServices {
  const definition = loadSync(protoPath, PROTO_LOADER_OPTIONS);
  const pkg = loadPackageDefinition(definition);
  const v1 = (pkg.runtime as GrpcObject).v1 as GrpcObject;
  const service = (name: string): ServiceDefinition =>
    tolerateMalformed((v1[name] as unknown as { service: ServiceDefinition }).service);
  return { runtime: service('RuntimeService'), image: service('ImageService') };
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
function tolerateMalformed(service: ServiceDefinition): ServiceDefinition {
  const out: Record<string, ServiceDefinition[string]> = {};
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
