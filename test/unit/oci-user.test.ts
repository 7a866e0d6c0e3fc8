import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readInRoot, resolveInRoot } from '../../src/oci/rootfs-files.js';
import { parseGroup, parsePasswd, resolveUser } from '../../src/oci/user.js';
import { containerSecurity } from '../harness/container-spec.js';

const PASSWD = [
  'root:x:0:0:root:/root:/bin/sh',
  '# a comment',
  'daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin',
  'app:x:1000:1001:App:/home/app:/bin/sh',
  'broken line',
  'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin',
  '',
].join('\n');

const GROUP = [
  'root:x:0:',
  'daemon:x:1:',
  'appgrp:x:1001:',
  'staff:x:50:app,daemon',
  'video:x:44: app ',
  'wheel:x:10:root',
  'nogroup:x:65534:',
].join('\n');

let base = '';
/** An image with /etc/passwd and /etc/group. */
let image = '';
/** An image whose /etc/passwd is an absolute symlink to "/etc/shadow-like" escaping it. */
let linked = '';
/** An image with no /etc at all. */
let empty = '';

before(async () => {
  base = await mkdtemp(join(tmpdir(), 'berth-user-'));
  image = join(base, 'image');
  await mkdir(join(image, 'etc'), { recursive: true });
  await writeFile(join(image, 'etc', 'passwd'), PASSWD);
  await writeFile(join(image, 'etc', 'group'), GROUP);

  // The host-side decoy: if the resolver followed the absolute link on the host, it would read this.
  linked = join(base, 'linked');
  await mkdir(join(linked, 'etc'), { recursive: true });
  await mkdir(join(linked, 'data'), { recursive: true });
  const decoy = join(base, 'decoy-passwd');
  await writeFile(decoy, 'evil:x:0:0::/:/bin/sh\n');
  await writeFile(join(linked, 'data', 'passwd'), 'inside:x:4242:4343::/:/bin/sh\n');
  // /etc/passwd -> <decoy> (absolute, so inside the root it means <root><decoy>, which we create)
  await mkdir(join(linked, base), { recursive: true });
  await symlink('/data/passwd', join(linked, base, 'decoy-passwd'));
  await symlink(decoy, join(linked, 'etc', 'passwd'));
  // /etc/group -> ../../../../../etc/group-ish: ".." stops at the root.
  await writeFile(join(linked, 'data', 'group'), 'ingroup:x:777:inside\n');
  await symlink('../../../../../../data/group', join(linked, 'etc', 'group'));

  empty = join(base, 'empty');
  await mkdir(empty);
});

after(async () => {
  await rm(base, { recursive: true, force: true });
});

test('parsePasswd and parseGroup skip comments and malformed lines', () => {
  const users = parsePasswd(PASSWD);
  assert.deepEqual(
    users.map((u) => [u.name, u.uid, u.gid]),
    [
      ['root', 0, 0],
      ['daemon', 1, 1],
      ['app', 1000, 1001],
      ['nobody', 65534, 65534],
    ],
  );
  assert.equal(users[2]?.home, '/home/app');
  const groups = parseGroup(GROUP);
  assert.deepEqual(groups.find((g) => g.name === 'staff')?.members, ['app', 'daemon']);
  assert.deepEqual(groups.find((g) => g.name === 'video')?.members, ['app']);
  assert.deepEqual(parsePasswd('x:x:notanumber:0::/:/bin/sh\n'), []);
});

test('no user anywhere: root, with root group memberships', async () => {
  assert.deepEqual(await resolveUser(image, containerSecurity(), undefined), {
    uid: 0,
    gid: 0,
    additionalGids: [0, 10],
  });
  assert.deepEqual(await resolveUser(empty, containerSecurity(), ''), {
    uid: 0,
    gid: 0,
    additionalGids: [0],
  });
});

test('image User "uid": gid and groups from its passwd entry', async () => {
  assert.deepEqual(await resolveUser(image, containerSecurity(), '1000'), {
    uid: 1000,
    gid: 1001,
    additionalGids: [1001, 50, 44],
  });
});

test('image User of a uid not in passwd: gid 0', async () => {
  assert.deepEqual(await resolveUser(image, containerSecurity(), '4000'), {
    uid: 4000,
    gid: 0,
    additionalGids: [0],
  });
});

test('image User "name", "uid:gid", "name:group", "uid:group"', async () => {
  assert.deepEqual(await resolveUser(image, containerSecurity(), 'app'), {
    uid: 1000,
    gid: 1001,
    additionalGids: [1001, 50, 44],
  });
  assert.deepEqual(await resolveUser(image, containerSecurity(), '1000:50'), {
    uid: 1000,
    gid: 50,
    additionalGids: [50, 44],
  });
  assert.deepEqual(await resolveUser(image, containerSecurity(), 'app:video'), {
    uid: 1000,
    gid: 44,
    additionalGids: [44, 50],
  });
  assert.deepEqual(await resolveUser(image, containerSecurity(), '5000:staff'), {
    uid: 5000,
    gid: 50,
    additionalGids: [50],
  });
});

