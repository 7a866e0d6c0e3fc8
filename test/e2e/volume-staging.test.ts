/**
 * Which user namespace carries a staged volume's idmap (src/container/volumes.ts): the pod's own
 * when the mount's mappings are the pod's, otherwise one made for the call and dropped after it.
 * The pod's pin here is made with other mappings than the record claims, so that the ids a staged
 * file shows tell which namespace was used. Needs root.
 */
import assert from 'node:assert/strict';
import { chown, mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { stageIdmappedMounts } from '../../src/container/volumes.js';
import { createPinnedUserns, removeUserns } from '../../src/netns/userns.js';
import type { ResolvedMount } from '../../src/oci/mounts.js';
import type { IdMapping, IdMappings } from '../../src/oci/userns.js';
import { namesIn } from '../harness/files.js';
import { mountPointsBelow, unmountAllBelow } from '../harness/mounts.js';
import { rootSkip } from '../harness/skip.js';

const T = 10_000;
const range = (hostId: number): IdMapping[] => [{ containerId: 0, hostId, length: 65536 }];
/** What the pod's record says its namespace maps, and what a mount asks for. */
const CLAIMED: IdMappings = { uids: range(100000), gids: range(100000) };
/** What the pod's pin really maps. */
const PINNED = range(300000);
const OTHER: IdMappings = { uids: range(500000), gids: range(500000) };

describe('staging idmapped volumes', { skip: rootSkip }, () => {
  let root = '';
  let source = '';
  let pin = '';

  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'berth-volume-staging-'));
    source = join(root, 'source');
    await mkdir(source);
    await writeFile(join(source, 'file'), 'x\n');
    await chown(join(source, 'file'), 7, 7);
    pin = join(root, 'pod-userns');
    await createPinnedUserns({ path: pin, uids: PINNED, gids: PINNED }, T);
  });

  after(async () => {
    if (!root) return;
    await unmountAllBelow(join(root, 'v'));
    await removeUserns(pin).catch(() => undefined);
    await rm(root, { recursive: true, force: true });
  });

  test("the pod's namespace for its own mappings, a transient one for others, none for a plain bind", async () => {
    const dir = join(root, 'v');
    const mount = (containerPath: string): ResolvedMount => ({
      containerPath,
      hostPath: source,
      requestedHostPath: source,
      readonly: false,
      recursiveReadOnly: false,
      propagation: 'PRIVATE',
      sourcePropagation: 'private',
    });
    const staged = await stageIdmappedMounts(
      [mount('/pods'), mount('/other'), mount('/plain')],
      [CLAIMED, OTHER, null],
      { dir, podUserns: { path: pin, ...CLAIMED }, timeoutMs: T },
    );
    assert.deepEqual(
      staged.map((m) => m.hostPath),
      [join(dir, '0'), join(dir, '1'), source],
    );
    assert.equal((await stat(join(dir, '0', 'file'))).uid, 300007, "the pod's pin was not used");
    assert.equal((await stat(join(dir, '1', 'file'))).uid, 500007);
    assert.deepEqual(await mountPointsBelow(dir), [join(dir, '0'), join(dir, '1')]);
    // The transient namespace's pin went once the bind held it.
    assert.deepEqual((await namesIn(dir)).sort(), ['0', '1']);
    assert.equal((await stat(dir)).mode & 0o777, 0o711);
  });
});
