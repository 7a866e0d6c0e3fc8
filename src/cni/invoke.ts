import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { errorMessage, ExecError } from '../errors.js';
import { run } from '../exec.js';
import { isSafePluginType } from './config.js';
import { CniError, type CniCommand } from './errors.js';
import { isRecord, parseJson, type JsonObject } from './json.js';

/** portmap and firewall shell out to iptables; plugins get no other part of the daemon's environment. */
const PLUGIN_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface PluginCall {
  command: CniCommand;
  network: string;
  plugin: string;
  containerId: string;
  netnsPath: string;
  ifName: string;
  /** Already encoded `K=V;K=V`. */
  cniArgs: string;
  conf: JsonObject;
}

export interface InvokeOptions {
  binDirs: readonly string[];
  timeoutMs: number;
  /** Called once the plugin's binary is found, right before it is run; a throw stops it from running. */
  beforeRun?: () => void;
}

/** First executable regular file named `type` in binDirs, in order (as libcni's FindInPath). */
export async function findPlugin(type: string, binDirs: readonly string[]): Promise<string | undefined> {
  if (!isSafePluginType(type)) return undefined;
  for (const dir of binDirs) {
    const file = join(dir, type);
    try {
      if ((await stat(file)).isFile()) {
        await access(file, constants.X_OK);
        return file;
      }
    } catch {
      // Not in this dir (or not executable): keep looking.
    }
  }
  return undefined;
}

/** Runs one plugin once and returns its stdout; any failure becomes a CniError with the plugin's own words. */
export async function invokePlugin(call: PluginCall, opts: InvokeOptions): Promise<string> {
  const info = { command: call.command, network: call.network, plugin: call.plugin };
  const bin = await findPlugin(call.plugin, opts.binDirs);
  if (bin === undefined) {
    throw new CniError(
      info,
      `plugin binary "${call.plugin}" not found in ${opts.binDirs.join(', ') || '(no bin dirs)'}`,
    );
  }
  opts.beforeRun?.();
  const env: Record<string, string> = {
    CNI_COMMAND: call.command,
    CNI_CONTAINERID: call.containerId,
    CNI_NETNS: call.netnsPath,
    CNI_IFNAME: call.ifName,
    CNI_ARGS: call.cniArgs,
    CNI_PATH: opts.binDirs.join(':'),
    PATH: PLUGIN_PATH,
  };
  try {
    const { stdout } = await run(bin, [], {
      timeoutMs: opts.timeoutMs,
      input: JSON.stringify(call.conf),
      env,
      extendEnv: false,
    });
    return stdout;
  } catch (err) {
    throw toCniError(err, info, opts.timeoutMs);
  }
}

function toCniError(
  err: unknown,
  info: ConstructorParameters<typeof CniError>[0],
  timeoutMs: number,
): CniError {
  if (!(err instanceof ExecError)) return new CniError(info, errorMessage(err));
  if (err.timedOut) return new CniError({ ...info, timedOut: true }, `timed out after ${timeoutMs} ms`);
  // Plugins report errors as JSON on stdout. run() hands that back in `stderr` when the plugin
  // wrote nothing to stderr; prefer a real `stdout` field should ExecError ever carry one.
  const texts = 'stdout' in err && typeof err.stdout === 'string' ? [err.stdout, err.stderr] : [err.stderr];
  for (const text of texts) {
    const pluginErr = parsePluginError(text);
    if (pluginErr) {
      return new CniError({ ...info, code: pluginErr.code, details: pluginErr.details }, pluginErr.msg);
    }
  }
  const said = err.stderr.trim();
  return new CniError(info, `exited with code ${err.exitCode ?? 'unknown'}${said ? `: ${said}` : ''}`);
}

interface PluginErrorJson {
  code: number | undefined;
  msg: string;
  details: string | undefined;
}

/** The spec's error object {cniVersion, code, msg, details}; tolerates log lines before it. */
export function parsePluginError(text: string): PluginErrorJson | undefined {
  const trimmed = text.trim();
  const start = trimmed.startsWith('{') ? 0 : trimmed.indexOf('\n{') + 1;
  if (trimmed[start] !== '{') return undefined;
  const parsed = parseJson(trimmed.slice(start));
  if (!parsed.ok || !isRecord(parsed.value)) return undefined;
  const { code, msg, details } = parsed.value;
  if (typeof msg !== 'string' && typeof code !== 'number') return undefined;
  return {
    code: typeof code === 'number' ? code : undefined,
    msg: typeof msg === 'string' && msg !== '' ? msg : '(plugin gave no message)',
    details: typeof details === 'string' && details !== '' ? details : undefined,
  };
}
