/**
 * CDI devices end to end, as device plugins and DRA drivers hand them to kubelet: a fake vendor's
 * spec files (JSON in one spec dir, YAML in the other) expose a device node under another name, a
 * mount, an env var, an extra group and an OCI hook; a container that asks for the devices (by the
 * CRI field or by annotation) sees all of them, and the device cgroup lets it open the node; one
 * that does not is denied it. Unknown, ambiguous and malformed devices fail CreateContainer naming
 * them; a spec written while berthd runs applies to the next container. Real berthd, runc and
 * busybox from a docker-registry on 127.0.0.1. Needs root.
 */
import assert from 'node:assert/strict';
import { chmod, chown, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import { isRunning } from '../../src/process/index.js';
import { BOUND_SCALE } from '../harness/bounds.js';
import { useDaemon } from '../harness/daemon.js';
import { rejectsGrpc, rejectsWith } from '../harness/grpc.js';
import { useBusyboxImage } from '../harness/images.js';
import { containerConfig, execSync, runPod, startContainer, type Pod } from '../harness/pods.js';
import { rssKiB } from '../harness/memory.js';
import { registrySkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 300_000;
/** A character device number no driver has: opening it is ENXIO once the cgroup allows it. */
const MAJOR = 240;
const MINOR = 77;
/** A Version call slower than this means berthd's event loop was held (it answers in ms). */
const VERSION_BOUND_MS = 3000 * BOUND_SCALE;
/** What a refused huge spec may leave berthd grown by: its parse ran, and ended, elsewhere. */
const RSS_GROWTH_BOUND_KIB = 200 * 1024;

/** A spec of kind `kind` with device `name` whose edits are `edits`. */
function specText(kind: string, name: string, edits: Record<string, unknown>): string {
  return JSON.stringify({ cdiVersion: '0.6.0', kind, devices: [{ name, containerEdits: edits }] });
}

describe('CDI devices', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  const imageRef = useBusyboxImage('berth/cdi');
  let base: string;
  let etcCdi: string;
  let runCdi: string;
  let pod: Pod;

  before(async () => {
    base = await mkdtemp(join(tmpdir(), 'berth-cdi-'));
    etcCdi = join(base, 'etc-cdi');
    runCdi = join(base, 'run-cdi');
    await mkdir(etcCdi);
    await mkdir(runCdi);
    await mkdir(join(base, 'vendor'));
    await writeFile(join(base, 'vendor', 'info'), 'vendor files\n');
    await run('mknod', [join(base, 'node0'), 'c', String(MAJOR), String(MINOR)], { timeoutMs: 5000 });
    // JSON, in the lower-ranked dir; the device's numbers are read from the host's node.
    await writeFile(
      join(etcCdi, 'vendor.json'),
      JSON.stringify({
        cdiVersion: '0.6.0',
        kind: 'vendor.example.com/accel',
        containerEdits: { env: ['VENDOR_RUNTIME=berth-test'] },
        devices: [
          {
            name: 'a0',
            containerEdits: {
              deviceNodes: [{ path: '/dev/accel0', hostPath: join(base, 'node0'), permissions: 'rw' }],
              mounts: [
                { hostPath: join(base, 'vendor'), containerPath: '/opt/vendor', options: ['ro', 'rbind'] },
              ],
              env: ['ACCEL=a0'],
              additionalGIDs: [4242],
              hooks: [
                {
                  hookName: 'createRuntime',
                  path: '/bin/sh',
                  args: ['sh', '-c', `cat > /dev/null; echo ran > ${join(base, 'hook-ran')}`],
                },
              ],
            },
          },
        ],
      }),
    );
    // YAML, in the higher-ranked dir, with the numbers given.
    await writeFile(
      join(runCdi, 'other.yaml'),
      [
        'cdiVersion: "0.5.0"',
        'kind: other.example.org/ctl',
        'devices:',
        '  - name: c1',
        '    containerEdits:',
        '      env: ["CTL=c1"]',
        '      deviceNodes:',
        `        - {path: /dev/ctl1, type: c, major: ${MAJOR}, minor: ${MINOR + 1}}`,
        '',
      ].join('\n'),
    );
  });

  after(async () => {
    if (base) await rm(base, { recursive: true, force: true });
  });

  const daemon = useDaemon(
    () => Promise.resolve({ extraArgs: ['--cdi-spec-dir', etcCdi, '--cdi-spec-dir', runCdi] }),
    async (d) => {
      await d.cri.callImage('PullImage', { image: { image: imageRef() } });
      pod = await runPod(d.cri, d.pod('cdi'));
    },
  );

  const sleeper = (name: string, extra: Record<string, unknown> = {}): Record<string, unknown> =>
    containerConfig(name, imageRef(), { command: ['sleep', '3600'], ...extra });

  /** CreateContainer of a sleeper asking for CDI device `device`. */
  const createWith = (name: string, device: string): Promise<unknown> =>
    daemon().cri.call('CreateContainer', {
      pod_sandbox_id: pod.id,
      config: sleeper(name, { CDI_devices: [{ name: device }] }),
      sandbox_config: pod.config,
    });

  /** `call`'s outcome, and the slowest Version berthd answered while it ran (one at a time). */
  async function versionsWhile<T>(
    call: Promise<T>,
  ): Promise<{ result: PromiseSettledResult<T>; slowestMs: number }> {
    let settled = false;
    const result = Promise.allSettled([call]).then(([r]) => {
      settled = true;
      return r as PromiseSettledResult<T>;
    });
    let slowestMs = 0;
    while (!settled) {
      const started = Date.now();
      await daemon().cri.call('Version', {}, { deadlineMs: VERSION_BOUND_MS * 2 });
      slowestMs = Math.max(slowestMs, Date.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return { result: await result, slowestMs };
  }

  /** What `script` prints in the container, stderr included. */
  async function sh(id: string, script: string): Promise<string> {
    const res = await execSync(daemon().cri, id, ['sh', '-c', script]);
    return res.stdout.toString() + res.stderr.toString();
  }

  test('a container gets the device nodes, mounts, env, groups and hooks of its devices, JSON and YAML', async () => {
    const { cri } = daemon();
    const id = await startContainer(
      cri,
      pod,
      sleeper('accel', {
        CDI_devices: [{ name: 'vendor.example.com/accel=a0' }],
        annotations: { 'cdi.k8s.io/other': 'other.example.org/ctl=c1' },
      }),
    );
    assert.match(await sh(id, 'cat /opt/vendor/info'), /vendor files/);
    assert.match(await sh(id, 'touch /opt/vendor/x'), /Read-only file system/);
    const env = await sh(id, 'env');
    assert.match(env, /^VENDOR_RUNTIME=berth-test$/m);
    assert.match(env, /^ACCEL=a0$/m);
    assert.match(env, /^CTL=c1$/m);
    assert.match(await sh(id, 'id -G'), /\b4242\b/);
    // The cgroup lets it through to the driver, which has no such device.
    assert.match(await sh(id, 'exec 3</dev/accel0'), /No such device or address/);
    assert.match(await sh(id, 'exec 3</dev/ctl1'), /No such device or address/);
    assert.equal((await readFile(join(base, 'hook-ran'), 'utf8')).trim(), 'ran');

    const plain = await startContainer(cri, pod, sleeper('plain'));
    assert.match(await sh(plain, 'ls /dev/accel0'), /No such file/);
    // The same node made inside is still refused by the device cgroup.
    assert.match(
      await sh(plain, `mknod /tmp/n c ${MAJOR} ${MINOR} && exec 3</tmp/n`),
      /Operation not permitted/,
    );
  });

  test('unknown, ambiguous and malformed devices fail CreateContainer naming them', async () => {
    const { cri } = daemon();
    await rejectsWith(
      createWith('unknown', 'vendor.example.com/accel=a9'),
      status.INVALID_ARGUMENT,
      /vendor\.example\.com\/accel=a9 is not defined by any spec/,
    );
    await rejectsWith(
      createWith('malformed', 'accel0'),
      status.INVALID_ARGUMENT,
      /config\.CDI_devices\[0\]\.name/,
    );
    const twin = join(etcCdi, 'vendor-twin.json');
    await writeFile(twin, await readFile(join(etcCdi, 'vendor.json')));
    try {
      await rejectsWith(
        createWith('ambiguous', 'vendor.example.com/accel=a0'),
        status.INVALID_ARGUMENT,
        /ambiguous: .*vendor-twin\.json.*vendor\.json|ambiguous: .*vendor\.json.*vendor-twin\.json/,
      );
    } finally {
      await rm(twin);
    }
    // Nothing of the refused ones is left.
    const listed = await cri.call<{ containers: { metadata: { name: string } }[] }>('ListContainers', {});
    const names = listed.containers.map((c) => c.metadata.name);
    for (const name of ['unknown', 'malformed', 'ambiguous']) assert.ok(!names.includes(name), name);
  });

  test('a spec written while berthd runs applies to the next container; a broken one is named', async () => {
    const { cri } = daemon();
    const broken = join(runCdi, 'broken.yaml');
    await writeFile(broken, 'cdiVersion: "0.6.0"\nkind: late.example.net/x\ndevices: [ {name: late\n');
    await rejectsWith(
      createWith('late', 'late.example.net/x=late'),
      status.INVALID_ARGUMENT,
      /not defined by any spec.*unreadable spec files: CDI spec .*broken\.yaml/,
    );
    await writeFile(
      broken,
      'cdiVersion: "0.6.0"\nkind: late.example.net/x\ndevices: [{name: late, containerEdits: {env: [LATE=yes]}}]\n',
    );
    const id = await startContainer(
      cri,
      pod,
      sleeper('late', { CDI_devices: [{ name: 'late.example.net/x=late' }] }),
    );
    assert.match(await sh(id, 'env'), /^LATE=yes$/m);
  });

  test('a huge spec is parsed off the event loop and refused past the depth and device caps', async () => {
    const d = daemon();
    const nested = join(runCdi, 'nested.json');
    const many = join(runCdi, 'many.json');
    // Just under the 4 MiB size cap: a JSON list two million levels deep.
    const depth = 2_000_000;
    const head =
      '{"cdiVersion":"0.6.0","kind":"huge.example.com/x","devices":[{"name":"d","containerEdits":{"env":';
    await writeFile(nested, `${head}${'['.repeat(depth)}${']'.repeat(depth)}}}]}`);
    // Valid but for its count: 40,000 devices in 3.6 MB.
    const devices = Array.from({ length: 40_000 }, (_, i) => ({
      name: `dev${i}`,
      containerEdits: { env: [`DEV=${i}`, `DEV_PATH=/dev/vendor/many/${i}`] },
    }));
    await writeFile(many, JSON.stringify({ cdiVersion: '0.6.0', kind: 'many.example.com/x', devices }));
    try {
      const before = await rssKiB(d.proc?.pid);
      const { result, slowestMs } = await versionsWhile(createWith('huge', 'huge.example.com/x=d'));
      assert.equal(result.status, 'rejected');
      await rejectsWith(
        Promise.reject((result as PromiseRejectedResult).reason),
        status.INVALID_ARGUMENT,
        /nested\.json: nests deeper than 64 levels/,
      );
      const second = await versionsWhile(createWith('many', 'many.example.com/x=dev1'));
      await rejectsWith(
        Promise.reject((second.result as PromiseRejectedResult).reason),
        status.INVALID_ARGUMENT,
        /many\.json: devices lists 40000 devices, more than 8192/,
      );
      assert.ok(slowestMs < VERSION_BOUND_MS, `Version took ${slowestMs} ms beside the nested spec`);
      assert.ok(
        second.slowestMs < VERSION_BOUND_MS,
        `Version took ${second.slowestMs} ms beside the big spec`,
      );
      const growth = (await rssKiB(d.proc?.pid)) - before;
      assert.ok(growth < RSS_GROWTH_BOUND_KIB, `berthd grew by ${growth} KiB`);
    } finally {
      await rm(nested, { force: true });
      await rm(many, { force: true });
    }
  });

  test('a spec file or dir another user could write is refused, naming it', async () => {
    const loose = join(runCdi, 'loose.json');
    const owned = join(runCdi, 'owned.json');
    const hookRan = join(base, 'untrusted-hook-ran');
    const hook = {
      hookName: 'createRuntime',
      path: '/bin/sh',
      args: ['sh', '-c', `cat >/dev/null; touch ${hookRan}`],
    };
    await writeFile(loose, specText('loose.example.com/x', 'd', { hooks: [hook] }));
    await chmod(loose, 0o666);
    await writeFile(owned, specText('owned.example.com/x', 'd', { hooks: [hook] }));
    await chown(owned, 1000, 1000);
    try {
      await rejectsWith(
        createWith('loose', 'loose.example.com/x=d'),
        status.INVALID_ARGUMENT,
        /loose\.json: is writable by group and others \(mode 0666\)/,
      );
      await rejectsWith(
        createWith('owned', 'owned.example.com/x=d'),
        status.INVALID_ARGUMENT,
        /owned\.json: is owned by uid 1000, not root/,
      );
      await chmod(etcCdi, 0o775);
      await rejectsWith(
        createWith('loose-dir', 'vendor.example.com/accel=a0'),
        status.INVALID_ARGUMENT,
        /CDI spec dir .*etc-cdi is writable by group \(mode 0775\)/,
      );
      await assert.rejects(readFile(hookRan), { code: 'ENOENT' });
      assert.match(daemon().output, /CDI spec dir not trusted/);
    } finally {
      await chmod(etcCdi, 0o755);
      await rm(loose, { force: true });
      await rm(owned, { force: true });
    }
  });

  test("a CDI mount of berth's own database is refused as a hostPath of it is", async () => {
    const own = join(runCdi, 'own.json');
    const db = join(daemon().rootDir, 'berth.db');
    await writeFile(
      own,
      specText('own.example.com/x', 'd', { mounts: [{ hostPath: db, containerPath: '/db' }] }),
    );
    try {
      await rejectsWith(
        createWith('own', 'own.example.com/x=d'),
        status.FAILED_PRECONDITION,
        /CDI device own\.example\.com\/x=d: mounts\[0\]\.hostPath: .*berth\.db is the container runtime's own/,
      );
    } finally {
      await rm(own, { force: true });
    }
  });

  test('spec files past the 1,024th are logged once and errors name only a few files', async () => {
    const extra = Array.from({ length: 1030 }, (_, i) =>
      join(runCdi, `zz-${String(i).padStart(4, '0')}.json`),
    );
    await Promise.all(extra.map((file) => writeFile(file, '{"cdiVersion": "0.6.0"')));
    try {
      for (const name of ['many1', 'many2']) {
        const err = await rejectsWith(
          createWith(name, 'vendor.example.com/accel=a9'),
          status.INVALID_ARGUMENT,
          /unreadable spec files: .*zz-0000\.json.*; and \d+ more; not read: \d+ spec files of .*run-cdi past the first 1024/,
        );
        assert.ok(err.details.length < 2000, `the error is ${err.details.length} characters`);
      }
      const logged = daemon().output.match(/CDI spec files past the first 1024 of the dir ignored/g) ?? [];
      assert.equal(logged.length, 1);
    } finally {
      await Promise.all(extra.map((file) => rm(file, { force: true })));
    }
  });

  test('a CDI hook still running when the create gives up is killed with it', async () => {
    const slow = join(runCdi, 'slow.json');
    const pidFile = join(base, 'slow-hook.pid');
    const hook = {
      hookName: 'createRuntime',
      path: '/bin/sh',
      args: ['sh', '-c', `cat >/dev/null; echo $$ > ${pidFile}; exec sleep 3600`],
    };
    await writeFile(slow, specText('slow.example.com/x', 'd', { hooks: [hook] }));
    try {
      const err = await rejectsGrpc(createWith('slow', 'slow.example.com/x=d'));
      assert.match(err.details, /timed out/);
      const pid = Number(await readFile(pidFile, 'utf8'));
      assert.ok(pid > 0);
      assert.equal(await isRunning(pid), false, `the hook's sleep (pid ${pid}) is still running`);
    } finally {
      await rm(slow, { force: true });
    }
  });
});
