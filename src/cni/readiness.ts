import { SingleFlight } from '../kit/single-flight.js';
import { loadDefaultNetwork, loopbackNetwork, type LoadNetworkResult } from './config.js';
import { DirWatch } from './dir-watch.js';
import { findPlugin } from './invoke.js';
import { isRecord } from './json.js';
import type { CniPluginConf } from './types.js';

/**
 * How long a usable network is trusted without reading the conf dir again, in case inotify missed
 * a change (a full queue, or a config that is a symlink whose target changed).
 */
export const REVALIDATE_MS = 2_000;

/**
 * The default network, only if every plugin a pod's attachment runs (loopback's and the default
 * network's) is in a bin dir, as libcni's validation checks. A network that loads but whose
 * binaries are missing would fail every RunPodSandbox, so the node must not call itself ready.
 * Served from a cache that a change in the conf dir or a bin dir clears (see NetworkCache).
 */
export function loadUsableNetwork(confDir: string, binDirs: readonly string[]): Promise<LoadNetworkResult> {
  // berthd has one conf dir and one bin dir list: one cache, replaced should the caller change them.
  if (!current?.serves(confDir, binDirs)) {
    current?.close();
    current = new NetworkCache(confDir, binDirs);
  }
  return current.load();
}

let current: NetworkCache | undefined;

/**
 * A usable network as checkUsableNetwork finds it, read again only after a change in the conf dir
 * or a bin dir (inotify), or once it is REVALIDATE_MS old. A network that is not usable is never
 * kept: it is looked for on every call, so a config or a plugin binary installed later applies at
 * once, even in a bin dir that did not exist when the watches were set.
 */
export class NetworkCache {
  private usable: { result: LoadNetworkResult; loadedAt: number } | undefined;
  /** Bumped by every change seen: a load that began before a change is not kept, nor joined. */
  private generation = 0;
  /** Loads under way, keyed by the generation each began in. */
  private readonly loads = new SingleFlight<LoadNetworkResult>();
  private readonly watch = new DirWatch(() => {
    this.generation++;
    this.usable = undefined;
  });

  constructor(
    private readonly confDir: string,
    private readonly binDirs: readonly string[],
    private readonly now: () => number = Date.now,
  ) {}

  serves(confDir: string, binDirs: readonly string[]): boolean {
    return (
      confDir === this.confDir &&
      binDirs.length === this.binDirs.length &&
      binDirs.every((dir, i) => dir === this.binDirs[i])
    );
  }

  load(): Promise<LoadNetworkResult> {
    if (this.usable && this.now() - this.usable.loadedAt < REVALIDATE_MS) {
      return Promise.resolve(this.usable.result);
    }
    const generation = this.generation;
    return this.loads.run(String(generation), () => this.read(generation));
  }

  close(): void {
    this.watch.close();
  }

  private async read(generation: number): Promise<LoadNetworkResult> {
    // Watching starts before reading: a change made while this reads is seen, not lost.
    this.watch.rearm([this.confDir, ...this.binDirs]);
    const loadedAt = this.now();
    const result = await checkUsableNetwork(this.confDir, this.binDirs);
    if (result.network && generation === this.generation) this.usable = { result, loadedAt };
    return result;
  }
}

/** What loadUsableNetwork answers, read from disk every time. */
export async function checkUsableNetwork(
  confDir: string,
  binDirs: readonly string[],
): Promise<LoadNetworkResult> {
  const loaded = await loadDefaultNetwork(confDir);
  if (!loaded.network) return loaded;
  const plugins = [...loopbackNetwork().plugins, ...loaded.network.plugins];
  // The IPAM plugin is delegated to by its main plugin through CNI_PATH: missing, every ADD fails too.
  const types = plugins.flatMap((plugin) => [plugin.type, ...ipamType(plugin)]);
  const missing: string[] = [];
  for (const type of new Set(types)) {
    if ((await findPlugin(type, binDirs)) === undefined) missing.push(type);
  }
  if (missing.length === 0) return loaded;
  const names = missing.map((type) => `"${type}"`).join(', ');
  const dirs = binDirs.length > 0 ? binDirs.join(', ') : '(no bin dirs configured)';
  return {
    network: null,
    reason: `network "${loaded.network.name}" in ${loaded.file} needs plugin binaries not found in ${dirs}: ${names}`,
  };
}

function ipamType(plugin: CniPluginConf): string[] {
  const ipam = plugin.ipam;
  return isRecord(ipam) && typeof ipam.type === 'string' ? [ipam.type] : [];
}
