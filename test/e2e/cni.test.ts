import assert from 'node:assert/strict';
import { randomBytes, randomInt } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, copyFile, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { run } from '../../src/exec.js';
import {
  Cni,
  CniError,
  loadDefaultNetwork,
  loopbackNetwork,
  podIps,
  type CniAttachment,
  type CniNetworkList,
  type CniResult,
} from '../../src/cni/index.js';
import { FIXTURES } from '../harness/daemon.js';
import { bridgePlugin, leasedIps, unusedPrefix, type TestNetwork } from '../harness/network.js';

/**
 * Real plugins (Debian containernetworking-plugins in /usr/lib/cni) against a throwaway netns,
 * bridge and host-local data dir. Sends no traffic; the port mapping is bound to 127.0.0.1.
 */

const HOST_PLUGINS = '/usr/lib/cni';
const fixtureDir = join(FIXTURES, 'cni');
const isRoot = process.getuid?.() === 0;
const skip = !isRoot
  ? 'needs root'
  : !existsSync(join(HOST_PLUGINS, 'bridge'))
    ? `no CNI plugins in ${HOST_PLUGINS}`
    : false;

const sh = (file: string, args: string[]): Promise<{ stdout: string }> =>
  run(file, args, { timeoutMs: 20_000 });

const suffix = randomBytes(3).toString('hex');
const bridge = `bcni${randomBytes(2).toString('hex')}`;
const netnsNames = [`berth-cnitest-${suffix}`, `berth-cnitest-${suffix}-f`];
let root = '';
let binDir = '';
let network: TestNetwork;
let cni: Cni;
/** DELs still owed if a test dies half way; after() runs them best-effort. */
const pendingDel: Array<{ net: CniNetworkList; at: CniAttachment }> = [];

function bridgeConflist(name: string, chained: Array<Record<string, unknown>>): Record<string, unknown> {
  const bridgeToSubnet = bridgePlugin(network, { routes: [{ dst: `${network.prefix}.0/24` }] });
  return { cniVersion: '1.0.0', name, plugins: [bridgeToSubnet, ...chained] };
}

function attachment(netns: string, hostPort?: number): CniAttachment {
  return {
    containerId: `berth-cnitest-${netns}`,
    netnsPath: `/var/run/netns/${netns}`,
    ifName: 'eth0',
    // IgnoreUnknown: host-local rejects CNI_ARGS keys it does not know otherwise (kubelet convention).
    args: [
      ['IgnoreUnknown', '1'],
      ['K8S_POD_NAMESPACE', 'default'],
      ['K8S_POD_NAME', netns],
    ],
    capabilityArgs:
      hostPort === undefined
        ? {}
        : { portMappings: [{ hostPort, containerPort: 80, protocol: 'tcp', hostIP: '127.0.0.1' }] },
  };
}

const loAttachment = (netns: string): CniAttachment => ({ ...attachment(netns), ifName: 'lo' });

async function natRules(): Promise<string> {
  return (await sh('iptables', ['-t', 'nat', '-S'])).stdout;
}

async function delNetns(name: string): Promise<void> {
  await sh('ip', ['netns', 'del', name]).catch(() => undefined);
}

