/**
 * AppArmor end to end through berthd and real runc. Where the host has AppArmor (the Debian 13
 * VM: `npm run test:vm -- test/e2e/apparmor.test.ts`): the profile each request gets, read from
 * /proc/<pid>/attr/current inside the container, for its main process and an exec'd one; each
 * denial of berth's default profile proven from inside a container against an Unconfined control
 * that may do the same; an ordinary workload under it; a Localhost profile the test loads, and
 * one not loaded refused naming it; the profile loaded again by a restarted berthd after it was
 * removed. Where AppArmor is off (this repository's usual host): requests are still validated and
 * no profile is applied. Needs root and docker-registry.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import { SHARED_PID_LINUX, TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { busyboxLayer, pushImage, type PushedImage } from '../harness/images.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import {
  containerConfig,
  containerInfo,
  createContainer,
  execSync,
  execText,
  runPod,
  startContainer,
  type Pod,
} from '../harness/pods.js';
import { appArmorEnabled, registrySkip } from '../harness/skip.js';
import { BOUND_SCALE } from '../harness/bounds.js';

const SUITE_TIMEOUT_MS = 600_000 * BOUND_SCALE;
const LOADED = '/sys/kernel/security/apparmor/profiles';
const onSkip =
  registrySkip ||
  (appArmorEnabled
    ? false
    : 'AppArmor is not enabled on this host (run it in the VM: npm run test:vm -- <file>)');
const offSkip = registrySkip || (appArmorEnabled ? 'AppArmor is enabled on this host' : false);

const SC = 'config.linux.security_context';
/** The test's own Localhost profile, unique to the run; it refuses one file, to show it applies. */
const TEST_PROFILE = `berth-test-${randomBytes(4).toString('hex')}`;
const TEST_PROFILE_TEXT = [
  'abi <abi/3.0>,',
  `profile ${TEST_PROFILE} flags=(attach_disconnected,mediate_deleted) {`,
  '  file,',
  '  network,',
  '  capability,',
  '  signal,',
  '  ptrace,',
  '  deny /tmp/refused-by-test-profile w,',
  '}',
  '',
].join('\n');

const profile = (profile_type: string, localhost_ref = ''): Record<string, unknown> => ({
  apparmor: { profile_type, localhost_ref },
});

interface Setup {
  registry: TestRegistry;
  daemon: TestDaemon;
  image: PushedImage;
  pod: Pod;
}

async function setUp(): Promise<Setup> {
  const registry = await startRegistry();
  let daemon: TestDaemon | undefined;
  try {
    const image = await pushImage(registry, 'berth/apparmor', '1', {
      layers: [
        await busyboxLayer('gzip', {
          applets: ['umount'],
          entries: [{ type: 'dir', path: 'mnt' }],
        }),
      ],
      config: { Cmd: ['/bin/sleep', '1000'], WorkingDir: '/' },
    });
    daemon = await TestDaemon.create({ cni: 'bridge' });
    await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
    const pod = await runPod(daemon.cri, daemon.pod('apparmor'));
    return { registry, daemon, image, pod };
  } catch (err) {
    // The after hooks see a whole Setup or none: a registry left running here kept the test
    // process, and with it the VM run, alive after the failure until the run's own bound.
    await daemon?.destroy();
    await registry.stop();
    throw err;
  }
}

async function hostFeatures(
  daemon: TestDaemon,
): Promise<{ enabled: boolean; defaultProfile: string | null }> {
  const res = await daemon.cri.call<{ info: Record<string, string> }>('Status', { verbose: true });
  const shown = JSON.parse(res.info.probedFeatures ?? '{}') as {
    host: { appArmor: { enabled: boolean; defaultProfile: string | null } };
  };
  return shown.host.appArmor;
}

