import { Client, credentials, Metadata, type CallOptions } from '@grpc/grpc-js';
import { loadCriDefinitions, type ServiceMethods } from '../../src/cri/loader.js';

/** A CRI client over the daemon's unix socket, decoding exactly as kubelet's protobuf would. */
export class CriClient {
  private readonly services = loadCriDefinitions();
  private readonly connection: Client;

  constructor(socket: string) {
    // Room for ExecSync's full 16 MiB of stdout (kubelet's own limit is 16 MiB in all).
    this.connection = new Client(`unix://${socket}`, credentials.createInsecure(), {
      'grpc.max_receive_message_length': 32 * 1024 * 1024,
    });
  }

  /**
   * Calls a RuntimeService rpc; rejects with the grpc ServiceError (code, details). With
   * `deadlineMs` the client gives up after that long, as kubelet does with its timeouts.
   */
  call<T = Record<string, unknown>>(
    rpc: string,
    req: object = {},
    opts: { deadlineMs?: number } = {},
  ): Promise<T> {
    return this.invoke<T>(this.services.runtime, rpc, req, opts.deadlineMs);
  }

  callImage<T = Record<string, unknown>>(
    rpc: string,
    req: object = {},
    opts: { deadlineMs?: number } = {},
  ): Promise<T> {
    return this.invoke<T>(this.services.image, rpc, req, opts.deadlineMs);
  }

  /**
   * Calls a server-streaming rpc of either service and collects its messages; rejects with the
   * ServiceError the stream ended with.
   */
  stream<T = Record<string, unknown>>(
    rpc: string,
    req: object = {},
    opts: { service?: 'runtime' | 'image'; deadlineMs?: number } = {},
  ): Promise<T[]> {
    const { method, options } = prepare(this.services[opts.service ?? 'runtime'], rpc, opts.deadlineMs);
    const call = this.connection.makeServerStreamRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      req,
      new Metadata(),
      options,
    );
    const messages: T[] = [];
    return new Promise<T[]>((resolve, reject) => {
      call.on('data', (message) => messages.push(message as T));
      call.on('error', reject);
      call.on('end', () => resolve(messages));
    });
  }

  close(): void {
    this.connection.close();
  }

  /** `T` is the caller's word for the response's shape: the rpc is named by a string. */
  private invoke<T>(service: ServiceMethods, rpc: string, req: object, deadlineMs?: number): Promise<T> {
    const { method, options } = prepare(service, rpc, deadlineMs);
    return new Promise<T>((resolve, reject) => {
      this.connection.makeUnaryRequest(
        method.path,
        method.requestSerialize,
        method.responseDeserialize,
        req,
        new Metadata(),
        options,
        (err, res) => (err ? reject(err) : resolve(res as T)),
      );
    });
  }
}

/** The rpc's method, and the call's options with its deadline. */
function prepare(
  service: ServiceMethods,
  rpc: string,
  deadlineMs: number | undefined,
): { method: NonNullable<ServiceMethods[string]>; options: CallOptions } {
  const method = service[rpc];
  if (!method) throw new Error(`no rpc ${rpc}`);
  return { method, options: deadlineMs === undefined ? {} : { deadline: Date.now() + deadlineMs } };
}
