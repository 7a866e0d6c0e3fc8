/** `berthd --help`: every flag with its default, then every config file key with its default. */
import { SWITCHES } from './args.js';
import { keyLine } from './sample.js';
import { CONFIG_FILE, defaultText, FIELDS, SETTINGS, TOML_LAYOUT } from './settings.js';

interface Row {
  left: string;
  right: string;
}

export function helpText(defaultConfigPath: string): string {
  const flags: Row[] = [
    flagRow(`${CONFIG_FILE.flag.name} ${CONFIG_FILE.flag.arg}`, CONFIG_FILE.help, defaultConfigPath),
  ];
  for (const field of FIELDS) {
    const { flag, help } = SETTINGS[field];
    if (flag !== undefined) flags.push(flagRow(`${flag.name} ${flag.arg}`, help, defaultText(field).shown));
  }
  for (const { name, short, help } of SWITCHES) {
    flags.push({ left: short === undefined ? `    ${name}` : `${short}, ${name}`, right: help });
  }

  const keys: (Row | string)[] = [];
  for (const [table, names] of TOML_LAYOUT) {
    if (table !== '') keys.push('', `[${table}]`);
    for (const [name, field] of names) {
      const { flag, help } = SETTINGS[field];
      keys.push({ left: keyLine(name, field), right: `# ${flag?.name ?? `${help} (no flag)`}` });
    }
  }

  return `Usage: berthd [flags]

berthd serves the Kubernetes CRI (runtime.v1) on a unix socket.
Settings come from built-in defaults, then the config file, then flags; later wins.

Flags (--flag value or --flag=value):
${columns(flags).join('\n')}

Config file (TOML; every key optional; unknown keys are errors; paths absolute;
durations like "500ms", "30s", "1m30s"); every key with its default, and its flag if it has one:
${columns(keys).join('\n')}`;
}

function flagRow(left: string, help: string, shownDefault: string): Row {
  return { left: `    ${left}`, right: shownDefault === '' ? help : `${help} (default ${shownDefault})` };
}

/** Indented two columns, the second aligned; a plain string is a line of its own. */
function columns(rows: readonly (Row | string)[]): string[] {
  const width = Math.max(...rows.map((row) => (typeof row === 'string' ? 0 : row.left.length)));
  return rows.map((row) =>
    typeof row === 'string' ? (row === '' ? '' : `  ${row}`) : `  ${row.left.padEnd(width + 2)}${row.right}`,
  );
}
