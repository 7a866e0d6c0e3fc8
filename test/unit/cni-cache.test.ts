import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LoadNetworkResult } from '../../src/cni/index.js';
import { NetworkCache, REVALIDATE_MS } from '../../src/cni/readiness.js';

let root: string;
let seq = 0;

before(async () => {
  root = await mkdtemp(join(tmpdir(), 'berth-cni-cache-'));
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

/** A conf dir and a bin dir in which every plugin `list` names is an executable stub. */
async function dirs(): Promise<{ conf: string; bin: string }> {
  const conf = join(root, `conf${seq}`);
  const bin = join(root, `bin${seq++}`);
  await mkdir(conf);
  await mkdir(bin);
  for (const type of ['loopback', 'bridge']) await writeFile(join(bin, type), '#!/bin/sh\n', { mode: 0o755 });
  return { conf, bin };
}

const list = (name: string): string =>
  JSON.stringify({ cniVersion: '1.0.0', name, plugins: [{ type: 'bridge' }] });

function nameOf(result: LoadNetworkResult): string {
  assert.ok(result.network, 'network not loaded');
  return result.network.name;
}

/** inotify events reach the watch asynchronously: what a caller sees right after a change may lag. */
async function eventually(check: () => Promise<boolean>): Promise<void> {
  // Up to ten seconds or more: a busy machine delivers them late.
  for (let i = 0; i < 1000; i++) {
    if (await check()) return;
    await sleep(10);
  }
  assert.fail('the change was never seen');
}

test('a change in the conf dir or a bin dir is seen without waiting for revalidation', async () => {
  const { conf, bin } = await dirs();
  await writeFile(join(conf, '10-a.conflist'), list('a'));
  const clock = { now: 0 };
  const cache = new NetworkCache(conf, [bin], () => clock.now);
  try {
    assert.equal(nameOf(await cache.load()), 'a');
    await writeFile(join(conf, '10-a.conflist'), list('b'));
    await eventually(async () => (await cache.load()).network?.name === 'b');
    await unlink(join(bin, 'bridge'));
    await eventually(async () => (await cache.load()).network === null);
  } finally {
    cache.close();
  }
});

test('a change inotify cannot see (a symlink target) is seen once the network is REVALIDATE_MS old', async () => {
  const { conf, bin } = await dirs();
  const targets = join(root, `targets${seq++}`);
  await mkdir(targets);
  await writeFile(join(targets, 'net.conflist'), list('before'));
  await symlink(join(targets, 'net.conflist'), join(conf, '10-net.conflist'));
  const clock = { now: 0 };
  const cache = new NetworkCache(conf, [bin], () => clock.now);
  try {
    assert.equal(nameOf(await cache.load()), 'before');
    await writeFile(join(targets, 'net.conflist'), list('after'));
    clock.now += REVALIDATE_MS;
    assert.equal(nameOf(await cache.load()), 'after');
  } finally {
    cache.close();
  }
});

test('a network that is not usable is read again on every call', async () => {
  const { conf, bin } = await dirs();
  await writeFile(join(conf, '10-net.conflist'), list('net'));
  await unlink(join(bin, 'bridge'));
  // A bin dir that did not exist when the cache was made can never have been watched.
  const lateBin = join(root, `late${seq++}`);
  const cache = new NetworkCache(conf, [bin, lateBin], () => 0);
  try {
    assert.equal((await cache.load()).network, null);
    await mkdir(lateBin);
    await writeFile(join(lateBin, 'bridge'), '#!/bin/sh\n', { mode: 0o755 });
    assert.equal(nameOf(await cache.load()), 'net');
  } finally {
    cache.close();
  }
});

test('concurrent callers share one read', async () => {
  const { conf, bin } = await dirs();
  await writeFile(join(conf, '10-net.conflist'), list('net'));
  const cache = new NetworkCache(conf, [bin], () => 0);
  try {
    const [first, second] = await Promise.all([cache.load(), cache.load()]);
    assert.equal(first, second);
    assert.equal(nameOf(first), 'net');
  } finally {
    cache.close();
  }
});