describe('CNI with real plugins', { skip }, () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'berth-cni-e2e-'));
    binDir = join(root, 'bin');
    await mkdir(binDir);
    // Copied so the exec bit does not depend on how the repo was checked out.
    await copyFile(join(fixtureDir, 'berth-test-fail'), join(binDir, 'berth-test-fail'));
    await chmod(join(binDir, 'berth-test-fail'), 0o755);
    network = { bridge, prefix: await unusedPrefix(209), ipamDir: join(root, 'ipam') };
    for (const name of netnsNames) await sh('ip', ['netns', 'add', name]);
    cni = new Cni({ binDirs: [binDir, HOST_PLUGINS, '/opt/cni/bin'], timeoutMs: 30_000 });
  });

  after(async () => {
    for (const { net, at } of pendingDel.splice(0)) await cni.del(net, at).catch(() => undefined);
    for (const name of netnsNames) await delNetns(name);
    await sh('ip', ['link', 'del', bridge]).catch(() => undefined);
    if (root) await rm(root, { recursive: true, force: true });
  });

  test('loopback + bridge/portmap: ADD, DEL, DEL after the netns is gone', async () => {
    const netns = netnsNames[0] ?? '';
    const confDir = join(root, 'net.d');
    await mkdir(confDir);
    const name = `berth-cnitest-${suffix}`;
    await writeFile(
      join(confDir, '10-berth-test.conflist'),
      JSON.stringify(bridgeConflist(name, [{ type: 'portmap', capabilities: { portMappings: true } }])),
    );
    const loaded = await loadDefaultNetwork(confDir);
    assert.ok(loaded.network !== null, loaded.network === null ? loaded.reason : '');
    const net = loaded.network;

    const lo = loopbackNetwork();
    const loAt = loAttachment(netns);
    pendingDel.push({ net: lo, at: loAt });
    const loResult = await cni.add(lo, loAt);
    assert.equal(loResult.interfaces?.[0]?.name, 'lo');

    const hostPort = randomInt(20_000, 40_000);
    const at = attachment(netns, hostPort);
    pendingDel.push({ net, at });
    const result: CniResult = await cni.add(net, at);

    const { ip, additionalIps } = podIps(result, 'eth0');
    assert.ok(ip.startsWith(`${network.prefix}.`), `pod ip ${ip} not in ${network.prefix}.0/24`);
    assert.deepEqual(additionalIps, []);

    const links = JSON.parse((await sh('ip', ['-n', netns, '-j', 'addr'])).stdout) as Array<{
      ifname: string;
      operstate: string;
      addr_info: Array<{ family: string; local: string }>;
    }>;
    const eth0 = links.find((l) => l.ifname === 'eth0');
    assert.ok(eth0, 'eth0 missing in netns');
    assert.ok(eth0.addr_info.some((a) => a.family === 'inet' && a.local === ip));
    assert.ok(links.find((l) => l.ifname === 'lo')?.addr_info.some((a) => a.local === '127.0.0.1'));

    assert.deepEqual(await leasedIps(network, name), [ip]);
    // runtimeConfig.portMappings reached portmap: it installed a DNAT to the pod.
    assert.ok((await natRules()).includes(`${ip}:80`), 'portmap DNAT rule missing');

    await cni.del(net, at, result);
    assert.deepEqual(await leasedIps(network, name), []);
    assert.ok(!(await natRules()).includes(`${ip}:80`), 'portmap DNAT rule left behind');
    const after = JSON.parse((await sh('ip', ['-n', netns, '-j', 'link'])).stdout) as Array<{
      ifname: string;
    }>;
    assert.ok(!after.some((l) => l.ifname === 'eth0'), 'eth0 left in netns');
    await cni.del(lo, loAt, loResult);

    // DEL is idempotent and must succeed once the netns itself is gone (pod already torn down).
    await delNetns(netns);
    assert.ok(!existsSync(at.netnsPath));
    await cni.del(net, at, result);
    await cni.del(lo, loAt, loResult);
    pendingDel.length = 0;
  });

  test('a failing chained plugin surfaces its message; caller-side DEL releases the IP', async () => {
    const netns = netnsNames[1] ?? '';
    const name = `berth-cnitest-${suffix}-f`;
    const confDir = join(root, 'net-fail.d');
    await mkdir(confDir);
    await writeFile(
      join(confDir, '10-fail.conflist'),
      JSON.stringify(bridgeConflist(name, [{ type: 'berth-test-fail' }])),
    );
    const loaded = await loadDefaultNetwork(confDir);
    assert.ok(loaded.network !== null, loaded.network === null ? loaded.reason : '');
    const net = loaded.network;
    const at = attachment(netns);

    // Like the sandbox code: register the undo before ADD.
    pendingDel.push({ net, at });
    await assert.rejects(cni.add(net, at), (err: unknown) => {
      assert.ok(err instanceof CniError);
      assert.match(err.message, /refused by fixture/);
      assert.equal(err.plugin, 'berth-test-fail');
      assert.equal(err.network, name);
      assert.equal(err.code, 999);
      return true;
    });
    // bridge ran before the failure, so an IP is held until the caller DELs.
    assert.equal((await leasedIps(network, name)).length, 1);

    await cni.del(net, at);
    assert.deepEqual(await leasedIps(network, name), []);
    const links = JSON.parse((await sh('ip', ['-n', netns, '-j', 'link'])).stdout) as Array<{
      ifname: string;
    }>;
    assert.ok(!links.some((l) => l.ifname === 'eth0'), 'eth0 left in netns');
    pendingDel.length = 0;
  });
});