describe('AppArmor where the host has it', { skip: onSkip, timeout: SUITE_TIMEOUT_MS }, () => {
  let s: Setup;
  let n = 0;

  before(async () => {
    await run('apparmor_parser', ['--replace'], {
      timeoutMs: 60_000 * BOUND_SCALE,
      input: TEST_PROFILE_TEXT,
    });
    s = await setUp();
  });

  after(async () => {
    await s?.daemon.destroy();
    await s?.registry.stop();
    await run('apparmor_parser', ['--remove'], {
      timeoutMs: 60_000 * BOUND_SCALE,
      input: TEST_PROFILE_TEXT,
    }).catch(() => undefined);
  });

  function start(extra: Record<string, unknown>, pod: Pod = s.pod): Promise<string> {
    return startContainer(s.daemon.cri, pod, containerConfig(`c${n++}`, s.image.reference, extra));
  }

  /** The label of the container's main process and of a process exec'd in it. */
  async function labels(id: string): Promise<{ main: string; exec: string }> {
    const { pid } = await containerInfo(s.daemon.cri, id);
    const main = (await readFile(`/proc/${pid}/attr/current`, 'utf8')).trim();
    const exec = (await execText(s.daemon.cri, id, ['cat', '/proc/self/attr/current'])).trim();
    return { main, exec };
  }

  it('berthd loaded its default profile and says so in verbose Status', async () => {
    assert.match(await readFile(LOADED, 'utf8'), /^berth-default \(enforce\)$/m);
    assert.deepEqual(await hostFeatures(s.daemon), { enabled: true, defaultProfile: 'berth-default' });
  });

  it('RuntimeDefault, an unset profile and runtime/default get berth-default, exec included', async () => {
    const confined = { main: 'berth-default (enforce)', exec: 'berth-default (enforce)' };
    for (const sc of [profile('RuntimeDefault'), {}, { apparmor_profile: 'runtime/default' }]) {
      const id = await start({ linux: { security_context: sc } });
      assert.deepEqual(await labels(id), confined, JSON.stringify(sc));
    }
  });

  it('Localhost, by the field and by the deprecated string, applies the loaded profile', async () => {
    const mine = { main: `${TEST_PROFILE} (enforce)`, exec: `${TEST_PROFILE} (enforce)` };
    for (const sc of [
      profile('Localhost', TEST_PROFILE),
      { apparmor_profile: `localhost/${TEST_PROFILE}` },
    ]) {
      const id = await start({ linux: { security_context: sc } });
      assert.deepEqual(await labels(id), mine, JSON.stringify(sc));
      const refused = await execSync(s.daemon.cri, id, ['touch', '/tmp/refused-by-test-profile']);
      assert.notEqual(refused.exit_code, 0, "the profile's own rule applies");
      assert.match(refused.stderr.toString(), /Permission denied/);
    }
  });

  it('a Localhost profile that is not loaded is refused, naming the field and the profile', async () => {
    const missing = `${TEST_PROFILE}-not-loaded`;
    for (const sc of [profile('Localhost', missing), { apparmor_profile: `localhost/${missing}` }]) {
      const config = containerConfig(`c${n++}`, s.image.reference, { linux: { security_context: sc } });
      await rejectsWith(
        createContainer(s.daemon.cri, s.pod, config),
        status.INVALID_ARGUMENT,
        new RegExp(`${SC}\\.apparmor\\.localhost_ref.*"${missing}" is not loaded`),
      );
    }
  });

  it('Unconfined, by either field, and a privileged container run unconfined', async () => {
    // No profile: the process keeps its creator's label, "unconfined" or, where runc has a profile
    // of its own flagged unconfined (Debian 13), "runc (unconfined)"; never enforced.
    const unconfined = /^(unconfined|runc \(unconfined\))$/;
    for (const sc of [
      profile('Unconfined'),
      { apparmor_profile: 'unconfined' },
      { ...profile('RuntimeDefault'), privileged: true },
    ]) {
      const id = await start({ linux: { security_context: sc } });
      const { main, exec } = await labels(id);
      assert.match(main, unconfined, JSON.stringify(sc));
      assert.match(exec, unconfined, JSON.stringify(sc));
    }
  });

  it('runs an ordinary workload under berth-default', async () => {
    const id = await start({ linux: { security_context: profile('RuntimeDefault') } });
    const out = await execText(s.daemon.cri, id, [
      'sh',
      '-c',
      [
        'echo hello > /tmp/file && cat /tmp/file',
        'mkdir -p /tmp/dir && touch /tmp/dir/x && rm -r /tmp/dir',
        'grep -q "^Pid:" /proc/self/status && cat /proc/self/cgroup /proc/meminfo >/dev/null',
        'echo 500 > /proc/self/oom_score_adj',
        '(sleep 0.1; echo child-done) & wait',
        'ls /sys/fs/cgroup >/dev/null && ps >/dev/null && id -u',
      ].join(' && '),
    ]);
    assert.equal(out, 'hello\nchild-done\n0\n');
  });

  it('denies writes to /proc/sys and sysrq-trigger, mount and umount; Unconfined may', async () => {
    // /proc/sys is made writable, /proc/kcore's mask kept and CAP_SYS_ADMIN granted (with no
    // seccomp filter), so that nothing but AppArmor stands between the container and each act.
    const open = {
      capabilities: { add_capabilities: ['CAP_SYS_ADMIN'] },
      readonly_paths: ['/proc/bus'],
      masked_paths: ['/proc/kcore'],
    };
    const confined = await start({ linux: { security_context: { ...open, ...profile('RuntimeDefault') } } });
    const control = await start({ linux: { security_context: { ...open, ...profile('Unconfined') } } });
    const acts: [string, string][] = [
      ['a sysctl', 'echo berth > /proc/sys/kernel/domainname'],
      // Opened for writing, nothing written: the control must not trigger anything.
      ['sysrq-trigger', ': >> /proc/sysrq-trigger'],
      ['mount', 'mount -t tmpfs berth /mnt'],
      ['umount', 'umount /proc/kcore'],
    ];
    for (const [what, script] of acts) {
      const denied = await execSync(s.daemon.cri, confined, ['sh', '-c', script]);
      assert.notEqual(denied.exit_code, 0, `${what} under berth-default`);
      assert.match(denied.stderr.toString(), /Permission denied|permission denied/, what);
      const allowed = await execSync(s.daemon.cri, control, ['sh', '-c', script]);
      assert.equal(allowed.exit_code, 0, `${what} unconfined: ${allowed.stderr.toString()}`);
    }
  });

  it('denies ptrace and signals to a process outside the profile, allows them inside it', async () => {
    // A pod sharing its pid namespace: its containers see each other's processes.
    const shared = await runPod(s.daemon.cri, s.daemon.pod('apparmor-pid', { linux: SHARED_PID_LINUX }));
    const outsider = await start(
      { command: ['/bin/sleep', '1001'], linux: { security_context: profile('Unconfined') } },
      shared,
    );
    const confined = await start({ linux: { security_context: profile('RuntimeDefault') } }, shared);
    await start(
      { command: ['/bin/sleep', '1002'], linux: { security_context: profile('RuntimeDefault') } },
      shared,
    );
    // busybox has no pgrep; the pattern is split so that the shell's own command line misses it.
    const pidOf = async (arg: string): Promise<string> => {
      const script = `ps | while read pid rest; do case "$rest" in *"sleep ${arg.slice(0, 2)}"${arg.slice(2)}*) echo $pid;; esac; done`;
      return (await execText(s.daemon.cri, confined, ['sh', '-c', script])).trim();
    };
    const outsiderPid = await pidOf('1001');
    const siblingPid = await pidOf('1002');

    const read = (pid: string) => ['sh', '-c', `cat /proc/${pid}/environ >/dev/null`];
    const denied = await execSync(s.daemon.cri, confined, read(outsiderPid));
    assert.notEqual(denied.exit_code, 0, 'ptrace read of an unconfined process');
    assert.match(denied.stderr.toString(), /Permission denied/);
    assert.equal((await execSync(s.daemon.cri, confined, read(siblingPid))).exit_code, 0, 'same profile');

    const kill = (pid: string) => ['kill', '-TERM', pid];
    const refused = await execSync(s.daemon.cri, confined, kill(outsiderPid));
    assert.notEqual(refused.exit_code, 0, 'a signal to an unconfined process');
    assert.match(refused.stderr.toString(), /Permission denied/);
    const alive = await execSync(s.daemon.cri, outsider, ['kill', '-0', outsiderPid]);
    assert.equal(alive.exit_code, 0, 'the outsider still runs');
    assert.equal((await execSync(s.daemon.cri, confined, kill(siblingPid))).exit_code, 0, 'same profile');
  });

  it('a restarted berthd loads its profile again after it was removed', async () => {
    await writeFile('/sys/kernel/security/apparmor/.remove', 'berth-default');
    assert.doesNotMatch(await readFile(LOADED, 'utf8'), /^berth-default /m);
    await s.daemon.restart();
    assert.match(await readFile(LOADED, 'utf8'), /^berth-default \(enforce\)$/m);
    const id = await start({ linux: { security_context: profile('RuntimeDefault') } });
    assert.equal((await labels(id)).main, 'berth-default (enforce)');
  });
});

