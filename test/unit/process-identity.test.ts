import assert from 'node:assert/strict';
import { test } from 'node:test';
import { identityFrom, processIdentity } from '../../src/process/identity.js';

const STATUS = [
  'Name:\tsleep',
  'Uid:\t101000\t101000\t101000\t101000',
  'Gid:\t101000\t0\t101000\t101000',
  'Groups:\t100000 101000 150000 ',
  'NSpid:\t4242\t1',
  '',
].join('\n');
/** A pod's user namespace: its ids 0-65535 are the host's 100000-165535. */
const MAP = '         0     100000      65536\n';
const IDENTITY = '         0          0 4294967295\n';

test("a process's ids are read back into its own user namespace, the real ones first", () => {
  assert.deepEqual(identityFrom(STATUS, MAP, MAP), { uid: 1000, gid: 1000, groups: [0, 1000, 50000] });
  assert.deepEqual(identityFrom(STATUS, IDENTITY, IDENTITY), {
    uid: 101000,
    gid: 101000,
    groups: [100000, 101000, 150000],
  });
});

test('a process with no groups has none; an unreadable status is no identity', () => {
  const noGroups = STATUS.replace(/Groups:.*\n/, 'Groups:\t\n');
  assert.deepEqual(identityFrom(noGroups, IDENTITY, IDENTITY)?.groups, []);
  assert.equal(identityFrom('Name:\tx\n', IDENTITY, IDENTITY), null);
});

test("this process's own identity, and none for a process that is not there", async () => {
  const self = await processIdentity(process.pid);
  assert.equal(self?.uid, process.getuid?.());
  assert.equal(self?.gid, process.getgid?.());
  // getgroups(2) as node calls it may add the effective gid to the list the kernel keeps.
  const groups = process.getgroups?.() ?? [];
  assert.ok(self?.groups.every((g) => groups.includes(g)));
  assert.equal(await processIdentity(0), null);
  assert.equal(await processIdentity(2 ** 22 + 1), null);
});
