import { loadDefaultNetwork, loopbackNetwork, type LoadNetworkResult } from './config.js';
import { findPlugin } from './invoke.js';
import { isRecord } from './json.js';
import type { CniPluginConf } from './types.js';

/**
 * The default network, only if every plugin a pod's attachment runs (loopback's and the default
 * network's) is in a bin dir, as libcni's validation checks. A network that loads but whose
 * binaries are missing would fail every RunPodSandbox, so the node must not call itself ready.
 */
export async function loadUsableNetwork(
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
