/** GetContainerEvents as kubelet's evented PLEG subscribes to it, for tests that watch a pod's events. */
import assert from 'node:assert/strict';
import { Client, credentials, Metadata, type ClientReadableStream, type ServiceError } from '@grpc/grpc-js';
import { loadCriDefinitions } from '../../src/cri/loader.js';
import type { ContainerEventResponse__Output as WireEvent } from '../../src/cri/generated/runtime/v1/ContainerEventResponse.js';

/** A GetContainerEvents subscription on a connection of its own, as kubelet holds one. */
export class EventStream {
  readonly received: WireEvent[] = [];
  /** Resolves with the error the stream ended with, or null when it ended with OK. */
  readonly ended: Promise<ServiceError | null>;
  private readonly client: Client;
  private readonly call: ClientReadableStream<WireEvent>;
  private readonly listeners = new Set<() => void>();

  constructor(socket: string) {
    const method = loadCriDefinitions().runtime.GetContainerEvents;
    assert.ok(method);
    this.client = new Client(`unix://${socket}`, credentials.createInsecure());
    this.call = this.client.makeServerStreamRequest(
      method.path,
      method.requestSerialize,
      (bytes: Buffer) => method.responseDeserialize(bytes) as WireEvent,
      {},
      new Metadata(),
      {},
    );
    this.ended = new Promise((resolve) => {
      this.call.on('error', (err: ServiceError) => resolve(err));
      this.call.on('end', () => resolve(null));
    });
    this.call.on('data', (event: WireEvent) => {
      this.received.push(event);
      for (const listener of this.listeners) listener();
    });
  }

  /** The first event received (or receiving later) that `match` accepts. */
  waitFor(match: (e: WireEvent) => boolean, timeoutMs = 30_000): Promise<WireEvent> {
    const found = this.received.find(match);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.listeners.delete(check);
        reject(new Error(`no such event within ${timeoutMs} ms; got ${this.received.length}`));
      }, timeoutMs);
      const check = (): void => {
        const event = this.received.find(match);
        if (!event) return;
        clearTimeout(timer);
        this.listeners.delete(check);
        resolve(event);
      };
      this.listeners.add(check);
      void this.ended.then((err) => {
        if (this.listeners.has(check)) check();
        if (this.listeners.delete(check)) {
          clearTimeout(timer);
          reject(new Error(`the stream ended (${err?.message ?? 'OK'}) before the event came`));
        }
      });
    });
  }

  close(): void {
    this.call.cancel();
    this.client.close();
  }
}
