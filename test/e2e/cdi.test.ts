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
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import { useDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { useBusyboxImage } from '../harness/images.js';
import { containerConfig, execSync, runPod, startContainer, type Pod } from '../harness/pods.js';
import { registrySkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 300_000;
/** A character device number no driver has: opening it is ENXIO once the cgroup allows it. */
const MAJOR = 240;
const MINOR = 77;

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
});
