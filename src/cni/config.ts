import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { errorMessage } from '../errors.js';
import { isRecord, parseJson } from './json.js';
import type { CniNetworkList, CniPluginConf } from './types.js';
import { isSupportedCniVersion, MAX_CNI_VERSION, MIN_CNI_VERSION } from './version.js';

export type LoadNetworkResult = { network: CniNetworkList; file: string } | { network: null; reason: string };

const CONF_EXTENSIONS = ['.conf', '.conflist', '.json'] as const;

/** Spec rule for network names: also keeps them safe as path components in plugin state dirs. */
const NETWORK_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

/**
 * The default network: the first file (lexical order, like libcni/containerd) ending in
 * .conf/.conflist/.json that holds a valid network. Invalid files are skipped rather than fatal, so one
 * stray file cannot take pod networking down; if none loads, `reason` says why for each.
 */
export async function loadDefaultNetwork(confDir: string): Promise<LoadNetworkResult> {
  let names: string[];
  try {
    names = await readdir(confDir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return { network: null, reason: `CNI config dir ${confDir} does not exist` };
    if (code === 'ENOTDIR') return { network: null, reason: `CNI config dir ${confDir} is not a directory` };
    return { network: null, reason: `cannot read CNI config dir ${confDir}: ${errorMessage(err)}` };
  }

  const candidates = names.filter((n) => CONF_EXTENSIONS.some((ext) => n.endsWith(ext))).sort();
  const problems: string[] = [];
  for (const name of candidates) {
    const file = join(confDir, name);
    let text: string;
    try {
      // stat follows symlinks: config managers often symlink the active config into place.
      if (!(await stat(file)).isFile()) continue;
      text = await readFile(file, 'utf8');
    } catch (err) {
      problems.push(`${name}: cannot read: ${errorMessage(err)}`);
      continue;
    }
    const parsed = parseNetworkConfig(text, name);
    if (parsed.ok) return { network: parsed.network, file };
    problems.push(`${name}: ${parsed.error}`);
  }

  if (problems.length === 0) {
    return { network: null, reason: `no CNI network config (*.conf, *.conflist, *.json) in ${confDir}` };
  }
  return { network: null, reason: `no valid CNI network config in ${confDir}: ${problems.join('; ')}` };
}

/**
 * Parses one config file's text. A .conflist must be a list; .conf/.json may be either a single
 * plugin config (wrapped into a one-plugin list) or a list.
 */
export function parseNetworkConfig(
  text: string,
  fileName: string,
): { ok: true; network: CniNetworkList } | { ok: false; error: string } {
  const parsed = parseJson(text);
  if (!parsed.ok) return { ok: false, error: `invalid JSON: ${parsed.error}` };
  try {
    return { ok: true, network: toNetworkList(parsed.value, fileName.endsWith('.conflist')) };
  } catch (err) {
    return { ok: false, error: errorMessage(err) };
  }
}

function toNetworkList(raw: unknown, mustBeList: boolean): CniNetworkList {
  if (!isRecord(raw)) throw new Error('not a JSON object');
  const name = checkName(raw.name);
  const cniVersion = checkVersion(raw.cniVersion);

  if (raw.plugins === undefined) {
    if (mustBeList) throw new Error('a .conflist needs a "plugins" array');
    return { cniVersion, name, plugins: [checkPlugin(raw, 'config')] };
  }
  if (!Array.isArray(raw.plugins)) throw new Error('"plugins" is not an array');
  if (raw.plugins.length === 0) throw new Error('"plugins" is empty');
  const plugins = raw.plugins.map((p: unknown, i) => checkPlugin(p, `plugins[${i}]`));

  const list: CniNetworkList = { cniVersion, name, plugins };
  if (raw.disableCheck !== undefined) {
    if (typeof raw.disableCheck !== 'boolean') throw new Error('"disableCheck" is not a boolean');
    list.disableCheck = raw.disableCheck;
  }
  return list;
}

function checkName(v: unknown): string {
  if (v === undefined) throw new Error('missing "name"');
  if (typeof v !== 'string' || !NETWORK_NAME.test(v)) {
    throw new Error(
      `invalid network name ${JSON.stringify(v)} (letters, digits, _ . - ; starting alphanumeric)`,
    );
  }
  return v;
}

function checkVersion(v: unknown): string {
  if (v === undefined) throw new Error('missing "cniVersion"');
  if (typeof v !== 'string' || !isSupportedCniVersion(v)) {
    throw new Error(
      `unsupported cniVersion ${JSON.stringify(v)} (supported: ${MIN_CNI_VERSION} to ${MAX_CNI_VERSION})`,
    );
  }
  return v;
}

function checkPlugin(raw: unknown, where: string): CniPluginConf {
  if (!isRecord(raw)) throw new Error(`${where} is not a JSON object`);
  const type = raw.type;
  if (typeof type !== 'string' || type === '') throw new Error(`${where} has no "type" string`);
  // The type becomes an executable name looked up in the bin dirs: it must not be a path.
  if (!isSafePluginType(type)) throw new Error(`${where} has an invalid type ${JSON.stringify(type)}`);
  if (raw.capabilities !== undefined && !isBoolRecord(raw.capabilities)) {
    throw new Error(`${where} "capabilities" must map names to booleans`);
  }
  return { ...raw, type };
}

export function isSafePluginType(type: string): boolean {
  return type !== '' && type !== '.' && type !== '..' && !type.includes('/') && !type.includes('\0');
}

function isBoolRecord(v: unknown): v is Record<string, boolean> {
  return isRecord(v) && Object.values(v).every((b) => typeof b === 'boolean');
}

/** The network every sandbox gets first so `lo` is up, independent of the default network. */
export function loopbackNetwork(): CniNetworkList {
  return { cniVersion: '1.0.0', name: 'cni-loopback', plugins: [{ type: 'loopback' }] };
}
