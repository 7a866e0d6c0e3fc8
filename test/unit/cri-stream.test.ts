/**
 * RpcEdge.serverStream over a real grpc-js server and client on a unix socket: messages in order,
 * errors as status codes, and a client going away reaching the handler.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  Client,
  credentials,
  Metadata,
  Server,
  ServerCredentials,
  status,
  type ServiceError,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { pino } from 'pino';
import { ResourceExhaustedError } from '../../src/errors.js';
import { RpcEdge, type StreamHandler } from '../../src/cri/handler.js';
import { loadCriDefinitions, loadCriServices } from '../../src/cri/loader.js';

interface Event {
  container_id: string;
}

describe('RpcEdge.serverStream', () => {
  let dir = '';
  let server: Server;
  let client: Client;
  /** What the next GetContainerEvents call runs. */
  let handler: StreamHandler<unknown, Event> = async function* () {};

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-stream-'));
    const edge = new RpcEdge(pino({ level: 'silent' }));
    server = new Server();
    const implementation: UntypedServiceImplementation = {
      GetContainerEvents: edge.serverStream<unknown, Event>((req, ctx) => handler(req, ctx)),
    };
    server.addService(loadCriServices().runtime, implementation);
    const socket = join(dir, 's');
    await new Promise<void>((resolve, reject) =>
      server.bindAsync(`unix://${socket}`, ServerCredentials.createInsecure(), (err) =>
        err ? reject(err) : resolve(),
      ),
    );
    client = new Client(`unix://${socket}`, credentials.createInsecure());
  });

  after(async () => {
    client.close();
    server.forceShutdown();
    await rm(dir, { recursive: true, force: true });
  });

  function subscribe() {
    const method = loadCriDefinitions().runtime.GetContainerEvents;
    assert.ok(method);
    const call = client.makeServerStreamRequest(
      method.path,
      method.requestSerialize,
      (bytes: Buffer) => method.responseDeserialize(bytes) as Event,
      {},
      new Metadata(),
      {},
    );
    const received: string[] = [];
    call.on('data', (event: Event) => received.push(event.container_id));
    const ended = new Promise<ServiceError | null>((resolve) => {
      call.on('error', (err: ServiceError) => resolve(err));
      call.on('end', () => resolve(null));
    });
    return { call, received, ended };
  }

  test('sends what the handler yields, in order, then OK', async () => {
    handler = async function* () {
      for (const id of ['a', 'b', 'c']) yield { container_id: id };
    };
    const { received, ended } = subscribe();
    assert.equal(await ended, null);
    assert.deepEqual(received, ['a', 'b', 'c']);
  });

  test('a typed error ends the stream with its code, after what was sent', async () => {
    handler = async function* () {
      yield { container_id: 'a' };
      throw new ResourceExhaustedError('too slow');
    };
    const { received, ended } = subscribe();
    const err = await ended;
    assert.equal(err?.code, status.RESOURCE_EXHAUSTED);
    assert.equal(err?.details, 'too slow');
    assert.deepEqual(received, ['a']);
  });

  test('a client going away aborts the handler’s signal and runs its finally', async () => {
    let aborted!: () => void;
    const abortedSeen = new Promise<void>((resolve) => (aborted = resolve));
    let finished = false;
    handler = async function* (_req, { signal }) {
      try {
        yield { container_id: 'a' };
        await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
        aborted();
      } finally {
        finished = true;
      }
    };
    const { call, received } = subscribe();
    while (received.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    call.cancel();
    await abortedSeen;
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.ok(finished);
  });
});
