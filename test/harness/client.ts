import {
  credentials,
  loadPackageDefinition,
  Metadata,
  type CallOptions,
  type Client,
  type GrpcObject,
  type ServiceError,
} from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { PROTO_LOADER_OPTIONS, PROTO_PATH } from '../../src/cri/loader.js';

type Callback = (err: ServiceError | null, res: unknown) => void;
type RawMethod = (req: unknown, metadata: Metadata, options: CallOptions, cb: Callback) => void;

/** A CRI client over the daemon's unix socket, decoding exactly as kubelet's protobuf would. */
export class CriClient {
  readonly runtime: Client;
  readonly image: Client;

  constructor(socket: string) {
    const pkg = loadPackageDefinition(loadSync(PROTO_PATH, PROTO_LOADER_OPTIONS));
    const v1 = (pkg.runtime as GrpcObject).v1 as GrpcObject;
    type Ctor = new (
      address: string,
      creds: ReturnType<typeof credentials.createInsecure>,
      options: Record<string, number>,
    ) => Client;
    // Room for ExecSync's full 16 MiB of stdout (kubelet's own limit is 16 MiB in all).
    const options = { 'grpc.max_receive_message_length': 32 * 1024 * 1024 };
    this.runtime = new (v1.RuntimeService as unknown as Ctor)(
      `unix://${socket}`,
      credentials.createInsecure(),
      options,
    );
    this.image = new (v1.ImageService as unknown as Ctor)(
      `unix://${socket}`,
      credentials.createInsecure(),
      options,
    );
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
    return invoke<T>(this.runtime, rpc, req, opts.deadlineMs);
  }

  callImage<T = Record<string, unknown>>(
    rpc: string,
    req: object = {},
    opts: { deadlineMs?: number } = {},
  ): Promise<T> {
    return invoke<T>(this.image, rpc, req, opts.deadlineMs);
  }

  close(): void {
    this.runtime.close();
    this.image.close();
  }
}

function invoke<T>(client: Client, rpc: string, req: object, deadlineMs?: number): Promise<T> {
  const method = (client as unknown as Record<string, RawMethod>)[rpc];
  if (!method) throw new Error(`no rpc ${rpc}`);
  const options: CallOptions = deadlineMs === undefined ? {} : { deadline: Date.now() + deadlineMs };
  return new Promise<T>((resolve, reject) => {
    method.call(client, req, new Metadata(), options, (err, res) => (err ? reject(err) : resolve(res as T)));
  });
}
