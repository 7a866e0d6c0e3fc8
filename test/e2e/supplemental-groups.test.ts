/**
 * Supplemental groups policy (KEP-3619) through berthd's socket with real runc: Merge adds the
 * groups the image's /etc/group gives the user, Strict only those the pod asks for; any other value
 * is refused naming the field. ContainerStatus.user is what the running process has (kubelet copies
 * it into the pod's status), the spec's user once it stops. Then critest's own specs of it.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import {
  assertCritestPassed,
  critestRegistryArgs,
  critestSkip,
  PREDEFINED_GROUP_IMAGE,
  PREDEFINED_USER,
  pushPredefinedGroupImage,
  runCritest,
} from '../harness/critest.js';
import { TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import {
  containerConfig,
  containerStatus,
  createContainer,
  execText,
  runPod,
  startContainer,
  type Pod,
} from '../harness/pods.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { registrySkip as skip } from '../harness/skip.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 900_000;
const POLICY = 'config.linux.security_context.supplemental_groups_policy';
/** critest 1.34's SupplementalGroupsPolicy specs: Merge and Strict. */
const CRITEST_GROUPS_SPECS = 2;

const { uid: UID, extraGid: IMAGE_GID } = PREDEFINED_USER;
const ASKED_GID = 1234;

interface WireUser {
  linux: { uid: string; gid: string; supplemental_groups: string[] } | null;
}

/** ContainerStatus.user as numbers, groups sorted (their order means nothing). */
async function statusUser(
  daemon: TestDaemon,
  id: string,
): Promise<{ uid: number; gid: number; groups: number[] }> {
  const { user } = (await containerStatus(daemon.cri, id)) as unknown as { user: WireUser | null };
  const linux = user?.linux;
  assert.ok(linux, 'ContainerStatus has no user.linux');
  return {
    uid: Number(linux.uid),
    gid: Number(linux.gid),
    groups: linux.supplemental_groups.map(Number).sort((a, b) => a - b),
  };
}

describe('supplemental groups policy', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let pod: Pod;
  let configDir = '';

  before(async () => {
    registry = await startRegistry();
    await pushPredefinedGroupImage(registry);
    configDir = await mkdtemp(join(tmpdir(), 'berth-groups-'));
    // The image goes by critest's name, served by the test registry only.
    daemon = await TestDaemon.create({
      cni: 'bridge',
      extraArgs: await critestRegistryArgs(registry, configDir),
    });
    await daemon.cri.callImage('PullImage', { image: { image: PREDEFINED_GROUP_IMAGE } });
    pod = await runPod(daemon.cri, daemon.pod('groups'));
  });

  after(async () => {
    await daemon?.destroy();
    await registry?.stop();
    if (configDir) await rm(configDir, { recursive: true, force: true });
  });

  function run(
    name: string,
    security: Record<string, unknown>,
    command = ['sleep', '1000'],
  ): Promise<string> {
    return startContainer(
      daemon.cri,
      pod,
      containerConfig(name, PREDEFINED_GROUP_IMAGE, { command, linux: { security_context: security } }),
    );
  }

  /** What `id` says inside, as numbers, groups sorted. */
  async function idInside(id: string): Promise<{ uid: number; gid: number; groups: number[] }> {
    const out = async (flag: string): Promise<string> =>
      (await execText(daemon.cri, id, ['id', flag])).trim();
    return {
      uid: Number(await out('-u')),
      gid: Number(await out('-g')),
      groups: (await out('-G'))
        .split(/\s+/)
        .map(Number)
        .sort((a, b) => a - b),
    };
  }

  it('reports the feature in Status', async () => {
    const res = await daemon.cri.call<{ features: { supplemental_groups_policy: boolean } | null }>(
      'Status',
      {},
    );
    assert.equal(res.features?.supplemental_groups_policy, true);
  });

  it("Merge, the default, adds the groups the image's /etc/group gives the user", async () => {
    const expected = { uid: UID, gid: UID, groups: [UID, ASKED_GID, IMAGE_GID] };
    for (const policy of [undefined, 'Merge']) {
      const id = await run(`merge-${policy ?? 'unset'}`, {
        run_as_user: { value: String(UID) },
        supplemental_groups: [String(ASKED_GID)],
        ...(policy ? { supplemental_groups_policy: policy } : {}),
      });
      assert.deepEqual(await idInside(id), expected);
      assert.deepEqual(await statusUser(daemon, id), expected);
    }
  });

  it('Strict gives only the primary group and the groups the pod asks for', async () => {
    const id = await run('strict', {
      run_as_user: { value: String(UID) },
      supplemental_groups: [String(ASKED_GID)],
      supplemental_groups_policy: 'Strict',
    });
    const expected = { uid: UID, gid: UID, groups: [UID, ASKED_GID] };
    assert.deepEqual(await idInside(id), expected);
    assert.deepEqual(await statusUser(daemon, id), expected);
    // The image's own user, nothing asked: its primary group alone.
    const imageUser = await run('strict-image-user', { supplemental_groups_policy: 'Strict' });
    assert.deepEqual(await idInside(imageUser), { uid: UID, gid: UID, groups: [UID] });
  });

  it("reports the running process's own user, and the spec's once it has stopped", async () => {
    // Started as root (whom the image's /etc/group puts in no other group); su then becomes the
    // image's user with every group /etc/group gives it, and execs the sleep: the container's process.
    const id = await run('su', { run_as_user: { value: '0' } }, [
      'su',
      '-s',
      '/bin/sh',
      'default-user',
      '-c',
      'exec sleep 1000',
    ]);
    const live = { uid: UID, gid: UID, groups: [UID, IMAGE_GID] };
    // su needs a moment after the start to become the user.
    await waitFor(async () => (await statusUser(daemon, id)).uid === UID, 20_000, {
      what: 'su to switch user',
    });
    assert.deepEqual(await statusUser(daemon, id), live);
    await daemon.cri.call('StopContainer', { container_id: id, timeout: 0 });
    assert.deepEqual(await statusUser(daemon, id), { uid: 0, gid: 0, groups: [0] });
  });

  it("reports a created container's user from its spec", async () => {
    const id = await createContainer(
      daemon.cri,
      pod,
      containerConfig('created', PREDEFINED_GROUP_IMAGE, {
        linux: { security_context: { supplemental_groups: [String(ASKED_GID)] } },
      }),
    );
    assert.deepEqual(await statusUser(daemon, id), {
      uid: UID,
      gid: UID,
      groups: [UID, ASKED_GID, IMAGE_GID],
    });
  });

  it('refuses a policy the CRI does not define, naming the field', async () => {
    // An enum value the proto does not name travels as its number.
    await rejectsWith(
      createContainer(
        daemon.cri,
        pod,
        containerConfig('bad-policy', PREDEFINED_GROUP_IMAGE, {
          linux: { security_context: { supplemental_groups_policy: 7 } },
        }),
      ),
      status.INVALID_ARGUMENT,
      POLICY,
    );
    await rejectsWith(
      runPod(
        daemon.cri,
        daemon.pod('bad-policy', { linux: { security_context: { supplemental_groups_policy: 7 } } }),
      ),
      status.INVALID_ARGUMENT,
      POLICY,
    );
  });

  describe("critest's SupplementalGroupsPolicy specs", { skip: critestSkip }, () => {
    it('pass', async () => {
      assertCritestPassed(await runCritest(daemon, 'SupplementalGroupsPolicy'), CRITEST_GROUPS_SPECS);
    });
  });
});
