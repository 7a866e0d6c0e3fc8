/**
 * The pod sandbox lifecycle end to end, against a real berthd: real pinned netns, real CNI
 * plugins (bridge + host-local on a throwaway /24), real runc and catatonit. Needs root.
 * Sends no traffic: every check reads the host's state (mounts, /proc, leases, SQLite).
 */
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import { isMounted } from '../../src/netns/index.js';
import { isRunning } from '../../src/process/index.js';
import { podConfig, TestDaemon } from '../harness/daemon.js';
import { selectRows } from '../harness/database.js';
import { rejectsWith } from '../harness/grpc.js';
import { nsInode } from '../harness/namespaces.js';
import { podStatus, runPodSandbox } from '../harness/pods.js';
import { waitFor } from '../harness/wait.js';

const T = 20_000;

interface PodSandboxStatus {
  id: string;
  metadata: { name: string; namespace: string; uid: string; attempt: number };
  state: string;
  created_at: string;
  network: { ip: string; additional_ips: { ip: string }[] };
  linux: { namespaces: { options: { network: string; pid: string; ipc: string } } };
  labels: Record<string, string>;
  annotations: Record<string, string>;
  runtime_handler: string;
}

interface ListedSandbox {
  id: string;
  state: string;
  metadata: { name: string };
}

interface DbRow {
  id: string;
  state: string;
  netns_path: string | null;
  ip: string;
  pid: number;
}

interface ListFilter {
  id?: string;
  state?: { state: string };
  label_selector?: Record<string, string>;
}

/** Everything a pod can leave on the host, sorted, so two snapshots compare with deepEqual. */
interface HostSnapshot {
  leases: string[];
  netns: string[];
  runc: string[];
  rows: string[];
  dirs: string[];
}

const UNKNOWN_ID = 'f'.repeat(64);

const hostNetworkLinux = { security_context: { namespace_options: { network: 'NODE', pid: 'CONTAINER' } } };

/**
 * Pods as kubelet sends them when they do not share a pid namespace: with pod_infra = auto they run
 * no infra process, with always they run one; every test below runs in both modes.
 */
function pod(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return podConfig(name, {
    linux: { security_context: { namespace_options: { pid: 'CONTAINER' } } },
    ...extra,
  });
}

let daemon: TestDaemon;
let infra = true;

async function stopPod(id: string): Promise<void> {
  await daemon.cri.call('StopPodSandbox', { pod_sandbox_id: id });
}

async function removePod(id: string): Promise<void> {
  await daemon.cri.call('RemovePodSandbox', { pod_sandbox_id: id });
}

async function listIds(filter: ListFilter | null = null): Promise<string[]> {
  const res = await daemon.cri.call<{ items: ListedSandbox[] }>('ListPodSandbox', filter ? { filter } : {});
  return res.items.map((item) => item.id).sort();
}

function dbRows(): DbRow[] {
  return selectRows(daemon.rootDir, 'SELECT id, state, netns_path, ip, pid FROM sandboxes ORDER BY id');
}

function dbRow(id: string): DbRow | undefined {
  return dbRows().find((row) => row.id === id);
}

async function snapshot(): Promise<HostSnapshot> {
  return {
    leases: (await daemon.leasedIps()).sort(),
    netns: (await daemon.netnsFiles()).sort(),
    runc: (await daemon.runcContainers()).sort(),
    rows: dbRows().map((row) => row.id),
    dirs: (await daemon.sandboxDirs()).sort(),
  };
}

/** The IPv4 addresses on eth0 inside a pinned netns, as `ip` in that namespace reports them. */
async function eth0Ips(netnsPath: string): Promise<string[]> {
  const { stdout } = await run('nsenter', [`--net=${netnsPath}`, 'ip', '-j', '-4', 'addr', 'show', 'eth0'], {
    timeoutMs: T,
  });
  const links = JSON.parse(stdout) as { addr_info: { local: string; prefixlen: number }[] }[];
  return links.flatMap((link) => link.addr_info.map((a) => `${a.local}/${a.prefixlen}`));
}

