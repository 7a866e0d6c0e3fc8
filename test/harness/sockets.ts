/** Loopback connections: for unit tests of protocol code, and to read what a forwarded port says. */
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

/**
 * Two ends of one TCP connection on 127.0.0.1. `onCleanup` receives what undoes it, for the
 * test's afterEach; the listener is closed at once so nothing keeps the runner alive. With
 * `allowHalfOpen` the server end is as an HTTP server's (and so an upgraded one's): the peer's end
 * does not end it.
 */
export async function socketPair(
  onCleanup: (cleanup: () => void) => void,
  { allowHalfOpen = false }: { allowHalfOpen?: boolean } = {},
): Promise<{ serverSocket: Socket; clientSocket: Socket }> {
  const listener = createServer({ allowHalfOpen });
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  try {
    const accepted = once(listener, 'connection');
    const clientSocket = connect((listener.address() as AddressInfo).port, '127.0.0.1');
    onCleanup(() => clientSocket.destroy());
    const [[serverSocket]] = (await Promise.all([accepted, once(clientSocket, 'connect')])) as [
      [Socket],
      unknown[],
    ];
    onCleanup(() => serverSocket.destroy());
    return { serverSocket, clientSocket };
  } finally {
    listener.close();
  }
}

/** What a loopback port says before it closes; '' when nothing listens yet. Bounded in time. */
export function readFrom(port: number): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    const socket = connect(port, '127.0.0.1');
    socket.setTimeout(5_000, () => socket.destroy());
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
    socket.on('error', () => resolve(''));
    socket.on('close', () => resolve(text));
  });
}
