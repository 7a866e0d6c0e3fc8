import { isIP } from 'node:net';
import { isRecord, isStringArray } from './json.js';
import type { CniResult } from './types.js';

/**
 * Checks a plugin's ADD output has the result shape (0.3.0 – 1.1.0). Returns the same object, so
 * fields berth does not model are kept for the next plugin's prevResult and for DEL.
 * Throws a plain Error naming the bad field; the caller wraps it with plugin context.
 */
export function validateCniResult(raw: unknown, expectedVersion: string): CniResult {
  if (!isRecord(raw)) throw new Error('result is not a JSON object');
  if (raw.cniVersion === undefined) {
    // Lenient: some plugins omit it; the output is in the version we asked for anyway.
    raw.cniVersion = expectedVersion;
  } else if (typeof raw.cniVersion !== 'string') {
    throw new Error('result cniVersion is not a string');
  }
  checkArray(raw, 'interfaces', (item, i) => {
    if (typeof item.name !== 'string') throw new Error(`result interfaces[${i}].name is not a string`);
  });
  checkArray(raw, 'ips', (item, i) => {
    if (typeof item.address !== 'string') throw new Error(`result ips[${i}].address is not a string`);
    if (item.interface !== undefined && !Number.isInteger(item.interface)) {
      throw new Error(`result ips[${i}].interface is not an integer`);
    }
  });
  checkArray(raw, 'routes', (item, i) => {
    if (typeof item.dst !== 'string') throw new Error(`result routes[${i}].dst is not a string`);
  });
  if (raw.dns !== undefined && !isRecord(raw.dns)) throw new Error('result dns is not an object');
  if (isRecord(raw.dns)) {
    for (const key of ['nameservers', 'search', 'options']) {
      const v = raw.dns[key];
      if (v !== undefined && v !== null && !isStringArray(v))
        throw new Error(`result dns.${key} is not a string array`);
    }
  }
  return raw as unknown as CniResult;
}

function checkArray(
  raw: Record<string, unknown>,
  key: string,
  check: (item: Record<string, unknown>, index: number) => void,
): void {
  const v = raw[key];
  // Go plugins marshal empty slices as null; treat that like absent.
  if (v === undefined || v === null) {
    delete raw[key];
    return;
  }
  if (!Array.isArray(v)) throw new Error(`result ${key} is not an array`);
  v.forEach((item: unknown, i) => {
    if (!isRecord(item)) throw new Error(`result ${key}[${i}] is not an object`);
    check(item, i);
  });
}

/**
 * The pod's IPs from a result: primary first (IPv4 preferred, as kubelet expects for dual stack),
 * without prefix lengths. Only addresses on the sandbox interface `ifName` count when the result
 * says which interface they belong to; otherwise (e.g. a plugin that omits interface indexes)
 * every address does. An empty `ip` means the result had no usable address.
 */
export function podIps(result: CniResult, ifName: string): { ip: string; additionalIps: string[] } {
  const ips = result.ips ?? [];
  const interfaces = result.interfaces ?? [];
  const onSandboxIf = ips.filter((ip) => {
    if (ip.interface === undefined) return false;
    const iface = interfaces[ip.interface];
    return iface !== undefined && iface.name === ifName && Boolean(iface.sandbox);
  });
  const chosen = onSandboxIf.length > 0 ? onSandboxIf : ips;

  const seen = new Set<string>();
  const v4: string[] = [];
  const v6: string[] = [];
  for (const { address } of chosen) {
    const addr = address.split('/')[0]?.trim() ?? '';
    const family = isIP(addr);
    if (family === 0 || seen.has(addr)) continue;
    seen.add(addr);
    (family === 4 ? v4 : v6).push(addr);
  }
  const ordered = [...v4, ...v6];
  return { ip: ordered[0] ?? '', additionalIps: ordered.slice(1) };
}