describe('AppArmor where the host does not have it', { skip: offSkip, timeout: SUITE_TIMEOUT_MS }, () => {
  let s: Setup;
  let n = 0;

  before(async () => {
    s = await setUp();
  });

  after(async () => {
    await s?.daemon.destroy();
    await s?.registry.stop();
  });

  it('verbose Status says so, with no default profile', async () => {
    assert.deepEqual(await hostFeatures(s.daemon), { enabled: false, defaultProfile: null });
  });

  it('RuntimeDefault, unset and Unconfined containers run with no profile in their spec', async () => {
    for (const sc of [
      profile('RuntimeDefault'),
      {},
      { apparmor_profile: 'runtime/default' },
      profile('Unconfined'),
    ]) {
      const config = containerConfig(`c${n++}`, s.image.reference, { linux: { security_context: sc } });
      const id = await startContainer(s.daemon.cri, s.pod, config);
      const spec = (await containerInfo(s.daemon.cri, id)).runtimeSpec as {
        process: Record<string, unknown>;
      };
      assert.equal(spec.process.apparmorProfile, undefined, JSON.stringify(sc));
      assert.equal((await execText(s.daemon.cri, id, ['echo', 'ran'])).trim(), 'ran');
    }
  });

  it('a Localhost profile is refused, by either field, naming the field', async () => {
    for (const sc of [profile('Localhost', 'some-profile'), { apparmor_profile: 'localhost/some-profile' }]) {
      const config = containerConfig(`c${n++}`, s.image.reference, { linux: { security_context: sc } });
      await rejectsWith(
        createContainer(s.daemon.cri, s.pod, config),
        status.INVALID_ARGUMENT,
        new RegExp(`${SC}\\.apparmor\\.localhost_ref.*AppArmor is not enabled on this host`),
      );
    }
  });
});
