import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { CONFIG_FILE, defaultText, FIELDS, SETTINGS } from '../../src/config/settings.js';

const repo = new URL('../../../', import.meta.url);

describe('config/berth.toml', () => {
  it('is what berthd --print-default-config prints', async () => {
    const main = new URL('dist/src/main.js', repo).pathname;
    const { stdout } = await promisify(execFile)(process.execPath, [main, '--print-default-config']);
    assert.equal(
      readFileSync(new URL('config/berth.toml', repo), 'utf8'),
      stdout,
      'regenerate it: node dist/src/main.js --print-default-config > config/berth.toml',
    );
  });
});

describe("README's Configuration table", () => {
  it('lists every setting with its flag, key and default, and nothing else', () => {
    const [header, ...rows] = configurationTable(readFileSync(new URL('README.md', repo), 'utf8'));
    assert.deepEqual(header, ['Flag', 'Config key', 'Default']);
    assert.deepEqual(rows, expectedRows());
  });
});

/** The cells of the first table in the README's "## Configuration" section, without the separator row. */
function configurationTable(readme: string): string[][] {
  const start = readme.indexOf('\n## Configuration\n');
  assert.notEqual(start, -1, 'README has no "## Configuration" section');
  const end = readme.indexOf('\n## ', start + 1);
  const lines = readme.slice(start, end === -1 ? undefined : end).split('\n');
  const first = lines.findIndex((line) => line.startsWith('|'));
  const table = lines.slice(
    first,
    lines.findIndex((line, i) => i > first && !line.startsWith('|')),
  );
  return table
    .filter((line) => !/^\|[\s|:-]+\|$/.test(line))
    .map((line) =>
      line
        .split('|')
        .slice(1, -1)
        .map((cell) => cell.trim()),
    );
}

function expectedRows(): string[][] {
  const code = (text: string): string => `\`${text}\``;
  const configFile = CONFIG_FILE.flag;
  return [
    [code(`${configFile.name} ${configFile.arg}`), '(none)', code(CONFIG_FILE.default)],
    ...FIELDS.map((field) => {
      const { flag, key } = SETTINGS[field];
      const { shown } = defaultText(field);
      return [
        flag === undefined ? '(none)' : code(`${flag.name} ${flag.arg}`),
        code(key),
        shown === '' ? '(none)' : code(shown),
      ];
    }),
  ];
}
