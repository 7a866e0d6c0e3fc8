import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  loadDefaultNetwork,
  loadUsableNetwork,
  loopbackNetwork,
  parseNetworkConfig,
} from '../../src/cni/index.js';

let root: string;
let seq = 0;

before(async () => {
  root = await mkdtemp(join(tmpdir(), 'berth-cni-config-'));
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

/** A fresh conf dir holding exactly `files` (name -> content; objects are JSON-encoded). */
async function confDir(files: Record<string, unknown>): Promise<string> {
  const dir = join(root, `d${seq++}`);
  await mkdir(dir);
  for (const [name, content] of Object.entries(files)) {
    await writeFile(join(dir, name), typeof content === 'string' ? content : JSON.stringify(content));
  }
  return dir;
}

const list = (name: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  cniVersion: '1.0.0',
  name,
  plugins: [{ type: 'bridge', bridge: 'cni0', ipam: { type: 'host-local' } }, { type: 'portmap' }],
  ...extra,
});

function loadedName(r: Awaited<ReturnType<typeof loadDefaultNetwork>>): string {
  if (r.network === null) assert.fail(`expected a network, got reason: ${r.reason}`);
  return r.network.name;
}

function reasonOf(r: Awaited<ReturnType<typeof loadDefaultNetwork>>): string {
  if (r.network !== null) assert.fail(`expected no network, got ${r.network.name} from ${r.file}`);
  return r.reason;
}

describe('loadDefaultNetwork', () => {
  test('missing dir gives a reason naming it', async () => {
    const dir = join(root, 'nope');
    const reason = reasonOf(await loadDefaultNetwork(dir));
    assert.match(reason, /does not exist/);
    assert.ok(reason.includes(dir));
  });

  test('a file instead of a dir', async () => {
    const dir = await confDir({ 'f.conf': list('x') });
    assert.match(reasonOf(await loadDefaultNetwork(join(dir, 'f.conf'))), /not a directory/);
  });

  test('empty dir and dir with only other extensions', async () => {
    assert.match(reasonOf(await loadDefaultNetwork(await confDir({}))), /no CNI network config/);
    const dir = await confDir({ 'a.txt': list('a'), 'b.conf.bak': list('b'), conflist: list('c') });
    assert.match(reasonOf(await loadDefaultNetwork(dir)), /no CNI network config/);
  });

  test('first file in lexical (not numeric) order wins', async () => {
    const dir = await confDir({
      '5-five.conflist': list('five'),
      '10-ten.conflist': list('ten'),
      '20-twenty.conf': { cniVersion: '1.0.0', name: 'twenty', type: 'bridge' },
    });
    const r = await loadDefaultNetwork(dir);
    assert.equal(loadedName(r), 'ten');
    assert.ok(r.network !== null && r.file === join(dir, '10-ten.conflist'));
  });

  test('.json is accepted, as list or as single conf', async () => {
    assert.equal(loadedName(await loadDefaultNetwork(await confDir({ '1.json': list('jl') }))), 'jl');
    const single = { cniVersion: '0.4.0', name: 'js', type: 'ptp' };
    assert.equal(loadedName(await loadDefaultNetwork(await confDir({ '1.json': single }))), 'js');
  });

  test('a .conf is turned into a one-plugin list', async () => {
    const conf = {
      cniVersion: '0.3.1',
      name: 'single',
      type: 'bridge',
      bridge: 'br9',
      ipam: { type: 'host-local' },
    };
    const r = await loadDefaultNetwork(await confDir({ '10-single.conf': conf }));
    assert.ok(r.network !== null);
    assert.deepEqual(r.network, { cniVersion: '0.3.1', name: 'single', plugins: [conf] });
  });

  test('invalid files are skipped', async () => {
    const dir = await confDir({
      '00-broken.conflist': '{ not json',
      '01-noplugins.conflist': { cniVersion: '1.0.0', name: 'np', plugins: [] },
      '02-good.conflist': list('good', { disableCheck: true }),
    });
    const r = await loadDefaultNetwork(dir);
    assert.equal(loadedName(r), 'good');
    assert.equal(r.network?.disableCheck, true);
  });

  test('directories with a matching name are skipped', async () => {
    const dir = await confDir({ '10-ok.conflist': list('ok') });
    await mkdir(join(dir, '00-dir.conflist'));
    assert.equal(loadedName(await loadDefaultNetwork(dir)), 'ok');
  });

  test('when nothing loads, the reason names every file and why', async () => {
    const dir = await confDir({
      '00-broken.conflist': '{ not json',
      '10-old.conflist': list('old', { cniVersion: '0.2.0' }),
      '20-notype.conf': { cniVersion: '1.0.0', name: 'nt' },
    });
    const reason = reasonOf(await loadDefaultNetwork(dir));
    assert.match(reason, /00-broken\.conflist: invalid JSON/);
    assert.match(reason, /10-old\.conflist: unsupported cniVersion "0\.2\.0"/);
    assert.match(reason, /20-notype\.conf: config has no "type"/);
  });
});

describe('parseNetworkConfig validation', () => {
  const err = (content: unknown, file = 'x.conflist'): string => {
    const r = parseNetworkConfig(JSON.stringify(content), file);
    if (r.ok) assert.fail(`expected ${JSON.stringify(content)} to be rejected`);
    return r.error;
  };
  const ok = (content: unknown, file = 'x.conflist'): void => {
    const r = parseNetworkConfig(JSON.stringify(content), file);
    if (!r.ok) assert.fail(`expected ${JSON.stringify(content)} to load: ${r.error}`);
  };

  test('cniVersion range is 0.3.0 to 1.1.0 inclusive', () => {
    for (const v of ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']) ok(list('n', { cniVersion: v }));
    for (const v of ['0.1.0', '0.2.0', '1.1.1', '1.2.0', '2.0.0', '1.0', 'latest', '']) {
      assert.match(err(list('n', { cniVersion: v })), /unsupported cniVersion/);
    }
    assert.match(err(list('n', { cniVersion: 1 })), /unsupported cniVersion/);
    const noVersion = list('n');
    delete noVersion.cniVersion;
    assert.match(err(noVersion), /missing "cniVersion"/);
  });

  test('name is required and must be a valid network name', () => {
    const noName = list('n');
    delete noName.name;
    assert.match(err(noName), /missing "name"/);
    assert.match(err(list('-bad')), /invalid network name/);
    assert.match(err(list('a/b')), /invalid network name/);
    ok(list('k8s-pod_network.v1'));
  });

  test('plugins must be a non-empty array of objects with a type string', () => {
    assert.match(err({ cniVersion: '1.0.0', name: 'n' }), /needs a "plugins" array/);
    assert.match(err({ cniVersion: '1.0.0', name: 'n', plugins: {} }), /not an array/);
    assert.match(err({ cniVersion: '1.0.0', name: 'n', plugins: [] }), /empty/);
    assert.match(
      err({ cniVersion: '1.0.0', name: 'n', plugins: ['bridge'] }),
      /plugins\[0\] is not a JSON object/,
    );
    assert.match(
      err({ cniVersion: '1.0.0', name: 'n', plugins: [{ type: 'a' }, {}] }),
      /plugins\[1\] has no "type"/,
    );
    assert.match(err({ cniVersion: '1.0.0', name: 'n', plugins: [{ type: 7 }] }), /has no "type"/);
  });

  test('plugin types cannot be paths', () => {
    for (const type of ['../../bin/sh', '/bin/sh', '..', '.']) {
      assert.match(err({ cniVersion: '1.0.0', name: 'n', plugins: [{ type }] }), /invalid type/);
    }
  });

  test('capabilities must be booleans; disableCheck must be boolean', () => {
    const caps = (capabilities: unknown): unknown => ({
      cniVersion: '1.0.0',
      name: 'n',
      plugins: [{ type: 'portmap', capabilities }],
    });
    ok(caps({ portMappings: true }));
    assert.match(err(caps({ portMappings: 'yes' })), /capabilities/);
    assert.match(err(list('n', { disableCheck: 'true' })), /disableCheck/);
  });

  test('a non-object document is rejected', () => {
    assert.match(err([1, 2]), /not a JSON object/);
    assert.match(err(null, 'x.conf'), /not a JSON object/);
  });
});

test('loopbackNetwork', () => {
  assert.deepEqual(loopbackNetwork(), {
    cniVersion: '1.0.0',
    name: 'cni-loopback',
    plugins: [{ type: 'loopback' }],
  });
  // Callers may mutate what they get; each call must be a fresh object.
  assert.notEqual(loopbackNetwork(), loopbackNetwork());
});

describe('loadUsableNetwork: ready only when every plugin binary is found', () => {
  /** A bin dir holding an executable stub for each of `types`. */
  async function binDir(types: string[]): Promise<string> {
    const dir = join(root, `bin${seq++}`);
    await mkdir(dir);
    for (const type of types) await writeFile(join(dir, type), '#!/bin/sh\n', { mode: 0o755 });
    return dir;
  }

  test('all plugins present, across several bin dirs', async () => {
    const conf = await confDir({ '10-net.conflist': list('pods') });
    const dirs = [await binDir(['loopback', 'bridge']), await binDir(['host-local', 'portmap'])];
    assert.equal(loadedName(await loadUsableNetwork(conf, dirs)), 'pods');
  });

  test('a missing main, IPAM or loopback plugin names the file, the plugin and the dirs', async () => {
    const conf = await confDir({ '10-net.conflist': list('pods') });
    const dir = await binDir(['bridge']);
    const reason = reasonOf(await loadUsableNetwork(conf, [dir]));
    assert.match(reason, /10-net\.conflist/);
    assert.match(reason, /"loopback", "host-local", "portmap"/);
    assert.ok(reason.includes(dir), reason);
  });

  test('a non-executable file does not count', async () => {
    const conf = await confDir({ '10-net.conflist': list('pods') });
    const dir = await binDir(['loopback', 'bridge', 'host-local']);
    await writeFile(join(dir, 'portmap'), 'not a program', { mode: 0o644 });
    assert.match(reasonOf(await loadUsableNetwork(conf, [dir])), /"portmap"/);
  });

  test('no bin dirs at all says so', async () => {
    const conf = await confDir({ '10-net.conflist': list('pods') });
    assert.match(reasonOf(await loadUsableNetwork(conf, [])), /no bin dirs configured/);
  });

  test('a conflist that does not parse stays the reason', async () => {
    const conf = await confDir({ '10-net.conflist': '{"cniVersion": "1.0.0", "name": ' });
    assert.match(reasonOf(await loadUsableNetwork(conf, [])), /10-net\.conflist: invalid JSON/);
  });
});
