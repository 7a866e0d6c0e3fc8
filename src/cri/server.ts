import {
  Server,
  ServerCredentials,
  type handleServerStreamingCall,
  type handleUnaryCall,
  type ServiceDefinition,
} from '@grpc/grpc-js';
import { chmod, mkdir, mkdtemp, readdir, rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { BerthConfig } from '../config/types.js';
import type { Logger } from '../log.js';
import { settledWithin } from '../kit/deadline.js';
import { RunningWork, type ShutdownOptions } from '../shutdown.js';
import { RpcEdge, type RpcDone, type StreamHandler, type UnaryHandler } from './handler.js';
import { loadCriServices, type CriServices } from './loader.js';
import { imageService, runtimeService, type CriDomains } from './services.js';

export interface CriServer {
  /**
   * Takes no new call, lets those running finish for `graceMs` (or until `force` aborts), then
   * cancels them.
   */
  close(opts: ShutdownOptions): Promise<void>;
}

/**
 * Serves RuntimeService and ImageService on the configured unix socket, mode 0660. `services` may
 * be loaded beforehand (parsing the proto is a good part of start-up) to overlap other work.
 */
export async function serveCri(
  config: BerthConfig,
  domains: CriDomains,
  logger: Logger,
  services: CriServices<ServiceDefinition> = loadCriServices(),
  onRpcDone?: (done: RpcDone) => void,
): Promise<CriServer> {
  const handlers = new RunningWork();
  const edge = new TrackingEdge(handlers, logger, onRpcDone);
  const server = new Server({ 'grpc.max_receive_message_length': 16 * 1024 * 1024 });
  server.addService(services.runtime, runtimeService(config, domains, edge));
  server.addService(services.image, imageService(domains, edge));

  await mkdir(dirname(config.socket), { recursive: true, mode: 0o711 });
  // A socket file left by a killed daemon would make bind fail with EADDRINUSE.
  await rm(config.socket, { force: true });
  await bindPrivately(config.socket, (path) => bind(server, path));
  logger.info({ socket: config.socket }, 'serving CRI');
  return {
    close: async ({ graceMs, force }) => {
      // Stops listening at once; each connection is told to open no new call (HTTP/2 GOAWAY).
      const drained = new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
      if (await settledWithin(drained, graceMs, force)) return;
      // Each cancelled call's signal aborts: an ExecSync kills its command, a pull stops.
      server.forceShutdown();
      logger.warn(
        { waitedMs: force.aborted ? undefined : graceMs, forced: force.aborted },
        'cancelled the calls still running',
      );
      if (!(await settledWithin(handlers.settled(), CANCELLED_CALLS_WAIT_MS, force))) {
        logger.warn('cancelled calls still winding down; start-up finishes what they leave');
      }
    },
  };
}

/** How long cancelled calls get to undo what they started (an ExecSync's kill waits 2 s for runc). */
const CANCELLED_CALLS_WAIT_MS = 5_000;

/**
 * An edge that also counts the domain handlers running: a cancelled call's reply is gone at once,
 * but its handler still has its command to kill, and the shutdown waits for that.
 */
class TrackingEdge extends RpcEdge {
  constructor(
    private readonly handlers: RunningWork,
    ...edge: ConstructorParameters<typeof RpcEdge>
  ) {
    super(...edge);
  }

  override unary<Req, Res>(handler: UnaryHandler<Req, Res>): handleUnaryCall<Req, Res> {
    return super.unary((request, context) => this.handlers.track(handler(request, context)));
  }

  override serverStream<Req, Res>(handler: StreamHandler<Req, Res>): handleServerStreamingCall<Req, Res> {
    const handlers = this.handlers;
    return super.serverStream((request, context) =>
      (async function* () {
        let ended = (): void => {};
        void handlers.track(new Promise<void>((resolve) => (ended = resolve)));
        try {
          yield* handler(request, context);
        } finally {
          ended();
        }
      })(),
    );
  }
}

function bind(server: Server, path: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.bindAsync(`unix://${path}`, ServerCredentials.createInsecure(), (err) =>
      err ? reject(err) : resolve(),
    );
  });
}

/** sun_path holds 107 bytes and a NUL. */
const MAX_SOCKET_PATH_BYTES = 107;
const SOCKET_MODE = 0o660;
/** mkdtemp's names for the `.b` prefix. */
const BIND_DIR = /^\.b[A-Za-z0-9]{6}$/;

/**
 * Creates the socket so that no other user can connect to it at any moment: bound inside a fresh
 * directory only root may enter (mkdtemp makes it 0700), given its mode there, then renamed into
 * place. A bind straight at the path would exist with the umask's mode until the chmod.
 */
export async function bindPrivately(socket: string, bindAt: (path: string) => Promise<void>): Promise<void> {
  // Such dirs left by a berthd killed while binding are its own, and empty of anything in use.
  for (const entry of await readdir(dirname(socket))) {
    if (BIND_DIR.test(entry)) await rm(join(dirname(socket), entry), { recursive: true, force: true });
  }
  const dir = await mkdtemp(join(dirname(socket), '.b'));
  try {
    const inside = join(dir, 's');
    if (Buffer.byteLength(inside) > MAX_SOCKET_PATH_BYTES) {
      // Too long a path for the detour: a umask keeps the moment closed instead (it is
      // process-wide, but nothing else of berthd creates files while the server starts).
      const previous = process.umask(0o117);
      try {
        await bindAt(socket);
      } finally {
        process.umask(previous);
      }
      await chmod(socket, SOCKET_MODE);
      return;
    }
    await bindAt(inside);
    await chmod(inside, SOCKET_MODE);
    await rename(inside, socket);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
