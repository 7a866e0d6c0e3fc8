/**
 * berthd's configuration: built-in defaults < TOML config file < command-line flags.
 * Everything is checked here, once, so the rest of the daemon can trust a BerthConfig.
 */
import { statSync } from 'node:fs';
import { posix } from 'node:path';
import { BERTH_VERSION } from '../version.js';
import { flagLayer, parseCommandLine } from './args.js';
import { ConfigError } from './error.js';
import { readConfigFile } from './file.js';
import { helpText } from './help.js';
import { sampleConfig } from './sample.js';
import { CONFIG_FILE, defaultConfig, SETTINGS, type BerthConfig, type Field } from './settings.js';

export type LoadResult =
  { kind: 'run'; config: BerthConfig } | { kind: 'help' | 'version' | 'default-config'; text: string };

/** Seams for tests; the daemon passes none of them. */
export interface LoadOptions {
  /** File read when --config is not given; a missing one is fine. */
  defaultConfigPath?: string;
  /** Whether the host runs systemd. Defaults to checking that /run/systemd/system is a directory. */
  hostRunsSystemd?: () => boolean;
  /** Directory a relative --config is resolved against. Defaults to process.cwd(). */
  cwd?: string;
}

const SYSTEMD_MARKER = '/run/systemd/system';

export function loadConfig(argv: string[], opts: LoadOptions = {}): LoadResult {
  const defaultConfigPath = opts.defaultConfigPath ?? CONFIG_FILE.default;
  const args = parseCommandLine(argv);
  switch (args.action) {
    case 'help':
      return { kind: 'help', text: helpText(defaultConfigPath) };
    case 'version':
      return { kind: 'version', text: `berthd ${BERTH_VERSION}` };
    case 'print-default-config':
      return { kind: 'default-config', text: sampleConfig() };
    case 'run':
      break;
  }

  const fromFlags = flagLayer(args.values);
  const configFlag = args.values.get(CONFIG_FILE.flag.name)?.last;
  if (configFlag === '') throw new ConfigError(`${CONFIG_FILE.flag.name}: empty path`);
  const file =
    configFlag === undefined
      ? readConfigFile(defaultConfigPath, false)
      : readConfigFile(posix.resolve(opts.cwd ?? process.cwd(), configFlag), true);

  const config: BerthConfig = { ...defaultConfig(), ...file?.values, ...fromFlags };

  if (config.cgroupDriver === 'systemd' && !(opts.hostRunsSystemd ?? hostRunsSystemd)()) {
    const source =
      fromFlags.cgroupDriver !== undefined
        ? flagOrKey('cgroupDriver')
        : `${file?.path ?? ''}: ${SETTINGS.cgroupDriver.key}`;
    throw new ConfigError(
      `${source}: cgroup driver "systemd" needs a host running systemd, and ${SYSTEMD_MARKER} does not exist; use "cgroupfs"`,
    );
  }
  if ((config.streamingTlsCert === '') !== (config.streamingTlsKey === '')) {
    throw new ConfigError(
      `streaming TLS needs both a certificate and a key (${flagOrKey('streamingTlsCert')} and ${flagOrKey('streamingTlsKey')}, or ${SETTINGS.streamingTlsCert.key} and ${SETTINGS.streamingTlsKey.key})`,
    );
  }
  if (config.rootDir === config.stateDir) {
    throw new ConfigError(
      `root and state directories must differ (both are ${config.rootDir}): state must be emptied by a reboot, root must survive it`,
    );
  }
  return { kind: 'run', config };
}

/** Names a setting by its flag, or by its key if it has no flag. */
function flagOrKey(field: Field): string {
  return SETTINGS[field].flag?.name ?? SETTINGS[field].key;
}

/** systemd's own test (sd_booted): it made its runtime dir, so it runs as init here. */
export function hostRunsSystemd(): boolean {
  try {
    return statSync(SYSTEMD_MARKER).isDirectory();
  } catch {
    return false;
  }
}
