/**
 * The README's Architecture picture, held against the code: every room of src/ (a folder, or a
 * file at its top) is on a row, and a room imports only from rooms on rows below its own. The
 * picture is what a reader trusts before opening a file; this keeps it true.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

// dist/test/unit → the checkout.
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const SRC = join(ROOT, 'src');

/** Rows of the picture, top first: each row the rooms named on it ("cri/", "daemon.ts"). */
function pictureRows(): string[][] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Architecture'));
  const picture = /```\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(picture, 'the Architecture section has a picture');
  const rows: string[][] = [];
  for (const line of picture.split('\n')) {
    // A row names its rooms before the wide gap that starts its description.
    const names = (line.split(/\s{3,}/).find((part) => part.trim() !== '') ?? '').trim();
    const rooms = names
      .split(/\s+|→/)
      .map((word) => word.replace(/[()]/g, ''))
      .filter((word) => /^[a-z-]+(\/|\.ts)$/.test(word));
    if (rooms.length > 0 && !line.startsWith('  '.repeat(10))) rows.push(rooms);
  }
  return rows;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'generated' ? [] : sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

function roomOf(file: string): string {
  const [first = '', ...rest] = relative(SRC, file).split(sep);
  return rest.length > 0 ? `${first}/` : first;
}

test("every room of src/ is in the README's picture, once", () => {
  const pictured = pictureRows().flat();
  const rooms = [...new Set(sourceFiles(SRC).map(roomOf))].sort();
  assert.deepEqual([...new Set(pictured)].sort(), rooms);
  assert.equal(pictured.length, new Set(pictured).size, 'no room on two rows');
});

test('no import runs to a room on its own row or above', () => {
  const rowOf = new Map(pictureRows().flatMap((rooms, row) => rooms.map((room) => [room, row] as const)));
  const upward: string[] = [];
  for (const file of sourceFiles(SRC)) {
    const from = roomOf(file);
    for (const [, target = ''] of readFileSync(file, 'utf8').matchAll(/from '(\.[^']+)'/g)) {
      const path = resolve(dirname(file), target).replace(/\.js$/, '.ts');
      if (!path.startsWith(SRC + sep)) continue;
      const to = roomOf(path);
      if (to === from) continue;
      if ((rowOf.get(to) ?? -1) <= (rowOf.get(from) ?? -1)) upward.push(`${relative(ROOT, file)} → ${to}`);
    }
  }
  assert.deepEqual(upward, []);
});
