/** The command line: berthd takes flags only, `--flag value` or `--flag=value`. */
import { ConfigError } from './error.js';
import { CONFIG_FILE, FIELDS, SETTINGS, type BerthConfig, type Field, type Flag } from './settings.js';
import type { FlagValues } from './values.js';

/** What berthd was asked to do; a switch other than run answers and exits. */
export type Action = 'run' | 'help' | 'version' | 'print-default-config';

export interface Switch {
  name: string;
  short?: string;
  help: string;
  action: Exclude<Action, 'run'>;
}

/** In --help order, which is also precedence: `--help --version` prints the help. */
export const SWITCHES: readonly Switch[] = [
  { name: '--help', short: '-h', help: 'Print this help and exit', action: 'help' },
  { name: '--version', help: 'Print the version and exit', action: 'version' },
  {
    name: '--print-default-config',
    help: 'Print the built-in defaults as a commented config file, and exit',
    action: 'print-default-config',
  },
];

/** Flags taking a value, in --help order. */
export const VALUE_FLAGS: readonly Flag[] = [
  CONFIG_FILE.flag,
  ...FIELDS.flatMap((field) => SETTINGS[field].flag ?? []),
];

export interface CommandLine {
  action: Action;
  /** Raw values of each value flag, by flag name; checked only once berthd is to run. */
  values: ReadonlyMap<string, FlagValues>;
}

/** Syntax only: known flags, values present. */
export function parseCommandLine(argv: readonly string[]): CommandLine {
  const actions = new Set<Action>();
  const values = new Map<string, FlagValues>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (arg === '--') {
      const rest = argv[i + 1];
      if (rest !== undefined) throw new ConfigError(`unexpected argument "${rest}": berthd takes only flags`);
      break;
    }
    if (!arg.startsWith('-') || arg === '-') {
      throw new ConfigError(`unexpected argument "${arg}": berthd takes only flags (see --help)`);
    }
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const name = eq === -1 ? arg : arg.slice(0, eq);

    const toggle = SWITCHES.find((s) => s.name === name || s.short === name);
    if (toggle !== undefined) {
      if (eq !== -1) throw new ConfigError(`${toggle.name} takes no value`);
      actions.add(toggle.action);
      continue;
    }
    const flag = VALUE_FLAGS.find((f) => f.name === name);
    if (flag === undefined) throw new ConfigError(`unknown flag ${name} (see --help)`);
    let value: string;
    if (eq !== -1) {
      value = arg.slice(eq + 1);
    } else {
      const next = argv[i + 1];
      if (next === undefined || (next.startsWith('-') && next !== '-')) {
        throw new ConfigError(
          `${flag.name} needs a value: ${flag.name} ${flag.arg} or ${flag.name}=${flag.arg}`,
        );
      }
      value = next;
      i++;
    }
    const all = [...(values.get(flag.name)?.all ?? []), value];
    values.set(flag.name, { last: value, all });
  }
  const action = SWITCHES.find((s) => actions.has(s.action))?.action ?? 'run';
  return { action, values };
}

const FIELD_OF_FLAG = new Map(
  FIELDS.flatMap((field): [string, Field][] => {
    const flag = SETTINGS[field].flag;
    return flag === undefined ? [] : [[flag.name, field]];
  }),
);

/** The settings given as flags, checked in the order the flags first appear. */
export function flagLayer(values: ReadonlyMap<string, FlagValues>): Partial<BerthConfig> {
  const layer: Partial<BerthConfig> = {};
  for (const [flag, given] of values) {
    const field = FIELD_OF_FLAG.get(flag);
    if (field !== undefined) readFlag(layer, field, given, flag);
  }
  return layer;
}

function readFlag<F extends Field>(
  layer: Partial<BerthConfig>,
  field: F,
  values: FlagValues,
  flag: string,
): void {
  layer[field] = SETTINGS[field].kind.fromFlag(values, flag);
}
