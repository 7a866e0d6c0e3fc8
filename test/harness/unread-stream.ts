/**
 * A gRPC client that stops reading, as a kubelet stuck elsewhere would, on an HTTP/2 connection of
 * its own.
 */
import { connect as connectHttp2, type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import { connect as connectUnix } from 'node:net';

/**
 * A subscriber that stops reading, as a kubelet stuck elsewhere would: a plain HTTP/2 stream that is
 * paused, so its flow-control window closes and berthd's writes back up. (grpc-js's own client
 * keeps reading into memory whether or not the caller takes the messages.)
 */
export class UnreadStream {
  private readonly session: ClientHttp2Session;
  private readonly request: ClientHttp2Stream;
  private readonly trailers: Promise<Record<string, string | string[] | undefined>>;

  constructor(socket: string, path = '/runtime.v1.RuntimeService/GetContainerEvents') {
    this.session = connectHttp2('http://localhost', { createConnection: () => connectUnix(socket) });
    this.session.on('error', () => {});
    this.request = this.session.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    this.request.on('error', () => {});
    this.trailers = new Promise((resolve) => this.request.on('trailers', (headers) => resolve(headers)));
    // One uncompressed message of no bytes: an empty request (GetEventsRequest, a list's).
    this.request.end(Buffer.alloc(5));
    this.request.pause();
  }

  /** Reads what the stream still has: how many messages, then the status it ends with. */
  async readToEnd(): Promise<{ messages: number; status: number; message: string }> {
    let buffered = Buffer.alloc(0);
    let messages = 0;
    this.request.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 5 && buffered.length >= 5 + buffered.readUInt32BE(1)) {
        buffered = buffered.subarray(5 + buffered.readUInt32BE(1));
        messages++;
      }
    });
    this.request.resume();
    const trailers = await this.trailers;
    return {
      messages,
      status: Number(trailers['grpc-status']),
      message: decodeURIComponent(String(trailers['grpc-message'] ?? '')),
    };
  }

  close(): void {
    this.request.close();
    this.session.destroy();
  }
}
