import type { Logger } from '../log.js';
import { CniError, type CniCommand } from './errors.js';
import { invokePlugin } from './invoke.js';
import { parseJson, type JsonObject } from './json.js';
import { validateCniResult } from './result.js';
import type { CniAttachment, CniNetworkList, CniPluginConf, CniResult } from './types.js';
import { compareCniVersions, isSupportedCniVersion } from './version.js';

export * from './types.js';
export { CniError, type CniCommand } from './errors.js';
export { podIps } from './result.js';
export { loadUsableNetwork } from './readiness.js';
export { loadDefaultNetwork, loopbackNetwork, parseNetworkConfig, type LoadNetworkResult } from './config.js';

export interface CniOptions {
  /** Searched in order for plugin binaries; also passed to plugins as CNI_PATH (for IPAM delegation). */
  binDirs: string[];
  /** Deadline for each plugin exec, not for the whole chain. */
  timeoutMs: number;
  logger?: Logger;
  /** Told of each plugin exec's end (berthd's metrics); failures included. */
  onPluginDone?: (done: PluginDone) => void;
}

export interface PluginDone {
  command: CniCommand;
  plugin: string;
  seconds: number;
  ok: boolean;
}

export interface AddHooks {
  /**
   * Called with a plugin's index in the chain once its binary is found and before its ADD runs,
   * so that the caller can journal which plugins will need a DEL.
   */
  beforePlugin?: (index: number) => void;
}

/** Drives CNI plugin chains (network configuration lists) for one sandbox attachment at a time. */
export class Cni {
  constructor(private readonly opts: CniOptions) {}

  /**
   * ADD through the chain; each plugin sees the previous one's result. Undoing a half-done chain is
   * the caller's job (it registers a DEL before calling), so a failure here just throws.
   */
  async add(net: CniNetworkList, at: CniAttachment, hooks: AddHooks = {}): Promise<CniResult> {
    const cniArgs = checkInputs('ADD', net, at);
    let prev: CniResult | undefined;
    for (const [index, plugin] of net.plugins.entries()) {
      const conf = pluginConf(net, plugin, at, prev);
      const beforeRun = hooks.beforePlugin && (() => hooks.beforePlugin?.(index));
      const stdout = await this.invoke('ADD', net, plugin, at, cniArgs, conf, beforeRun);
      prev = parseResult(stdout, net, plugin);
    }
    if (prev === undefined)
      throw new CniError({ command: 'ADD', network: net.name }, 'network has no plugins');
    return prev;
  }

  /**
   * DEL through the chain in reverse, stopping at the first failure as libcni does: the plugins
   * before it in the chain (IPAM above all) keep their state, so the IP is not handed to another
   * pod while a later plugin may still hold rules for it. The caller retries the whole DEL.
   * `started` limits it to the chain's first plugins, those whose ADD ran; 0 runs nothing.
   */
  async del(
    net: CniNetworkList,
    at: CniAttachment,
    prevResult?: CniResult,
    started = net.plugins.length,
  ): Promise<void> {
    if (started === 0) return;
    const cniArgs = checkInputs('DEL', net, at);
    // prevResult on DEL arrived with spec 0.4.0; 0.3.x plugins may reject the unknown key.
    const prev =
      prevResult !== undefined && compareCniVersions(net.cniVersion, '0.4.0') >= 0 ? prevResult : undefined;
    for (const plugin of net.plugins.slice(0, started).reverse()) {
      await this.invoke('DEL', net, plugin, at, cniArgs, pluginConf(net, plugin, at, prev));
    }
  }

  private async invoke(
    command: CniCommand,
    net: CniNetworkList,
    plugin: CniPluginConf,
    at: CniAttachment,
    cniArgs: string,
    conf: JsonObject,
    beforeRun?: () => void,
  ): Promise<string> {
    const started = Date.now();
    const log = { command, network: net.name, plugin: plugin.type, containerId: at.containerId };
    const done = (ok: boolean): void =>
      this.opts.onPluginDone?.({ command, plugin: plugin.type, seconds: (Date.now() - started) / 1000, ok });
    try {
      const stdout = await invokePlugin(
        {
          command,
          network: net.name,
          plugin: plugin.type,
          containerId: at.containerId,
          netnsPath: at.netnsPath,
          ifName: at.ifName,
          cniArgs,
          conf,
        },
        { binDirs: this.opts.binDirs, timeoutMs: this.opts.timeoutMs, ...(beforeRun ? { beforeRun } : {}) },
      );
      this.opts.logger?.debug({ ...log, ms: Date.now() - started }, 'cni plugin done');
      done(true);
      return stdout;
    } catch (err) {
      this.opts.logger?.warn({ ...log, ms: Date.now() - started, err }, 'cni plugin failed');
      done(false);
      throw err;
    }
  }
}

/**
 * What a plugin reads on stdin: its own entry plus the list's name and version (the list's version
 * wins over any per-plugin one), the previous result, and only the capability args it asked for.
 */
function pluginConf(
  net: CniNetworkList,
  plugin: CniPluginConf,
  at: CniAttachment,
  prevResult: CniResult | undefined,
): JsonObject {
  const conf: JsonObject = { ...plugin, name: net.name, cniVersion: net.cniVersion };
  delete conf.prevResult;
  if (prevResult !== undefined) conf.prevResult = prevResult;

  const runtimeConfig: JsonObject = {};
  for (const [key, value] of Object.entries(at.capabilityArgs)) {
    if (value !== undefined && plugin.capabilities?.[key] === true) runtimeConfig[key] = value;
  }
  if (Object.keys(runtimeConfig).length > 0) conf.runtimeConfig = runtimeConfig;
  return conf;
}

function parseResult(stdout: string, net: CniNetworkList, plugin: CniPluginConf): CniResult {
  const info = { command: 'ADD' as const, network: net.name, plugin: plugin.type };
  if (stdout.trim() === '') throw new CniError(info, 'plugin printed no result');
  const parsed = parseJson(stdout);
  if (!parsed.ok) throw new CniError(info, `plugin printed invalid JSON: ${parsed.error}`);
  try {
    return validateCniResult(parsed.value, net.cniVersion);
  } catch (err) {
    throw new CniError(info, err instanceof Error ? err.message : String(err));
  }
}

/** Rejects inputs that would be mangled in the env/stdin encoding; returns the encoded CNI_ARGS. */
function checkInputs(command: CniCommand, net: CniNetworkList, at: CniAttachment): string {
  const bad = (problem: string): CniError => new CniError({ command, network: net.name }, problem);
  if (!isSupportedCniVersion(net.cniVersion)) throw bad(`unsupported cniVersion "${net.cniVersion}"`);
  if (net.plugins.length === 0) throw bad('network has no plugins');
  if (at.containerId === '') throw bad('empty container id');
  if (at.ifName === '') throw bad('empty interface name');
  for (const [k, v] of at.args) {
    if (k === '' || /[;=]/.test(k) || v.includes(';'))
      throw bad(`CNI_ARGS entry ${JSON.stringify([k, v])} cannot be encoded`);
  }
  return at.args.map(([k, v]) => `${k}=${v}`).join(';');
}
