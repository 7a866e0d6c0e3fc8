import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkUserNamespace, rootfsIdmap } from '../../src/container/userns.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { sandboxSpec } from '../harness/container-spec.js';
import { sandbox } from '../harness/records.js';

const FIELD = 'config.linux.security_context.namespace_options.userns_options';
const mapping = (hostId: number) => [{ containerId: 0, hostId, length: 65536 }];
const own = { uids: mapping(65536), gids: mapping(131072) };
const usernsPod = sandbox({ infra: false, spec: { ...sandboxSpec(), userNamespace: own } });
const hostPod = sandbox({ infra: false });

function refuses(act: () => void, field: string): void {
  assert.throws(act, (err: unknown) => err instanceof InvalidArgumentError && err.field === field, field);
}

describe("a container's user namespace is its pod's", () => {
  it("takes the pod's mappings, NODE for a host pod, and options left out for either", () => {
    assert.doesNotThrow(() => checkUserNamespace({ asked: own }, usernsPod));
    assert.doesNotThrow(() => checkUserNamespace('unset', usernsPod));
    assert.doesNotThrow(() => checkUserNamespace({ asked: null }, hostPod));
    assert.doesNotThrow(() => checkUserNamespace('unset', hostPod));
  });

  it('refuses any other, naming the field', () => {
    refuses(() => checkUserNamespace({ asked: null }, usernsPod), `${FIELD}.mode`);
    refuses(() => checkUserNamespace({ asked: own }, hostPod), `${FIELD}.mode`);
    refuses(
      () => checkUserNamespace({ asked: { ...own, uids: mapping(196608) } }, usernsPod),
      `${FIELD}.uids`,
    );
    refuses(
      () => checkUserNamespace({ asked: { ...own, gids: mapping(65536) } }, usernsPod),
      `${FIELD}.gids`,
    );
  });

  it("idmaps the rootfs with the pod's pin and root, and not in the host's namespace", () => {
    assert.deepEqual(rootfsIdmap(usernsPod), {
      userns: '/var/lib/berth/sandboxes/pod1/ns/user',
      rootUid: 65536,
      rootGid: 131072,
    });
    assert.equal(rootfsIdmap(hostPod), null);
  });
});
