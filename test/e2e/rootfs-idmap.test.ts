/**
 * The overlay rootfs of a container of its pod's user namespace: the image's layers bound idmapped
 * as its lower layers, upper and work owned by the namespace's root. Checked from the host and by a
 * process in the namespace; needs root.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chmod, chown, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { run } from '../../src/exec.js';
import { LayerStore, prepareRootfs, removeRootfs, sha256Digest } from '../../src/imagestore/index.js';
import { createPinnedUserns, removeUserns } from '../../src/netns/userns.js';
import type { IdMapping } from '../../src/oci/userns.js';
import { mountPointsBelow } from '../harness/mounts.js';
import { rootSkip } from '../harness/skip.js';

const T = 10_000;
const BASE = 65536 * 11;
const POD: IdMapping[] = [{ containerId: 0, hostId: BASE, length: 65536 }];
const suffix = randomBytes(4).toString('hex');
let root = '';
let pin = '';
let layers: LayerStore;
let base = '';
let top = '';

async function makeLayer(name: string, build: (dir: string) => Promise<void>): Promise<string> {
  const diffId = sha256Digest(Buffer.from(`${suffix} ${name}`));
  const tmp = await layers.tmpLayerDir(diffId);
  await build(tmp);
  assert.equal(await layers.commitLayer(tmp, diffId), true);
  return diffId;
}

/** Runs `args` as the namespace's root (or `uid`), in the host's mount namespace. */
function inside(args: string[], uid = 0): Promise<{ stdout: string }> {
  return run('nsenter', [`--user=${pin}`, `--setuid=${uid}`, `--setgid=${uid}`, '--', ...args], {
    timeoutMs: T,
  });
}

describe('a rootfs over idmapped layers', { skip: rootSkip }, () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'berth-rootfs-idmap-'));
    // The namespace's processes are host nobodies: the way down to the rootfs must be open to them.
    await chmod(root, 0o755);
    layers = new LayerStore(root);
    base = await makeLayer('base', async (dir) => {
      await mkdir(join(dir, 'etc'), { mode: 0o755 });
      await writeFile(join(dir, 'etc', 'passwd'), 'root:x:0:0::/root:/bin/sh\n', { mode: 0o644 });
      await mkdir(join(dir, 'home', 'app'), { recursive: true, mode: 0o755 });
      await chown(join(dir, 'home', 'app'), 1000, 1000);
      await writeFile(join(dir, 'home', 'app', 'own'), 'app\n', { mode: 0o600 });
      await chown(join(dir, 'home', 'app', 'own'), 1000, 1000);
    });
    top = await makeLayer('top', async (dir) => {
      await writeFile(join(dir, 'top'), 'top\n', { mode: 0o644 });
    });
    pin = join(root, 'userns');
    await createPinnedUserns({ path: pin, uids: POD, gids: POD }, T);
  });

  after(async () => {
    if (pin) await removeUserns(pin).catch(() => undefined);
    if (root) await rm(root, { recursive: true, force: true });
  });

  test("files keep their image owners inside, and the namespace's root writes as image root could", async () => {
    const id = `berth-test-${suffix}-idmap`;
    const rootfs = await prepareRootfs(id, [base, top], root, { userns: pin, rootUid: BASE, rootGid: BASE });
    const dir = join(root, 'containers', id);
    // The containers dir is root's alone; a user-namespaced container needs the way opened.
    await chmod(join(root, 'containers'), 0o711);
    await chmod(dir, 0o711);
    try {
      const owners = await inside([
        'stat',
        '-c',
        '%u:%g %n',
        join(rootfs, 'etc', 'passwd'),
        join(rootfs, 'home', 'app', 'own'),
        join(rootfs, 'top'),
        rootfs,
      ]);
      assert.deepEqual(owners.stdout.trim().split('\n'), [
        `0:0 ${join(rootfs, 'etc', 'passwd')}`,
        `1000:1000 ${join(rootfs, 'home', 'app', 'own')}`,
        `0:0 ${join(rootfs, 'top')}`,
        `0:0 ${rootfs}`,
      ]);
      // From the host, the same files belong to the mapped ids.
      assert.equal((await stat(join(rootfs, 'home', 'app', 'own'))).uid, BASE + 1000);

      // Root inside writes / and changes an image file; what it writes is the mapped root's on the host.
      await inside(['touch', join(rootfs, 'made-by-root')]);
      await inside(['sh', '-c', `echo changed > ${join(rootfs, 'etc', 'passwd')}`]);
      assert.equal((await stat(join(dir, 'upper', 'made-by-root'))).uid, BASE);
      assert.equal(await readFile(join(rootfs, 'etc', 'passwd'), 'utf8'), 'changed\n');
      // The image's own layer is untouched: the change went up, owned as the image had it.
      assert.equal(
        await readFile(join(layers.fsDir(base), 'etc', 'passwd'), 'utf8'),
        'root:x:0:0::/root:/bin/sh\n',
      );
      assert.equal((await stat(join(dir, 'upper', 'etc', 'passwd'))).uid, BASE);
      // The image's user 1000 reads its own file; another id of the namespace cannot.
      assert.equal((await inside(['cat', join(rootfs, 'home', 'app', 'own')], 1000)).stdout, 'app\n');
      await assert.rejects(inside(['cat', join(rootfs, 'home', 'app', 'own')], 1001), /Permission denied/);
    } finally {
      await removeRootfs(id, root);
    }
    assert.deepEqual(await mountPointsBelow(root).then((m) => m.filter((p) => p !== pin)), []);
    assert.equal(await readFile(join(layers.fsDir(top), 'top'), 'utf8'), 'top\n', 'removal keeps the layers');
  });

  test('a layer that cannot be bound fails the mount and leaves nothing', async () => {
    const id = `berth-test-${suffix}-bad-userns`;
    const plain = join(root, 'not-a-namespace');
    await writeFile(plain, '');
    await assert.rejects(
      prepareRootfs(id, [base, top], root, { userns: plain, rootUid: BASE, rootGid: BASE }),
      /mount_setattr/,
    );
    assert.deepEqual(await mountPointsBelow(root).then((m) => m.filter((p) => p !== pin)), []);
    assert.equal(await stat(join(root, 'containers', id)).catch(() => null), null);
  });
});
