/**
 * The seam where pull machinery is loaded: ImageService imports this module on the first pull,
 * and with it the registry client (http, https, tls) and the unpacker (zlib, tar).
 */
import type { ContentStore } from '../imagestore/content.js';
import type { LayerStore } from '../imagestore/layers.js';
import type { Logger } from '../log.js';
import { RegistryClient } from '../registry/client.js';
import type { PullSettings } from './service.js';
import { Puller } from './pull.js';

export interface PullerParts extends PullSettings {
  content: ContentStore;
  layers: LayerStore;
  logger: Logger;
}

export function createPuller({
  hosts,
  timeoutMs,
  progressTimeoutMs,
  content,
  layers,
  logger,
}: PullerParts): Puller {
  const registry = new RegistryClient({ hosts, timeoutMs, logger });
  return new Puller({ registry, content, layers, logger, progressTimeoutMs: progressTimeoutMs ?? 0 });
}
