/**
 * A mount's uidMappings and gidMappings as kubelet sends them: accepted into the mount's idmap, or
 * refused naming the field and why. Pure logic, no host.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MAX_MOUNT_MAPPINGS, toMountIdmap } from '../../src/cri/userns.js';
import { InvalidArgumentError } from '../../src/errors.js';

const F = 'config.mounts[2]';
const LIMIT = 0xffff_ffff;

function m(
  container_id: number,
  host_id: number,
  length: number,
): {
  container_id: number;
  host_id: number;
  length: number;
} {
  return { container_id, host_id, length };
}

function refused(
  uids: ReturnType<typeof m>[],
  gids: ReturnType<typeof m>[],
  field: string,
  why: RegExp,
): void {
  assert.throws(
    () => toMountIdmap(F, uids, gids),
    (err: unknown) => {
      assert.ok(err instanceof InvalidArgumentError, String(err));
      assert.equal(err.field, field);
      assert.match(err.message, why);
      return true;
    },
  );
}

test('no mappings is a plain bind', () => {
  assert.equal(toMountIdmap(F, [], []), null);
});

test("kubelet's one mapping per kind, as the pod's", () => {
  assert.deepEqual(toMountIdmap(F, [m(0, 100000, 65536)], [m(0, 200000, 65536)]), {
    uids: [{ containerId: 0, hostId: 100000, length: 65536 }],
    gids: [{ containerId: 0, hostId: 200000, length: 65536 }],
  });
});

test('a few disjoint ranges, up to the most the kernel keeps inline, and to the largest id', () => {
  const ranges = Array.from({ length: MAX_MOUNT_MAPPINGS }, (_, i) => m(i * 1000, 100000 + i * 1000, 1000));
  assert.equal(toMountIdmap(F, ranges, ranges)?.uids.length, MAX_MOUNT_MAPPINGS);
  // Ranges touching end to start do not overlap; a range may end just below (uid_t)-1.
  assert.ok(toMountIdmap(F, [m(0, 10, 10), m(10, 20, 10)], [m(0, LIMIT - 1, 1)]));
});

test('one kind without the other', () => {
  refused([m(0, 1, 1)], [], `${F}.uidMappings`, /must be set together/);
  refused([], [m(0, 1, 1)], `${F}.uidMappings`, /must be set together/);
});

test('too many ranges', () => {
  const ranges = Array.from({ length: MAX_MOUNT_MAPPINGS + 1 }, (_, i) => m(i * 10, 1000 + i * 10, 10));
  refused(ranges, [m(0, 1, 1)], `${F}.uidMappings`, /at most 5 mappings/);
  refused([m(0, 1, 1)], ranges, `${F}.gidMappings`, /at most 5 mappings/);
});

test('a length of 0, or past the largest id', () => {
  refused([m(0, 1, 0)], [m(0, 1, 1)], `${F}.uidMappings[0].length`, /0 is not between 1 and 4294967295/);
  refused([m(0, 1, 1)], [m(0, 1, LIMIT + 1)], `${F}.gidMappings[0].length`, /not between 1/);
});

test('a range reaching (uid_t)-1, on either side', () => {
  refused([m(0, LIMIT - 9, 10)], [m(0, 1, 1)], `${F}.uidMappings[0].host_id`, /reaches past the largest id/);
  refused(
    [m(0, 1, 1)],
    [m(0, 1, 1), m(LIMIT - 4, 100, 5)],
    `${F}.gidMappings[1].container_id`,
    /reaches past/,
  );
});

test('overlapping ranges inside or on the host, named by the later one', () => {
  refused(
    [m(0, 100000, 100), m(50, 300000, 100)],
    [m(0, 1, 1)],
    `${F}.uidMappings[1].container_id`,
    /overlaps the range of config\.mounts\[2\]\.uidMappings\[0\]/,
  );
  refused(
    [m(0, 1, 1)],
    [m(0, 100000, 100), m(1000, 100099, 10)],
    `${F}.gidMappings[1].host_id`,
    /overlaps the range of config\.mounts\[2\]\.gidMappings\[0\]/,
  );
});
