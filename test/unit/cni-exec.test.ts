import assert from 'node:assert/strict';
import { chmod, copyFile, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, beforeEach, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Cni, CniError, type CniAttachment, type CniNetworkList } from '../../src/cni/index.js';

/**
 * Exercises the exec protocol with shell-script plugins that record their stdin and environment,
 * so no root, netns or real plugin is needed.
 */

const fixtureDir = join(dirname(fileURLToPath(import.meta.url)), '../../../test/fixtures/cni');

// Records stdin/env as <seq>-<plugin>-<command>.{stdin,env} next to the bin dir, then answers.
const RECORDER = `#!/bin/sh
rec="$(dirname "$0")/../rec"
n=$(ls "$rec" | wc -l)
n=$((n / 2 + 100))
me=$(basename "$0")
cat >"$rec/$n-$me-$CNI_COMMAND.stdin"
env >"$rec/$n-$me-$CNI_COMMAND.env"
case "$me:$CNI_COMMAND" in
*-deny:DEL)
  echo '{"cniVersion":"1.0.0","code":11,"msg":"del broke","details":"on purpose"}'
  exit 1 ;;
# exec: run()'s timeout kills only its direct child; a forked sleep would keep the pipes open.
*-slow:*) exec sleep 60 ;;
esac
if [ "$CNI_COMMAND" = ADD ]; then
  printf '{"cniVersion":"1.0.0","interfaces":[{"name":"%s","sandbox":"%s"}],"ips":[{"address":"10.0.0.%s/24","interface":0}],"from":"%s"}\\n' "$CNI_IFNAME" "$CNI_NETNS" "$n" "$me"
fi
`;

let root: string;
let bin: string;
let rec: string;

before(async () => {
  root = await mkdtemp(join(tmpdir(), 'berth-cni-exec-'));
  bin = join(root, 'bin');
  rec = join(root, 'rec');
  await mkdir(bin);
  for (const name of ['fake-a', 'fake-b', 'fake-deny', 'fake-slow']) {
    await writeFile(join(bin, name), RECORDER);
    await chmod(join(bin, name), 0o755);
  }
  await copyFile(join(fixtureDir, 'berth-test-fail'), join(bin, 'berth-test-fail'));
  await chmod(join(bin, 'berth-test-fail'), 0o755);
  await writeFile(join(bin, 'not-executable'), RECORDER);
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});
beforeEach(async () => {
  await rm(rec, { recursive: true, force: true });
  await mkdir(rec);
});

interface Call {
  plugin: string;
  command: string;
  stdin: Record<string, unknown>;
  env: Map<string, string>;
}

