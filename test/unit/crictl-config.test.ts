import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { SETTINGS } from '../../src/config/settings.js';

const repo = new URL('../../../', import.meta.url);

describe('config/crictl.yaml', () => {
  it("points both endpoints at berthd's default socket", () => {
    const keys = topLevelScalars(readFileSync(new URL('config/crictl.yaml', repo), 'utf8'));
    const socket = `unix://${SETTINGS.socket.default}`;
    assert.equal(keys.get('runtime-endpoint'), socket);
    assert.equal(keys.get('image-endpoint'), socket);
    assert.equal(keys.get('pull-image-on-create'), 'false');
    assert.equal(keys.get('debug'), 'false');
    assert.match(keys.get('timeout') ?? '', /^\d+$/, 'timeout is whole seconds');
  });
});

/** `key: value` lines of a flat YAML file, comments and blank lines skipped: all crictl's config has. */
function topLevelScalars(yaml: string): Map<string, string> {
  const keys = new Map<string, string>();
  for (const line of yaml.split('\n')) {
    if (line.trim() === '' || line.startsWith('#')) continue;
    const match = /^([a-z-]+):\s*(\S+)\s*$/.exec(line);
    assert.ok(match, `not a flat "key: value" line: ${line}`);
    const [, key = '', value = ''] = match;
    assert.ok(!keys.has(key), `${key} given twice`);
    keys.set(key, value);
  }
  return keys;
}
