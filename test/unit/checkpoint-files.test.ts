/**
 * What a checkpoint reads from the host, against real files: the criu probe (a script stands in for
 * criu, passing or failing its check), and a container's changes read from an overlay upper dir
 * with overlayfs's own whiteouts and opaque dirs in it. Needs root (device nodes, trusted xattrs).
 */
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { writeRootfsDiffTar } from '../../src/checkpoint/archive.js';
import { readRootfsDiff } from '../../src/checkpoint/rootfs-diff.js';
import { run } from '../../src/exec.js';
import { probeCriu } from '../../src/host/features.js';
import { rootSkip as skip } from '../harness/skip.js';

const TIMEOUT_MS = 10_000;
let dir: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'berth-checkpoint-files-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function fakeCriu(name: string, check: string[]): Promise<string> {
  const path = join(dir, name);
  const script = ['#!/bin/sh', 'case "$1" in', '--version) echo "Version: 3.17.1" ;;', ...check, 'esac', ''];
  await writeFile(path, script.join('\n'));
  await chmod(path, 0o755);
  return path;
}

test('criu is usable only when its check passes; otherwise its words are the reason', async () => {
  const passing = await fakeCriu('criu-ok', ['check) echo "Looks good." ;;']);
  assert.deepEqual(await probeCriu(TIMEOUT_MS, passing), { version: '3.17.1', usable: true });
  const failing = await fakeCriu('criu-vdso', [
    'check) echo "Error (criu/vdso.c:1): Unexpected rt vDSO area bounds" >&2; exit 1 ;;',
  ]);
  const probed = await probeCriu(TIMEOUT_MS, failing);
  assert.equal(probed?.usable, false);
  assert.equal(probed.version, '3.17.1');
  assert.match(probed.reason ?? '', /^criu check failed: .*Unexpected rt vDSO area bounds/);
  assert.equal(await probeCriu(TIMEOUT_MS, join(dir, 'no-such-criu')), null);
});

test(
  'the diff holds what the upper dir added, and lists whiteouts and what opaque dirs hide',
  { skip },
  async () => {
    const upper = join(dir, 'upper');
    const lower = join(dir, 'lower');
    for (const d of ['etc', 'data/old', 'var']) await mkdir(join(lower, d), { recursive: true });
    await writeFile(join(lower, 'etc', 'group'), '');
    await writeFile(join(lower, 'data', 'kept-in-upper'), '');
    for (const d of ['etc', 'data', 'new dir']) await mkdir(join(upper, d), { recursive: true });
    await writeFile(join(upper, 'count'), '7\n');
    await writeFile(join(upper, 'new dir', 'file\nwith newline'), '');
    await writeFile(join(upper, 'data', 'kept-in-upper'), 'mine');
    await run('mknod', [join(upper, 'etc', 'group'), 'c', '0', '0'], { timeoutMs: TIMEOUT_MS });
    await run('setfattr', ['-n', 'trusted.overlay.opaque', '-v', 'y', join(upper, 'data')], {
      timeoutMs: TIMEOUT_MS,
    });

    const diff = await readRootfsDiff({ upper, lowers: [lower] }, TIMEOUT_MS);
    assert.deepEqual(diff.changed, [
      'count',
      'data',
      'data/kept-in-upper',
      'etc',
      'new dir',
      'new dir/file\nwith newline',
    ]);
    assert.deepEqual(diff.deleted, ['/data/old', '/etc/group']);

    // Exactly the entries listed, none recursed into: the whiteout stays out of the tar.
    const tar = join(dir, 'rootfs-diff.tar');
    await writeRootfsDiffTar(upper, diff.changed, tar, join(dir, 'diff.list'), TIMEOUT_MS);
    const { stdout } = await run('tar', ['--list', '--verbose', '--numeric-owner', '--file', tar], {
      timeoutMs: TIMEOUT_MS,
    });
    assert.equal(stdout.trim().split('\n').length, diff.changed.length, stdout);
    assert.ok(!stdout.includes('etc/group'), stdout);
    assert.match(stdout, /^-rw-r--r-- 0\/0 +2 .* count$/m);
  },
);
