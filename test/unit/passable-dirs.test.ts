/**
 * The way down to berth's dirs for a user namespace's root (host/passable.ts), and the parents
 * berth makes for its dirs (file-modes.ts): those it made are left passable, others' are named.
 */
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { makeDirWithParents, PRIVATE_DIR } from '../../src/file-modes.js';
import { impassableAncestor } from '../../src/host/passable.js';

let dir: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'berth-passable-'));
  // mkdtemp makes it 0700, as the operator's dir in the issue was.
  await chmod(dir, 0o755);
});

after(async () => {
  await rm(dir, { recursive: true, force: true });
});

const modeOf = async (path: string): Promise<number> => (await stat(path)).mode & 0o7777;

test('the parents berth makes for its dir are passable, the dir itself has its own mode', async () => {
  const root = join(dir, 'made', 'by', 'berth', 'root');
  await makeDirWithParents(root, PRIVATE_DIR);
  assert.equal(await modeOf(root), PRIVATE_DIR);
  for (const made of ['made', 'made/by', 'made/by/berth']) assert.equal(await modeOf(join(dir, made)), 0o711);
  assert.equal(await impassableAncestor([root]), null);
});

test("a parent that is not berth's keeps its mode, and is named with it", async () => {
  const theirs = join(dir, 'theirs');
  await mkdir(theirs, { mode: 0o700 });
  await chmod(theirs, 0o700);
  const root = join(theirs, 'root');
  await makeDirWithParents(root, PRIVATE_DIR);
  assert.equal(await modeOf(theirs), 0o700);
  assert.equal(
    await impassableAncestor([join(dir, 'made'), root]),
    `${theirs} is 0700: a user namespace's root cannot pass it on the way to ${root} (give it o+x, or move berth's dirs)`,
  );
  // Searchable by others, though not readable: passable.
  await chmod(theirs, 0o711);
  assert.equal(await impassableAncestor([root]), null);
});
