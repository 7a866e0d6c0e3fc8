import { isIP } from 'node:net';

/**
 * `host:port` as berth's listening addresses are written: an IP address (IPv6 in brackets),
 * `localhost`, or nothing for every address; port 0 asks for a free one.
 */
export function parseHostPort(value: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s]*)):(\d{1,5})$/.exec(value);
  const port = Number(m?.[3] ?? -1);
  if (!m || port > 65535) throw new Error(`"${value}" is not HOST:PORT (e.g. 127.0.0.1:0 or [::1]:10010)`);
  const host = m[1] ?? m[2] ?? '';
  if (host !== '' && isIP(host) === 0 && host !== 'localhost') {
    throw new Error(`"${host}" must be an IP address or localhost`);
  }
  return { host, port };
}
