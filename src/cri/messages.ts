/**
 * The CRI messages by their proto names, typed from the code `npm run generate` makes of
 * proto/runtime/v1/api.proto with the options the loader decodes with (src/cri/loader.ts).
 */
import type { MessageTypeDefinition } from '@grpc/proto-loader';
import type { ProtoGrpcType } from './generated/api.js';

type Definitions = ProtoGrpcType['runtime']['v1'];

/** Every message of runtime.v1 (enums and services left out). */
export type MessageName = {
  [Name in keyof Definitions]: Definitions[Name] extends MessageTypeDefinition<object, object> ? Name : never;
}[keyof Definitions];

/**
 * A value as grpc-js decodes it. The generated output types list an enum's named values only, but
 * a number the enum has no name for is handed over as that number, so translation has to refuse it.
 */
export type Decoded<T> = T extends Buffer
  ? T
  : T extends string
    ? string extends T
      ? T
      : T | number
    : T extends object
      ? { [Field in keyof T]: Decoded<T[Field]> }
      : T;

/** A message as a handler receives it: every field present, unset messages null. */
export type Received<Name extends MessageName> =
  Definitions[Name] extends MessageTypeDefinition<object, infer Output> ? Decoded<Output> : never;

/** A message as a handler may answer it: fields left out take their proto defaults. */
export type Sent<Name extends MessageName> =
  Definitions[Name] extends MessageTypeDefinition<infer Input, object> ? Input : never;

/** A verbose status's info map: `value` as JSON under `key`, as crictl shows it; empty without one. */
export function jsonInfo(key: string, value: unknown): Record<string, string> {
  return value === undefined ? {} : { [key]: JSON.stringify(value) };
}
