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
    (v1[name] as unknown as { service: ServiceDefinition }).service;
  return { runtime: service('RuntimeService'), image: service('ImageService') };
}
