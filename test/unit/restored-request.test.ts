/**
 * A restore's container takes its terminal from the archive: criu brings the process back on the
 * stdio it had, and conmon must offer runc a console exactly when that is a terminal. Its
 * credentials come back from criu's images too, so an archive whose user is not the one the
 * request asks for is refused.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CheckpointSource } from '../../src/container/restore.js';
import {
  checkRequestedIdentity,
  checkResolvedIdentity,
  restoredRequest,
} from '../../src/container/restore.js';
import { InvalidArgumentError } from '../../src/errors.js';
import type { Spec } from '../../src/oci/spec.js';
import { containerSpec } from '../harness/container-spec.js';

function sourceWith(spec: Spec): CheckpointSource {
  return { archive: { spec, path: '/checkpoints/hostile.tar' } } as unknown as CheckpointSource;
}

describe('the request a restore carries out', () => {
  it("takes the archive's terminal over the request's, either way", () => {
    const onTty = sourceWith({
      ociVersion: '1.0.2',
      process: { args: ['sh'], cwd: '/', user: { uid: 0, gid: 0 }, terminal: true },
    });
    const onPipes = sourceWith({
      ociVersion: '1.0.2',
      process: { args: ['sh'], cwd: '/', user: { uid: 0, gid: 0 } },
    });
    assert.equal(restoredRequest(containerSpec({ tty: false }), onTty).tty, true);
    assert.equal(restoredRequest(containerSpec({ tty: true }), onPipes).tty, false);
  });

  it('leaves a request that agrees as it is', () => {
    const asked = containerSpec({ tty: true, stdin: true });
    const source = sourceWith({
      ociVersion: '1.0.2',
      process: { args: ['sh'], cwd: '/', user: { uid: 0, gid: 0 }, terminal: true },
    });
    assert.equal(restoredRequest(asked, source), asked);
  });

  it('an archive whose spec has no process gives no terminal', () => {
    assert.equal(
      restoredRequest(containerSpec({ tty: true }), sourceWith({ ociVersion: '1.0.2' })).tty,
      false,
    );
  });
});

/** A spec.dump of a process that ran as root with the groups of a privileged image. */
const rootDump: Spec = {
  ociVersion: '1.0.2',
  process: { args: ['sh'], cwd: '/', user: { uid: 0, gid: 0, additionalGids: [0, 6, 42], umask: 0 } },
};
const SECURITY = 'config.linux.security_context';

describe("a restore's identity is the request's, or it is refused", () => {
  it('refuses an archive of uid 0 when the request runs as 1000, naming run_as_user and both uids', () => {
    const err = catchRefusal(() =>
      checkRequestedIdentity(sourceWith(rootDump), containerSpec({}, { runAsUser: 1000 }).security),
    );
    assert.equal(err.field, `${SECURITY}.run_as_user`);
    assert.match(err.message, /uid 0 \(spec\.dump\), the request asks for uid 1000/);
  });

  it('refuses another gid named by run_as_group', () => {
    const security = containerSpec({}, { runAsUser: 0, runAsGroup: 1000 }).security;
    const err = catchRefusal(() => checkRequestedIdentity(sourceWith(rootDump), security));
    assert.equal(err.field, `${SECURITY}.run_as_group`);
    assert.match(err.message, /gid 0 .*gid 1000/);
  });

  it('compares nothing up front that the request does not name', () => {
    checkRequestedIdentity(sourceWith(rootDump), containerSpec().security);
  });

  it("refuses groups the resolved user does not have, naming supplemental_groups; the order and the primary gid's place do not matter", () => {
    const security = containerSpec().security;
    const err = catchRefusal(() =>
      checkResolvedIdentity(sourceWith(rootDump), security, { uid: 0, gid: 0, additionalGids: [0] }),
    );
    assert.equal(err.field, `${SECURITY}.supplemental_groups`);
    assert.match(err.message, /groups \[0,6,42\] .*groups \[0\] \(none named: the image's user\)/);
    checkResolvedIdentity(sourceWith(rootDump), security, { uid: 0, gid: 0, additionalGids: [42, 6] });
  });

  it("refuses a resolved user (a run_as_username, the image's user) of another uid, naming the field it came from", () => {
    const byName = containerSpec({}, { runAsUsername: 'app' }).security;
    const err = catchRefusal(() =>
      checkResolvedIdentity(sourceWith(rootDump), byName, { uid: 1000, gid: 1000, additionalGids: [1000] }),
    );
    assert.equal(err.field, `${SECURITY}.run_as_username`);
    const imageUser = catchRefusal(() =>
      checkResolvedIdentity(sourceWith(rootDump), containerSpec().security, {
        uid: 1000,
        gid: 1000,
        additionalGids: [1000],
      }),
    );
    assert.equal(imageUser.field, `${SECURITY}.run_as_user`);
    assert.match(imageUser.message, /none named: the image's user/);
  });

  it('takes a spec.dump without a user for uid 0, gid 0 and no other group, as runc ran it', () => {
    const noUser = sourceWith({
      ociVersion: '1.0.2',
      process: { args: ['sh'], cwd: '/' } as Spec['process'],
    });
    checkResolvedIdentity(noUser, containerSpec().security, { uid: 0, gid: 0, additionalGids: [0] });
    const err = catchRefusal(() =>
      checkRequestedIdentity(noUser, containerSpec({}, { runAsUser: 1000 }).security),
    );
    assert.equal(err.field, `${SECURITY}.run_as_user`);
  });
});

function catchRefusal(act: () => void): InvalidArgumentError {
  try {
    act();
  } catch (err) {
    assert.ok(err instanceof InvalidArgumentError, `not an InvalidArgumentError: ${String(err)}`);
    return err;
  }
  assert.fail('not refused');
}
