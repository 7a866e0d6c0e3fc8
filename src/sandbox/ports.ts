import type { Duplex } from 'node:stream';
import { FailedPreconditionError } from '../errors.js';
import { dialLocalhost } from '../netns/dial.js';
import type { Store } from '../store/index.js';
import { findReadySandbox } from './lookup.js';

/** PortForward's side of a pod: which pod a URL may name, and a connection into its network. */
export class PodPorts {
  constructor(
    private readonly store: Store,
    private readonly timeoutMs: number,
  ) {}

  /** The full id of a READY sandbox, for PortForward to validate before it hands out a URL. */
  readyId(idOrPrefix: string): string {
    return findReadySandbox(this.store, idOrPrefix).id;
  }

  /** A TCP connection to `port` on localhost in the pod's network (the host's for host-network pods). */
  async dialPort(idOrPrefix: string, port: number, signal: AbortSignal): Promise<Duplex> {
    const sandbox = findReadySandbox(this.store, idOrPrefix);
    const netns = sandbox.hostNetwork ? null : sandbox.netnsPath;
    if (!sandbox.hostNetwork && !netns)
      throw new FailedPreconditionError(`pod sandbox ${sandbox.id} has no network namespace`);
    return dialLocalhost(netns, port, { signal, timeoutMs: this.timeoutMs });
  }
}
