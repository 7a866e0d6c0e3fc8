/**
 * CRI messages as the test client (test/harness/client.ts) decodes them: the types generated from
 * proto/, with the metadata berth always answers made non-null so that tests read it unchecked.
 */
import type { Container__Output } from '../../src/cri/generated/runtime/v1/Container.js';
import type { ContainerStatus__Output } from '../../src/cri/generated/runtime/v1/ContainerStatus.js';
import type { ExecSyncResponse__Output } from '../../src/cri/generated/runtime/v1/ExecSyncResponse.js';

type WithMetadata<Message extends { metadata: unknown }> = Message & {
  metadata: NonNullable<Message['metadata']>;
};

/** An item of ListContainers. */
export type WireContainer = WithMetadata<Container__Output>;

export type WireContainerStatus = WithMetadata<ContainerStatus__Output>;

/** The output as the bytes the process wrote. */
export type ExecResponse = ExecSyncResponse__Output;
