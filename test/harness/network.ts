/**
 * The throwaway CNI network tests put pods on: a bridge of their own, a /24 nothing on the machine
 * uses, and a host-local store in a temp dir, so that tests can read the leases directly.
 */
import { randomInt } from 'node:crypto';
import { join } from 'node:path';
import { run } from '../../src/exec.js';
import { namesIn } from './files.js';

export interface TestNetwork {
  bridge: string;
  /** e.g. 10.210.37 — the pod subnet is `${prefix}.0/24`. */
  prefix: string;
  /** host-local's data dir; it keeps each network's leases in a dir named after the network. */
  ipamDir: string;
}

/**
 * A `10.<second>.x` prefix whose /24 no address or route on this machine is in, so test pods never
 * shadow a real network.
 */
export async function unusedPrefix(second: number): Promise<string> {
  const { stdout: addresses } = await run('ip', ['-4', 'addr'], { timeoutMs: 10_000 });
  const { stdout: routes } = await run('ip', ['-4', 'route', 'show', 'table', 'all'], { timeoutMs: 10_000 });
  for (let i = 0; i < 50; i++) {
    const prefix = `10.${second}.${randomInt(1, 255)}`;
    if (!addresses.includes(`${prefix}.`) && !routes.includes(`${prefix}.`)) return prefix;
  }
  throw new Error(`no unused 10.${second}.x.0/24 subnet found`);
}

/** The bridge plugin, gateway on the bridge and no masquerading; `ipam` adds to host-local's section. */
export function bridgePlugin(
  network: TestNetwork,
  ipam: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    type: 'bridge',
    bridge: network.bridge,
    isGateway: true,
    ipMasq: false,
    ipam: {
      type: 'host-local',
      ranges: [[{ subnet: `${network.prefix}.0/24` }]],
      dataDir: network.ipamDir,
      ...ipam,
    },
  };
}

/** The IPs host-local holds for the network named `name`. */
export async function leasedIps(network: TestNetwork, name: string): Promise<string[]> {
  const names = await namesIn(join(network.ipamDir, name));
  return names
    .filter((n) => /^[0-9.]+$/.test(n) || n.includes(':'))
    .filter((n) => !n.startsWith('last_reserved'));
}
