import { readFile, writeFile } from 'node:fs/promises';
import { hostname as hostHostname } from 'node:os';
import { join } from 'node:path';
import type { DnsConfig } from './types.js';

export const RESOLV_CONF = 'resolv.conf';
export const HOSTNAME_FILE = 'hostname';

/**
 * The pod's resolv.conf, written once per pod so every container mounts the same file. With no
 * DNS config from kubelet the pod inherits the host's resolver, as kubelet's "Default" policy means.
 */
export async function writeResolvConf(sandboxDir: string, dns: DnsConfig | null): Promise<void> {
  let text: string;
  if (dns && (dns.servers.length > 0 || dns.searches.length > 0 || dns.options.length > 0)) {
    const lines: string[] = [];
    if (dns.searches.length > 0) lines.push(`search ${dns.searches.join(' ')}`);
    for (const server of dns.servers) lines.push(`nameserver ${server}`);
    if (dns.options.length > 0) lines.push(`options ${dns.options.join(' ')}`);
    text = lines.join('\n') + '\n';
  } else {
    text = await readFile('/etc/resolv.conf', 'utf8').catch(() => '');
  }
  await writeFile(join(sandboxDir, RESOLV_CONF), text, { mode: 0o644 });
}

export async function writeHostnameFile(sandboxDir: string, podHostname: string): Promise<void> {
  await writeFile(join(sandboxDir, HOSTNAME_FILE), `${podHostname || hostHostname()}\n`, { mode: 0o644 });
}