test('image User naming a missing user or group is FailedPrecondition', async () => {
  await assert.rejects(resolveUser(image, containerSecurity(), 'ghost'), {
    name: 'FailedPreconditionError',
    message: `user "ghost" not found in the image's /etc/passwd`,
  });
  await assert.rejects(resolveUser(image, containerSecurity(), 'app:ghosts'), {
    name: 'FailedPreconditionError',
  });
  await assert.rejects(resolveUser(empty, containerSecurity(), 'app'), { name: 'FailedPreconditionError' });
});

test('run_as_user wins over the image User, group part included', async () => {
  assert.deepEqual(await resolveUser(image, containerSecurity({ runAsUser: 1 }), 'app:video'), {
    uid: 1,
    gid: 1,
    additionalGids: [1, 50],
  });
  assert.deepEqual(await resolveUser(image, containerSecurity({ runAsUser: 1234 }), 'app'), {
    uid: 1234,
    gid: 0,
    additionalGids: [0],
  });
});

test('run_as_username resolves in passwd; missing is InvalidArgument on its field', async () => {
  assert.deepEqual(await resolveUser(image, containerSecurity({ runAsUsername: 'app' }), '1'), {
    uid: 1000,
    gid: 1001,
    additionalGids: [1001, 50, 44],
  });
  await assert.rejects(resolveUser(image, containerSecurity({ runAsUsername: 'ghost' }), undefined), {
    name: 'InvalidArgumentError',
    field: 'config.linux.security_context.run_as_username',
  });
});

test('run_as_group overrides; the primary gid leads the groups, supplemental ones add without duplicates', async () => {
  assert.deepEqual(
    await resolveUser(image, containerSecurity({ runAsUser: 1000, runAsGroup: 44 }), undefined),
    {
      uid: 1000,
      gid: 44,
      additionalGids: [44, 50],
    },
  );
  const sec = containerSecurity({ runAsUser: 1000, supplementalGroups: [1234, 50, 5678, 1001] });
  assert.deepEqual(await resolveUser(image, sec, undefined), {
    uid: 1000,
    gid: 1001,
    additionalGids: [1001, 50, 44, 1234, 5678],
  });
});

test("Strict: the primary gid and the groups asked for, none of the image's /etc/group", async () => {
  const strict = { supplementalGroupsPolicy: 'Strict' as const };
  const sec = containerSecurity({ runAsUser: 1000, supplementalGroups: [1234, 50], ...strict });
  assert.deepEqual(await resolveUser(image, sec, undefined), {
    uid: 1000,
    gid: 1001,
    additionalGids: [1001, 1234, 50],
  });
  // The image's own User, and its group part, still decide the primary group.
  assert.deepEqual(await resolveUser(image, containerSecurity(strict), 'app:staff'), {
    uid: 1000,
    gid: 50,
    additionalGids: [50],
  });
  assert.deepEqual(await resolveUser(image, containerSecurity(strict), undefined), {
    uid: 0,
    gid: 0,
    additionalGids: [0],
  });
});

test('symlinks in the image resolve inside the rootfs, absolute or with ..', async () => {
  const resolved = await resolveInRoot(linked, '/etc/passwd');
  assert.equal(resolved, join(linked, 'data', 'passwd'));
  assert.equal(await resolveInRoot(linked, '/etc/group'), join(linked, 'data', 'group'));
  assert.equal(await resolveInRoot(linked, '/../../etc/missing/x'), join(linked, 'etc', 'missing', 'x'));
  assert.deepEqual(await resolveUser(linked, containerSecurity(), 'inside'), {
    uid: 4242,
    gid: 4343,
    additionalGids: [4343, 777],
  });
  await assert.rejects(resolveUser(linked, containerSecurity(), 'evil'), { name: 'FailedPreconditionError' });
});

test('a symlink loop is an error, a missing file reads as empty', async () => {
  const loop = join(base, 'loop');
  await mkdir(join(loop, 'etc'), { recursive: true });
  await symlink('/etc/passwd', join(loop, 'etc', 'passwd'));
  await assert.rejects(resolveInRoot(loop, '/etc/passwd'), /too many levels of symbolic links/);
  assert.equal(await readInRoot(empty, '/etc/passwd'), '');
  // A file where a directory should be is a missing path, not an error.
  await writeFile(join(empty, 'etc'), 'not a dir');
  assert.equal(await readInRoot(empty, '/etc/passwd'), '');
  await rm(join(empty, 'etc'));
});
