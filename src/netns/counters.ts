/**
 * Interface counters of a network namespace, from its /proc/net/dev. /proc/<pid>/net/dev shows the
 * namespace of that process, so when a process known to be in the namespace is given (checked by
 * comparing namespace inodes, so a reused pid cannot show another namespace's counters) no program
 * is run; otherwise `nsenter --net=<pinned path>` reads the file inside the namespace.
 */
import { readFile, stat } from 'node:fs/promises';
import { run } from '../exec.js';

export interface InterfaceCounters {
  name: string;
  rxBytes: bigint;
  rxPackets: bigint;
  rxErrors: bigint;
  rxDropped: bigint;
  txBytes: bigint;
  txPackets: bigint;
  txErrors: bigint;
  txDropped: bigint;
}

export interface CounterReadOptions {
  /** A process believed to be in the namespace, or 0 for none. */
  pid: number;
  timeoutMs: number;
  nsenter?: string;
}

/** Every interface of the namespace at `netnsPath` with its counters, loopback included. */
export async function readInterfaceCounters(
  netnsPath: string,
  opts: CounterReadOptions,
): Promise<InterfaceCounters[]> {
  if (opts.pid > 0 && (await sameNamespace(`/proc/${opts.pid}/ns/net`, netnsPath))) {
    // The process may exit between the check and the read: then the namespace is asked directly.
    const text = await readFile(`/proc/${opts.pid}/net/dev`, 'utf8').catch(() => null);
    if (text !== null) return parseNetDev(text);
  }
  const { stdout } = await run(
    opts.nsenter ?? 'nsenter',
    [`--net=${netnsPath}`, '--', 'cat', '/proc/net/dev'],
    { timeoutMs: opts.timeoutMs },
  );
  return parseNetDev(stdout);
}

async function sameNamespace(a: string, b: string): Promise<boolean> {
  const [sa, sb] = await Promise.all([stat(a).catch(() => null), stat(b).catch(() => null)]);
  return sa !== null && sb !== null && sa.dev === sb.dev && sa.ino === sb.ino;
}

/**
 * /proc/net/dev: two header lines, then "name: rx bytes packets errs drop fifo frame compressed
 * multicast tx bytes packets errs drop fifo colls carrier compressed".
 */
export function parseNetDev(text: string): InterfaceCounters[] {
  const out: InterfaceCounters[] = [];
  for (const line of text.split('\n')) {
    const m = /^\s*([^:\s]+):\s*(.*)$/.exec(line);
    if (!m?.[1] || m[2] === undefined) continue;
    const fields = m[2].trim().split(/\s+/);
    if (fields.length < 16 || !fields.every((f) => /^\d+$/.test(f))) continue;
    const n = fields.map((f) => BigInt(f));
    out.push({
      name: m[1],
      rxBytes: n[0] ?? 0n,
      rxPackets: n[1] ?? 0n,
      rxErrors: n[2] ?? 0n,
      rxDropped: n[3] ?? 0n,
      txBytes: n[8] ?? 0n,
      txPackets: n[9] ?? 0n,
      txErrors: n[10] ?? 0n,
      txDropped: n[11] ?? 0n,
    });
  }
  return out;
}
