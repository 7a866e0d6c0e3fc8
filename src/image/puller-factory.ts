/**
 * The seam where pull machinery is loaded: ImageService imports this module on the first pull,
 * and with it the registry client (http, https, tls) and the unpacker (zlib, tar).
 */
import type { ContentStore } from '../imagestore/content.js';
import type { LayerStore } from '../imagestore/layers.js';
import type { Logger } from '../log.js';
import { RegistryClient } from '../registry/client.js';
import type { RegistryHosts } from '../registry/hosts.js';
import { Puller } from './pull.js';

/** What pulls need besides the stores; the registry client itself is made on the first pull. */
export interface PullSettings {
  hosts: RegistryHosts;
  /** Deadline for each registry request's response headers. */
  timeoutMs: number;
  /** A pull that receives nothing for this long is cancelled; 0 or unset: never. */
  progressTimeoutMs?: number;
}

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