async function procCmdline(pid: number): Promise<string[]> {
  return (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0').filter(Boolean);
}

async function waitGone(pid: number): Promise<void> {
  await waitFor(async () => !(await isRunning(pid)), 30_000);
}

/** The infra of a pod that ran one is gone; a pod without one reported pid 0 all along. */
async function waitInfraGone(pid: number): Promise<void> {
  if (infra) await waitGone(pid);
  else assert.equal(pid, 0, 'a pod without infra has no pid');
}

/** The pod's mounts on the host: shm, namespace pins, netns. */
async function mountsOf(id: string): Promise<string[]> {
  return (await daemon.podMounts()).filter((path) => path.includes(id)).sort();
}

function inTestSubnet(ip: string): boolean {
  return ip.startsWith(`${daemon.network.prefix}.`);
}

/** A prefix of `id` that no other id starts with. */
function uniquePrefix(id: string, others: string[]): string {
  for (let n = 6; n < id.length; n++) {
    const prefix = id.slice(0, n);
    if (!others.some((o) => o !== id && o.startsWith(prefix))) return prefix;
  }
  return id;
}

async function assertRemoved(id: string): Promise<void> {
  assert.ok(!(await daemon.netnsFiles()).includes(`berth-${id}`), 'netns file gone');
  assert.ok(!(await daemon.runcContainers()).includes(id), 'runc container gone');
  assert.equal(dbRow(id), undefined, 'row gone');
  assert.ok(!(await daemon.sandboxDirs()).includes(id), 'sandbox dir gone');
  await rejectsWith(podStatus<PodSandboxStatus>(daemon.cri, id), status.NOT_FOUND, id);
  assert.ok(!(await listIds()).includes(id), 'not listed');
}

type Condition = { status: boolean; reason: string; message: string };

async function conditions(): Promise<Record<string, Condition>> {
  const res = await daemon.cri.call<{ status: { conditions: (Condition & { type: string })[] } }>(
    'Status',
    {},
  );
  return Object.fromEntries(res.status.conditions.map(({ type, ...c }) => [type, c]));
}

for (const mode of ['auto', 'always'] as const)
  describe(`pod sandbox lifecycle (pod_infra = ${mode})`, { timeout: 300_000 }, () => {
    before(async () => {
      infra = mode === 'always';
      daemon = await TestDaemon.create({ extraArgs: ['--pod-infra', mode] });
    });

    after(async () => {
      await daemon?.destroy();
    });

    test("RunPodSandbox pins a netns, attaches it, holds the pod's namespaces (catatonit or pins) and records it", async () => {
      const config = pod('lc-run', {
        dns_config: { servers: ['10.210.0.10'], searches: ['svc.cluster.local'], options: ['ndots:5'] },
        linux: { security_context: { namespace_options: { network: 'POD', pid: 'CONTAINER', ipc: 'POD' } } },
      });
      const startedMs = BigInt(Date.now());
      const id = await runPodSandbox(daemon.cri, config);
      const endedMs = BigInt(Date.now());
      const { status: st, info } = await podStatus<PodSandboxStatus>(daemon.cri, id);

      // The pinned netns: a file in the daemon's netns dir, bind-mounted.
      const key = info.sandboxKey;
      assert.ok(key, 'sandboxKey is set for a pod-network sandbox');
      assert.equal(key, join(daemon.netnsDir, `berth-${id}`));
      assert.ok((await daemon.netnsFiles()).includes(basename(key)));
      assert.equal(await isMounted(key), true, 'the pin is a mount');

      assert.notEqual(await nsInode(key), await nsInode('/proc/self/ns/net'));
      if (infra) {
        // The infra process lives in exactly that namespace, not the host's.
        assert.ok(info.pid > 0);
        assert.equal(await isRunning(info.pid), true);
        assert.equal(await nsInode(`/proc/${info.pid}/ns/net`), await nsInode(key));
        const cmdline = await procCmdline(info.pid);
        assert.match(cmdline[0] ?? '', /catatonit$/);
        assert.ok(cmdline.includes('-P'), `catatonit in pause mode: ${cmdline.join(' ')}`);
        const { stdout: uts } = await run('nsenter', ['--uts', `--target=${info.pid}`, 'hostname'], {
          timeoutMs: T,
        });
        assert.equal(uts.trim(), 'lc-run');
      } else {
        // No process: the ipc and uts namespaces are pinned in the sandbox dir, the hostname set in the latter.
        assert.equal(info.pid, 0);
        assert.ok(!(await daemon.runcContainers()).includes(id), 'no runc container for the pod');
        const pins = join(daemon.rootDir, 'sandboxes', id, 'ns');
        assert.deepEqual(
          await mountsOf(id),
          [join(pins, 'ipc'), join(pins, 'uts'), key, join(info.sandboxDir, 'shm')].sort(),
        );
        assert.notEqual(await nsInode(join(pins, 'ipc')), await nsInode('/proc/self/ns/ipc'));
        assert.notEqual(await nsInode(join(pins, 'uts')), await nsInode('/proc/self/ns/uts'));
        const { stdout: uts } = await run('nsenter', [`--uts=${join(pins, 'uts')}`, 'hostname'], {
          timeoutMs: T,
        });
        assert.equal(uts.trim(), 'lc-run');
      }

      // CNI gave eth0 the address the status reports, from the test's /24, leased by host-local.
      const ip = st.network.ip;
      assert.ok(inTestSubnet(ip), `${ip} is in ${daemon.network.prefix}.0/24`);
      assert.deepEqual(await eth0Ips(key), [`${ip}/24`]);
      assert.ok((await daemon.leasedIps()).includes(ip), 'host-local holds a lease for the pod IP');

      // SQLite agrees with the host.
      const row = dbRow(id);
      assert.ok(row, 'a sandboxes row exists');
      assert.equal(row.netns_path, key);
      assert.equal(row.state, 'READY');
      assert.equal(row.ip, ip);
      assert.equal(row.pid, info.pid);

      // The CRI status fields.
      assert.equal(st.id, id);
      assert.equal(st.state, 'SANDBOX_READY');
      assert.deepEqual(st.metadata, {
        name: 'lc-run',
        namespace: 'berth-test',
        uid: 'uid-lc-run',
        attempt: 0,
      });
      assert.deepEqual(st.labels, { app: 'lc-run', suite: 'berth' });
      assert.deepEqual(st.annotations, { 'berth.test/name': 'lc-run' });
      assert.match(st.created_at, /^\d{19}$/);
      const created = BigInt(st.created_at);
      assert.ok(
        created >= startedMs * 1_000_000n && created <= (endedMs + 1n) * 1_000_000n,
        'created_at is now',
      );
      const { network, pid, ipc } = st.linux.namespaces.options;
      assert.deepEqual({ network, pid, ipc }, { network: 'POD', pid: 'CONTAINER', ipc: 'POD' });
      assert.equal(st.runtime_handler, '');

      // resolv.conf comes from dns_config, in the pod's own dir.
      assert.equal(info.sandboxDir, join(daemon.rootDir, 'sandboxes', id));
      assert.ok((await daemon.sandboxDirs()).includes(id));
      const resolv = await readFile(join(info.sandboxDir, 'resolv.conf'), 'utf8');
      assert.deepEqual(resolv.trim().split('\n'), [
        'search svc.cluster.local',
        'nameserver 10.210.0.10',
        'options ndots:5',
      ]);

      await removePod(id);
    });

    test('ListPodSandbox filters by id, id prefix, state and labels', async () => {
      const a = await runPodSandbox(daemon.cri, pod('lc-list-a'));
      const b = await runPodSandbox(daemon.cri, pod('lc-list-b'));
      await stopPod(b);

      const all = await listIds();
      assert.ok(all.includes(a) && all.includes(b), 'an unfiltered list holds both');
      assert.deepEqual(await listIds({ id: a }), [a]);
      assert.deepEqual(await listIds({ id: uniquePrefix(a, all) }), [a]);
      assert.deepEqual(await listIds({ id: UNKNOWN_ID }), []);

      const ready = await listIds({ state: { state: 'SANDBOX_READY' } });
      assert.ok(ready.includes(a) && !ready.includes(b), 'READY: a only');
      const notReady = await listIds({ state: { state: 'SANDBOX_NOTREADY' } });
      assert.ok(notReady.includes(b) && !notReady.includes(a), 'NOTREADY: b only');
      assert.deepEqual(await listIds({ id: b, state: { state: 'SANDBOX_READY' } }), []);

      assert.deepEqual(await listIds({ label_selector: { app: 'lc-list-a' } }), [a]);
      assert.deepEqual(await listIds({ label_selector: { app: 'lc-list-b', suite: 'berth' } }), [b]);
      assert.deepEqual(await listIds({ label_selector: { app: 'lc-list-a', suite: 'other' } }), []);
      assert.deepEqual(await listIds({ label_selector: { app: 'no-such-app' } }), []);

      await removePod(a);
      await removePod(b);
    });

    test('RunPodSandbox with the same metadata returns the same sandbox', async () => {
      const config = pod('lc-repeat');
      const id = await runPodSandbox(daemon.cri, config);
      const before = await snapshot();
      assert.equal(await runPodSandbox(daemon.cri, config), id);
      assert.deepEqual(await snapshot(), before, 'the repeat created nothing');

      // Two at once (kubelet retrying while the first is still running) also share one sandbox.
      const twin = pod('lc-repeat-twin');
      const [x, y] = await Promise.all([runPodSandbox(daemon.cri, twin), runPodSandbox(daemon.cri, twin)]);
      assert.equal(x, y);
      const netns = await daemon.netnsFiles();
      assert.equal(netns.filter((f) => f === `berth-${x}`).length, 1);
      assert.equal(netns.length, before.netns.length + 1, 'one netns for the twin requests');

      await removePod(id);
      await removePod(x);
    });

    test('StopPodSandbox kills the infra or unpins, releases the IP, unmounts the netns, and is idempotent', async () => {
      const id = await runPodSandbox(daemon.cri, pod('lc-stop'));
      const { status: st, info } = await podStatus<PodSandboxStatus>(daemon.cri, id);
      const key = info.sandboxKey ?? '';
      assert.ok((await daemon.leasedIps()).includes(st.network.ip));

      await stopPod(id);
      const after = await podStatus<PodSandboxStatus>(daemon.cri, id);
      assert.equal(after.status.state, 'SANDBOX_NOTREADY');
      assert.equal(dbRow(id)?.state, 'NOTREADY');
      assert.ok(!(await daemon.leasedIps()).includes(st.network.ip), 'the lease is released');
      assert.ok((await daemon.netnsFiles()).includes(`berth-${id}`), 'the pin file is kept until remove');
      assert.equal(await isMounted(key), false, 'the pin is unmounted');
      assert.deepEqual(await mountsOf(id), [], 'shm and every namespace pin are unmounted');
      await waitInfraGone(info.pid);

      await stopPod(id);
      assert.equal((await podStatus<PodSandboxStatus>(daemon.cri, id)).status.state, 'SANDBOX_NOTREADY');
      await stopPod(UNKNOWN_ID);

      await removePod(id);
    });

    test('RemovePodSandbox removes everything, is idempotent, and works on a READY pod', async () => {
      const before = await snapshot();
      const stopped = await runPodSandbox(daemon.cri, pod('lc-remove-stopped'));
      await stopPod(stopped);
      await removePod(stopped);
      await assertRemoved(stopped);
      await removePod(stopped);
      await removePod(UNKNOWN_ID);

      const ready = await runPodSandbox(daemon.cri, pod('lc-remove-ready'));
      const { status: st, info } = await podStatus<PodSandboxStatus>(daemon.cri, ready);
      assert.ok((await daemon.leasedIps()).includes(st.network.ip));
      await removePod(ready);
      await assertRemoved(ready);
      assert.ok(!(await daemon.leasedIps()).includes(st.network.ip), 'the lease is released');
      await waitInfraGone(info.pid);

      assert.deepEqual(await snapshot(), before, 'nothing is left on the host');
    });

    test('a host-network pod shares the host netns and needs no CNI', async () => {
      const before = await snapshot();
      const id = await runPodSandbox(daemon.cri, pod('lc-hostnet', { linux: hostNetworkLinux }));
      const { status: st, info } = await podStatus<PodSandboxStatus>(daemon.cri, id);

      assert.equal(st.state, 'SANDBOX_READY');
      assert.equal(st.network.ip, '');
      assert.equal(st.linux.namespaces.options.network, 'NODE');
      assert.equal(info.sandboxKey, null);
      assert.equal(info.hostNetwork, true);
      assert.equal(dbRow(id)?.netns_path, null);
      assert.deepEqual(await daemon.netnsFiles(), before.netns, 'no netns pin');
      assert.deepEqual((await daemon.leasedIps()).sort(), before.leases, 'no lease');
      if (infra) {
        assert.equal(await nsInode(`/proc/${info.pid}/ns/net`), await nsInode('/proc/self/ns/net'));
      } else {
        // The host's uts namespace, as with an infra; only the pod's ipc namespace is pinned.
        const pins = join(daemon.rootDir, 'sandboxes', id, 'ns');
        assert.deepEqual(await mountsOf(id), [join(pins, 'ipc'), join(info.sandboxDir, 'shm')].sort());
      }

      await stopPod(id);
      assert.equal((await podStatus<PodSandboxStatus>(daemon.cri, id)).status.state, 'SANDBOX_NOTREADY');
      await waitInfraGone(info.pid);
      await removePod(id);
      await assertRemoved(id);
      assert.deepEqual(await snapshot(), before);
    });

    test('bad requests are INVALID_ARGUMENT naming the field, and leave nothing behind', async () => {
      const before = await snapshot();
      const metadata = (name: string, namespace: string, uid: string) => ({
        metadata: { name, namespace, uid },
      });
      const call = (rpc: string, req: object) => () => daemon.cri.call(rpc, req);
      const start =
        (config: Record<string, unknown>, handler = '') =>
        () =>
          runPodSandbox(daemon.cri, config, handler);
      const cases: [string, () => Promise<unknown>, string][] = [
        ['no config', call('RunPodSandbox', {}), 'config:'],
        ['no metadata', call('RunPodSandbox', { config: { hostname: 'x' } }), 'config.metadata:'],
        ['empty name', start(pod('x', metadata('', 'ns', 'u'))), 'config.metadata.name:'],
        ['empty namespace', start(pod('x', metadata('n', '', 'u'))), 'config.metadata.namespace:'],
        ['empty uid', start(pod('x', metadata('n', 'ns', ''))), 'config.metadata.uid:'],
        ['slash in name', start(pod('x', metadata('a/b', 'ns', 'u'))), 'config.metadata.name:'],
        ['bad hostname', start(pod('lc-bad-host', { hostname: 'not_a host!' })), 'config.hostname:'],
        [
          'relative log dir',
          start(pod('lc-bad-log', { log_directory: 'var/log/pods' })),
          'config.log_directory:',
        ],
        ['unknown handler', start(pod('lc-bad-handler'), 'kata'), 'runtime_handler:'],
        [
          'bad DNS server',
          start(pod('lc-bad-dns', { dns_config: { servers: ['not-an-ip'], searches: [], options: [] } })),
          'config.dns_config.servers[0]:',
        ],
        [
          'port > 65535',
          start(
            pod('lc-bad-port', {
              port_mappings: [{ protocol: 'TCP', container_port: 70000, host_port: 0 }],
            }),
          ),
          'config.port_mappings[0].container_port:',
        ],
        ['status, empty id', call('PodSandboxStatus', { pod_sandbox_id: '' }), 'pod_sandbox_id:'],
        ['stop, empty id', call('StopPodSandbox', { pod_sandbox_id: '' }), 'pod_sandbox_id:'],
        ['remove, empty id', call('RemovePodSandbox', { pod_sandbox_id: '' }), 'pod_sandbox_id:'],
      ];
      for (const [what, send, field] of cases) {
        await rejectsWith(send(), status.INVALID_ARGUMENT, field).catch((err: unknown) => {
          throw new Error(`${what}: ${err instanceof Error ? err.message : String(err)}`);
        });
      }
      await rejectsWith(
        daemon.cri.call('PodSandboxStatus', { pod_sandbox_id: UNKNOWN_ID }),
        status.NOT_FOUND,
        UNKNOWN_ID,
      );

      assert.deepEqual(await snapshot(), before, 'no netns, container, row, dir or lease was made');
      assert.equal(daemon.proc?.exitCode, null, 'the daemon is still running');
      assert.ok(!daemon.output.includes('unhandled rejection'), 'no request escaped its handler');
      const version = await daemon.cri.call<{ runtime_name: string }>('Version', {});
      assert.equal(version.runtime_name, 'berth');
    });

    test('20 concurrent RunPodSandbox calls get 20 pods with their own IPs, and all go away', async () => {
      const before = await snapshot();
      const names = Array.from({ length: 20 }, (_, i) => `lc-many-${i}`);
      const ids = await Promise.all(names.map((name) => runPodSandbox(daemon.cri, pod(name))));
      assert.equal(new Set(ids).size, 20, 'distinct ids');

      const statuses = await Promise.all(ids.map((id) => podStatus<PodSandboxStatus>(daemon.cri, id)));
      const ips = statuses.map((s) => s.status.network.ip);
      assert.equal(new Set(ips).size, 20, `distinct IPs: ${ips.join(' ')}`);
      for (const [i, { status: st, info }] of statuses.entries()) {
        assert.equal(st.state, 'SANDBOX_READY');
        assert.equal(st.metadata.name, names[i]);
        assert.ok(inTestSubnet(st.network.ip));
        assert.deepEqual(
          await eth0Ips(info.sandboxKey ?? ''),
          [`${st.network.ip}/24`],
          `eth0 of ${names[i]}`,
        );
      }
      const leases = await daemon.leasedIps();
      assert.ok(
        ips.every((ip) => leases.includes(ip)),
        'every pod IP is leased',
      );

      await Promise.all(ids.map((id) => removePod(id)));
      const left = await snapshot();
      assert.deepEqual(left, before, 'no leases, netns files, runc containers, rows or dirs are left');
      assert.ok(!ips.some((ip) => left.leases.includes(ip)));
    });

    test('Version, RuntimeConfig and Status; network readiness follows the CNI conf dir', async () => {
      const version = await daemon.cri.call<Record<string, string>>('Version', { version: '0.1.0' });
      assert.equal(version.runtime_name, 'berth');
      assert.equal(version.runtime_api_version, 'v1');
      assert.ok(version.runtime_version, 'a runtime version is reported');

      const config = await daemon.cri.call<{ linux: { cgroup_driver: string } }>('RuntimeConfig', {});
      assert.equal(config.linux.cgroup_driver, 'CGROUPFS');

      assert.deepEqual(await conditions(), {
        RuntimeReady: { status: true, reason: '', message: '' },
        NetworkReady: { status: true, reason: '', message: '' },
      });

      const before = await snapshot();
      await daemon.writeCniConfig('none');
      try {
        const notReady = await conditions();
        assert.equal(notReady.NetworkReady?.status, false);
        assert.equal(notReady.NetworkReady?.reason, 'NetworkPluginNotReady');
        assert.ok(notReady.NetworkReady?.message, 'a message says why');
        assert.equal(notReady.RuntimeReady?.status, true);

        await rejectsWith(runPodSandbox(daemon.cri, pod('lc-no-cni')), status.FAILED_PRECONDITION, 'network');
        assert.deepEqual(await snapshot(), before, 'the refused pod left nothing behind');

        // Host-network pods (e.g. the CNI plugin's own daemonset) must still start.
        const hostPod = await runPodSandbox(
          daemon.cri,
          pod('lc-no-cni-hostnet', { linux: hostNetworkLinux }),
        );
        assert.equal((await podStatus<PodSandboxStatus>(daemon.cri, hostPod)).status.state, 'SANDBOX_READY');
        await removePod(hostPod);
      } finally {
        await daemon.writeCniConfig('bridge');
      }
      assert.equal((await conditions()).NetworkReady?.status, true);
      assert.deepEqual(await snapshot(), before);
    });

    test('NetworkReady is false, naming the file and plugin, when a plugin binary is missing or the conflist is broken', async () => {
      const before = await snapshot();
      const conflist = join(daemon.cniConfDir, '10-missing.conflist');
      const notReadyBecause = async (...words: string[]): Promise<void> => {
        const network = (await conditions()).NetworkReady;
        assert.equal(network?.status, false);
        assert.equal(network?.reason, 'NetworkPluginNotReady');
        for (const word of words)
          assert.ok(network?.message.includes(word), `"${word}" in: ${network?.message}`);
      };
      await daemon.writeCniConfig('none');
      try {
        await writeFile(
          conflist,
          JSON.stringify({
            cniVersion: '1.0.0',
            name: 'missing-plugin',
            plugins: [{ type: 'berth-no-such-plugin', ipam: { type: 'host-local' } }],
          }),
        );
        await notReadyBecause('10-missing.conflist', 'berth-no-such-plugin');
        // Refused before anything is made, rather than failing half-way at CNI ADD.
        await rejectsWith(
          runPodSandbox(daemon.cri, pod('lc-missing-plugin')),
          status.FAILED_PRECONDITION,
          'berth-no-such-plugin',
        );
        assert.deepEqual(await snapshot(), before, 'the refused pod left nothing behind');

        await writeFile(conflist, '{"cniVersion": "1.0.0", "name": "broken", "plugins": [');
        await notReadyBecause('10-missing.conflist', 'invalid JSON');
      } finally {
        await daemon.writeCniConfig('bridge');
      }
      assert.equal(
        (await conditions()).NetworkReady?.status,
        true,
        'a fixed config applies without a restart',
      );
    });

    test("rpcs once answered UNIMPLEMENTED are served: an unknown id is the caller's mistake", async () => {
      await rejectsWith(
        daemon.cri.call('CheckpointContainer', { container_id: 'x', location: '/tmp/x.tar' }),
        status.NOT_FOUND,
        'x',
      );
      await rejectsWith(
        daemon.cri.call('UpdatePodSandboxResources', { pod_sandbox_id: 'x' }),
        status.NOT_FOUND,
        'x',
      );
      await rejectsWith(daemon.cri.call('PortForward', { pod_sandbox_id: 'x' }), status.NOT_FOUND, 'x');
    });
  });
