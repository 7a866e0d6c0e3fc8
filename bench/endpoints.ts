/**
 * What a side-by-side benchmark needs of the runtimes it compares: the other runtime reached by its
 * socket alone (its name, its daemon's pid for memory), and samples taken in alternation.
 */
import { readdir, readFile, readlink } from 'node:fs/promises';
import { CriClient } from '../test/harness/client.js';

/** Another CRI runtime, known only by its socket. */
export interface OtherRuntime {
  /** Its runtime_name from Version, e.g. `containerd`. */
  name: string;
  version: string;
  socket: string;
  cri: CriClient;
  /** The process serving the socket, for its memory; undefined where it cannot be found. */
  pid: number | undefined;
}

/** The socket path of a `unix:///path` endpoint; anything else is refused. */
export function socketOfEndpoint(address: string): string {
  if (!address.startsWith('unix:///')) throw new Error(`a CRI endpoint is unix:///path, not ${address}`);
  return address.slice('unix://'.length);
}

/** Connects to the CRI endpoint `address` and asks its name; fails when nothing answers. */
export async function connectOther(address: string): Promise<OtherRuntime> {
  const socket = socketOfEndpoint(address);
  const cri = new CriClient(socket);
  const version = await cri
    .call<{ runtime_name: string; runtime_version: string }>('Version', { version: 'v1' })
    .catch((err: unknown) => {
      cri.close();
      throw err;
    });
  return {
    name: version.runtime_name || 'other',
    version: version.runtime_version,
    socket,
    cri,
    pid: await socketOwner(socket),
  };
}

/**
 * The process listening on a unix socket: the socket's inode from /proc/net/unix, then the process
 * holding it. The compare endpoint is only a path, and its daemon's memory is the figure wanted.
 */
export async function socketOwner(path: string): Promise<number | undefined> {
  const table = await readFile('/proc/net/unix', 'utf8').catch(() => '');
  const inodes = new Set(
    table
      .split('\n')
      .map((row) => row.trim().split(/\s+/))
      .filter((fields) => fields[7] === path)
      .map((fields) => `socket:[${fields[6]}]`),
  );
  if (inodes.size === 0) return undefined;
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    const fds = await readdir(`/proc/${entry}/fd`).catch(() => [] as string[]);
    for (const fd of fds) {
      if (inodes.has(await readlink(`/proc/${entry}/fd/${fd}`).catch(() => ''))) return Number(entry);
    }
  }
  return undefined;
}

/**
 * Runs `sample` for each endpoint `n` times, alternating which goes first, so drift on the machine
 * (page cache, CPU frequency, other load) falls on both alike.
 */
export async function interleaved<Endpoint, T>(
  endpoints: readonly Endpoint[],
  n: number,
  sample: (ep: Endpoint, i: number) => Promise<T>,
): Promise<Map<Endpoint, T[]>> {
  const results = new Map(endpoints.map((ep) => [ep, [] as T[]]));
  for (let i = 0; i < n; i++) {
    const order = i % 2 === 0 ? endpoints : [...endpoints].reverse();
    for (const ep of order) results.get(ep)?.push(await sample(ep, i));
  }
  return results;
}