async function calls(): Promise<Call[]> {
  const names = (await readdir(rec)).filter((n) => n.endsWith('.stdin')).sort();
  return Promise.all(
    names.map(async (n) => {
      const [, plugin, command] = /^\d+-(.+)-([A-Z]+)\.stdin$/.exec(n) ?? [];
      const stdin = JSON.parse(await readFile(join(rec, n), 'utf8')) as Record<string, unknown>;
      const envText = await readFile(join(rec, n.replace(/\.stdin$/, '.env')), 'utf8');
      const env = new Map(
        envText
          .split('\n')
          .filter((l) => l.includes('='))
          .map((l): [string, string] => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
      );
      return { plugin: plugin ?? '', command: command ?? '', stdin, env };
    }),
  );
}

const net = (types: string[], cniVersion = '1.0.0'): CniNetworkList => ({
  cniVersion,
  name: 'testnet',
  plugins: types.map((type) => ({ type, cniVersion: '0.3.0', name: 'ignored' })),
});

const at: CniAttachment = {
  containerId: 'abc123',
  netnsPath: '/var/run/netns/does-not-matter',
  ifName: 'eth0',
  args: [
    ['IgnoreUnknown', '1'],
    ['K8S_POD_NAMESPACE', 'default'],
    ['K8S_POD_NAME', 'web-0'],
  ],
  capabilityArgs: {
    portMappings: [{ hostPort: 8080, containerPort: 80, protocol: 'tcp' }],
    dns: { servers: ['10.96.0.10'] },
  },
};

describe('Cni.add', () => {
  test('runs the chain in order with the CNI env, list name/version and prevResult', async () => {
    process.env.BERTH_CNI_LEAK_CHECK = 'leak';
    const cni = new Cni({ binDirs: ['/nonexistent-dir', bin], timeoutMs: 10_000 });
    const result = await cni.add(net(['fake-a', 'fake-b']), at);
    delete process.env.BERTH_CNI_LEAK_CHECK;

    const [a, b, ...rest] = await calls();
    assert.equal(rest.length, 0);
    assert.ok(a && b);
    assert.deepEqual([a.plugin, a.command, b.plugin, b.command], ['fake-a', 'ADD', 'fake-b', 'ADD']);
    for (const c of [a, b]) {
      assert.equal(c.stdin.name, 'testnet');
      assert.equal(c.stdin.cniVersion, '1.0.0');
      assert.equal(c.env.get('CNI_COMMAND'), 'ADD');
      assert.equal(c.env.get('CNI_CONTAINERID'), 'abc123');
      assert.equal(c.env.get('CNI_NETNS'), at.netnsPath);
      assert.equal(c.env.get('CNI_IFNAME'), 'eth0');
      assert.equal(c.env.get('CNI_ARGS'), 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0');
      assert.equal(c.env.get('CNI_PATH'), `/nonexistent-dir:${bin}`);
      assert.equal(c.env.get('PATH'), '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
      assert.equal(c.env.has('BERTH_CNI_LEAK_CHECK'), false, 'daemon env must not leak into plugins');
      assert.equal(c.env.has('HOME'), false);
    }
    assert.equal('prevResult' in a.stdin, false);
    assert.equal((b.stdin.prevResult as Record<string, unknown>).from, 'fake-a');
    // The chain's result is the last plugin's, passed through untouched.
    assert.equal((result as unknown as Record<string, unknown>).from, 'fake-b');
    assert.equal(result.interfaces?.[0]?.sandbox, at.netnsPath);
  });

  test('runtimeConfig carries only the capabilities a plugin declares', async () => {
    const cni = new Cni({ binDirs: [bin], timeoutMs: 10_000 });
    const n: CniNetworkList = {
      cniVersion: '1.0.0',
      name: 'caps',
      plugins: [
        { type: 'fake-a' },
        { type: 'fake-b', capabilities: { portMappings: true, dns: false, bandwidth: true } },
      ],
    };
    await cni.add(n, at);
    const [a, b] = await calls();
    assert.equal('runtimeConfig' in (a?.stdin ?? {}), false);
    assert.deepEqual(b?.stdin.runtimeConfig, { portMappings: at.capabilityArgs.portMappings });
    assert.deepEqual(b?.stdin.capabilities, { portMappings: true, dns: false, bandwidth: true });
  });

  test('a plugin error becomes a CniError with plugin, network, code and message', async () => {
    const cni = new Cni({ binDirs: [bin], timeoutMs: 10_000 });
    const err = await cni.add(net(['fake-a', 'berth-test-fail', 'fake-b']), at).then(
      () => assert.fail('add should fail'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof CniError);
    assert.equal(err.plugin, 'berth-test-fail');
    assert.equal(err.network, 'testnet');
    assert.equal(err.code, 999);
    assert.equal(err.command, 'ADD');
    assert.match(err.message, /refused by fixture/);
    assert.match(err.message, /berth-test-fail/);
    assert.match(err.message, /testnet/);
    // Stops at the failure: fake-b never ran, and add() did not run DEL itself.
    assert.deepEqual(
      (await calls()).map((c) => c.plugin),
      ['fake-a'],
    );
  });

  test('a missing plugin names the plugin and the dirs searched', async () => {
    const cni = new Cni({ binDirs: [bin, '/nonexistent-dir'], timeoutMs: 10_000 });
    for (const type of ['no-such-plugin', 'not-executable']) {
      await assert.rejects(cni.add(net([type]), at), (e: unknown) => {
        assert.ok(e instanceof CniError);
        assert.ok(e.message.includes(`"${type}" not found in ${bin}, /nonexistent-dir`), e.message);
        return true;
      });
    }
  });

  test('a hung plugin is killed at the timeout', async () => {
    const cni = new Cni({ binDirs: [bin], timeoutMs: 300 });
    const started = Date.now();
    await assert.rejects(cni.add(net(['fake-slow']), at), /fake-slow.*timed out after 300 ms/);
    // Killed at the timeout, not left to sleep its minute.
    assert.ok(Date.now() - started < 20_000);
  });

  test('CNI_ARGS that cannot be encoded are refused before any exec', async () => {
    const cni = new Cni({ binDirs: [bin], timeoutMs: 10_000 });
    await assert.rejects(cni.add(net(['fake-a']), { ...at, args: [['A', 'x;B=y']] }), /cannot be encoded/);
    assert.equal((await calls()).length, 0);
  });
});

describe('Cni.del', () => {
  const prev = { cniVersion: '1.0.0', ips: [{ address: '10.0.0.9/24' }] };

  test('runs in reverse order with the same conf and prevResult (>= 0.4.0)', async () => {
    const cni = new Cni({ binDirs: [bin], timeoutMs: 10_000 });
    await cni.del(net(['fake-a', 'fake-b']), at, prev);
    const cs = await calls();
    assert.deepEqual(
      cs.map((c) => `${c.plugin}:${c.command}`),
      ['fake-b:DEL', 'fake-a:DEL'],
    );
    for (const c of cs) {
      assert.deepEqual(c.stdin.prevResult, prev);
      assert.equal(c.env.get('CNI_COMMAND'), 'DEL');
      assert.equal(c.stdin.cniVersion, '1.0.0');
    }
  });

  test('omits prevResult for 0.3.x lists', async () => {
    const cni = new Cni({ binDirs: [bin], timeoutMs: 10_000 });
    await cni.del(net(['fake-a'], '0.3.1'), at, { ...prev, cniVersion: '0.3.1' });
    const [c] = await calls();
    assert.equal('prevResult' in (c?.stdin ?? {}), false);
    assert.equal(c?.stdin.cniVersion, '0.3.1');
  });

  test('stops at the first failure so earlier plugins (IPAM) keep their state for the retry', async () => {
    const cni = new Cni({ binDirs: [bin], timeoutMs: 10_000 });
    const err = await cni.del(net(['fake-a', 'fake-deny', 'fake-b']), at).then(
      () => assert.fail('del should fail'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof CniError);
    assert.equal(err.plugin, 'fake-deny');
    assert.equal(err.code, 11);
    assert.match(err.message, /del broke: on purpose/);
    assert.deepEqual(
      (await calls()).map((c) => c.plugin),
      ['fake-b', 'fake-deny'],
    );
  });
});
