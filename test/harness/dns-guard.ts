/**
 * Loaded into the berthd of the hostile-input suite with `node --import`, and active only where
 * DNS_GUARD_ENV is set (the suite imports this module too, for the markers): name lookups other
 * than of IP literals and localhost fail at once and are reported on stderr, so a hostile image
 * reference a parser wrongly defaults to a public registry can never reach the network, and the
 * suite can tell that it tried.
 */
import dns from 'node:dns';
import { isIP } from 'node:net';

/** Set to "1" in the environment of the process the guard is for. */
export const DNS_GUARD_ENV = 'BERTH_TEST_DNS_GUARD';
/** The stderr marker the suite looks for; the host name follows as JSON. */
export const DNS_BLOCKED_MARKER = 'berth-test-dns-blocked:';
/** Written once in place, so the suite knows before it sends any reference. */
export const DNS_GUARD_ACTIVE = 'berth-test-dns-guard: active';

function allowed(host: unknown): boolean {
  return typeof host === 'string' && (isIP(host) !== 0 || host === 'localhost');
}

function blocked(host: unknown): NodeJS.ErrnoException {
  const name = String(host).slice(0, 200);
  process.stderr.write(`${DNS_BLOCKED_MARKER} ${JSON.stringify(name)}\n`);
  const err: NodeJS.ErrnoException = new Error(`getaddrinfo ENOTFOUND ${name} (blocked by the test)`);
  err.code = 'ENOTFOUND';
  err.syscall = 'getaddrinfo';
  return err;
}

type LookupCallback = (err: NodeJS.ErrnoException | null, ...rest: unknown[]) => void;

function install(): void {
  const realLookup = dns.lookup.bind(dns) as (host: string, ...rest: unknown[]) => void;
  const realPromiseLookup = dns.promises.lookup.bind(dns.promises) as (
    host: string,
    ...rest: unknown[]
  ) => Promise<unknown>;
  // net and http read dns.lookup from the module object at call time, so replacing it here covers them.
  Object.assign(dns, {
    lookup(host: string, ...rest: unknown[]): void {
      if (allowed(host)) {
        realLookup(host, ...rest);
        return;
      }
      const callback = rest[rest.length - 1] as LookupCallback;
      process.nextTick(() => callback(blocked(host)));
    },
  });
  Object.assign(dns.promises, {
    lookup(host: string, ...rest: unknown[]): Promise<unknown> {
      return allowed(host) ? realPromiseLookup(host, ...rest) : Promise.reject(blocked(host));
    },
  });
  process.stderr.write(`${DNS_GUARD_ACTIVE}\n`);
}

if (process.env[DNS_GUARD_ENV] === '1') install();
