import { Server, ServerCredentials } from '@grpc/grpc-js';
import { chmod, mkdir, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { BerthConfig } from '../config/types.js';
import type { ContainerService } from '../container/service.js';
import type { Logger } from '../log.js';
import type { ImageService } from '../image/service.js';
import type { SandboxService } from '../sandbox/service.js';
import { containerHandlers } from './container.js';
import { implement } from './handler.js';
import { imageHandlers } from './image.js';
import { loadCriServices } from './loader.js';
import { runtimeHandlers } from './runtime.js';
import { sandboxHandlers } from './sandbox.js';
import { streamingHandlers, type StreamUrls } from './streaming.js';

export interface CriServer {
  close(): Promise<void>;
}

export interface CriDomains {
  sandboxes: SandboxService;
  images: ImageService;
  containers: ContainerService;
  streams: StreamUrls;
}

/** Serves RuntimeService and ImageService on the configured unix socket, mode 0660. */
export async function serveCri(config: BerthConfig, domains: CriDomains, logger: Logger): Promise<CriServer> {
  const { sandboxes, images, containers, streams } = domains;
  const services = loadCriServices();
  const server = new Server({ 'grpc.max_receive_message_length': 16 * 1024 * 1024 });
  server.addService(
    services.runtime,
    implement(
      services.runtime,
      'RuntimeService',
      {
        ...runtimeHandlers(config, sandboxes),
        ...sandboxHandlers(sandboxes),
        ...containerHandlers(containers),
        ...streamingHandlers(containers, sandboxes, streams),
      },
      logger,
    ),
  );
  server.addService(services.image, implement(services.image, 'ImageService', imageHandlers(images), logger));

  await mkdir(dirname(config.socket), { recursive: true, mode: 0o711 });
  // A socket file left by a killed daemon would make bind fail with EADDRINUSE.
  await rm(config.socket, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.bindAsync(`unix://${config.socket}`, ServerCredentials.createInsecure(), (err) =>
      err ? reject(err) : resolve(),
    );
  });
  await chmod(config.socket, 0o660);
  logger.info({ socket: config.socket }, 'serving CRI');
  return {
    close: () =>
      new Promise<void>((resolve) => {
        server.tryShutdown(() => resolve());
        setTimeout(() => server.forceShutdown(), 5_000).unref();
      }),
  };
}
