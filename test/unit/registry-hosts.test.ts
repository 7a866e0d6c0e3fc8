import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { ConfigError } from '../../src/config/error.js';
import {
  defaultRegistryHosts,
  endpointsFor,
  isLoopbackHost,
  loadRegistryHosts,
  parseRegistryHosts,
} from '../../src/registry/hosts.js';

const dir = mkdtempSync(join(tmpdir(), 'berth-hosts-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const urls = (text: string, registry: string): string[] =>
  endpointsFor(parseRegistryHosts(text, 'r.toml'), registry).map((e) => `${e.role} ${e.url}`);

function fails(text: string, fragments: string[]): void {
  assert.throws(
    () => parseRegistryHosts(text, '/etc/berth/registries.toml'),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError, String(err));
      for (const f of [...fragments, '/etc/berth/registries.toml']) {
        assert.ok(err.message.includes(f), `"${err.message}" lacks "${f}"`);
      }
      return true;
    },
  );
}

describe('endpointsFor with defaults', () => {
  const hosts = defaultRegistryHosts();
  const table: [string, string][] = [
    ['docker.io', 'https://registry-1.docker.io'],
    ['index.docker.io', 'https://registry-1.docker.io'],
    ['registry.k8s.io', 'https://registry.k8s.io'],
    ['gcr.io', 'https://gcr.io'],
    // The scheme's own port is dropped, as URLs do.
    ['quay.io:443', 'https://quay.io'],
    ['localhost:5000', 'http://localhost:5000'],
    ['localhost', 'http://localhost'],
    ['127.0.0.1:5000', 'http://127.0.0.1:5000'],
    ['127.1.2.3:80', 'http://127.1.2.3'],
    ['[::1]:5000', 'http://[::1]:5000'],
    ['10.0.0.1:5000', 'https://10.0.0.1:5000'],
  ];
  for (const [registry, url] of table) {
    it(`${registry} → ${url}`, () => {
      assert.deepEqual(endpointsFor(hosts, registry), [
        { url, role: 'origin', skipVerify: false, credentials: null },
      ]);
    });
  }

  it('loopback detection', () => {
    for (const h of ['localhost', '127.0.0.1', '127.9.9.9', '::1', '[::1]', 'LOCALHOST'])
      assert.ok(isLoopbackHost(h), h);
    for (const h of ['localhost.example', '128.0.0.1', '::2', '10.0.0.1']) assert.ok(!isLoopbackHost(h), h);
  });
});

describe('registries file', () => {
  it('mirrors come first, in order, then the origin', () => {
    const text = `
      [registry."docker.io"]
      mirrors = [{ url = "http://127.0.0.1:5000" }, { url = "mirror.example:5000" }, "https://m2.example/v2"]
    `;
    assert.deepEqual(urls(text, 'docker.io'), [
      'mirror http://127.0.0.1:5000',
      'mirror https://mirror.example:5000',
      'mirror https://m2.example',
      'origin https://registry-1.docker.io',
    ]);
    assert.deepEqual(urls(text, 'index.docker.io'), urls(text, 'docker.io'));
    // Other registries are untouched.
    assert.deepEqual(urls(text, 'gcr.io'), ['origin https://gcr.io']);
  });

  it('one mirror for registry.k8s.io, gcr.io and docker.io', () => {
    const text = ['registry.k8s.io', 'gcr.io', 'docker.io']
      .map((r) => `[registry."${r}"]\nmirrors = [{ url = "http://127.0.0.1:5000" }]\n`)
      .join('');
    for (const r of ['registry.k8s.io', 'gcr.io', 'docker.io']) {
      assert.equal(urls(text, r)[0], 'mirror http://127.0.0.1:5000');
    }
  });

  it('the "*" section applies to registries without their own', () => {
    const text = `
      [registry."*"]
      mirrors = [{ url = "http://127.0.0.1:5000" }]
      [registry."quay.io"]
      skip_verify = true
    `;
    assert.deepEqual(urls(text, 'registry.k8s.io'), [
      'mirror http://127.0.0.1:5000',
      'origin https://registry.k8s.io',
    ]);
    assert.deepEqual(urls(text, 'docker.io'), [
      'mirror http://127.0.0.1:5000',
      'origin https://registry-1.docker.io',
    ]);
    assert.deepEqual(urls(text, 'quay.io'), ['origin https://quay.io']);
  });

  it('insecure, skip_verify and credentials, per origin and per mirror', () => {
    const hosts = parseRegistryHosts(
      `
      [registry."reg.example:5000"]
      insecure = true
      username = "u"
      password = "p"
      mirrors = [{ url = "m.example", skip_verify = true, auth = "${Buffer.from('mu:mp').toString('base64')}" }]

      [registry."tls.example"]
      skip_verify = true
      identity_token = "refresh"

      [registry."127.0.0.1:5000"]
      insecure = false
      `,
      'r.toml',
    );
    assert.deepEqual(endpointsFor(hosts, 'reg.example:5000'), [
      {
        url: 'https://m.example',
        role: 'mirror',
        skipVerify: true,
        credentials: { auth: Buffer.from('mu:mp').toString('base64') },
      },
      {
        url: 'http://reg.example:5000',
        role: 'origin',
        skipVerify: false,
        credentials: { username: 'u', password: 'p' },
      },
    ]);
    assert.deepEqual(endpointsFor(hosts, 'tls.example'), [
      {
        url: 'https://tls.example',
        role: 'origin',
        skipVerify: true,
        credentials: { identityToken: 'refresh' },
      },
    ]);
    // Loopback is plain HTTP only by default.
    assert.deepEqual(urls('[registry."127.0.0.1:5000"]\ninsecure = false', '127.0.0.1:5000'), [
      'origin https://127.0.0.1:5000',
    ]);
    assert.deepEqual(endpointsFor(hosts, 'REG.example:5000')[1]?.url, 'http://reg.example:5000');
  });

  it('server replaces the origin URL', () => {
    assert.deepEqual(urls('[registry."docker.io"]\nserver = "http://127.0.0.1:1"', 'docker.io'), [
      'origin http://127.0.0.1:1',
    ]);
  });

  it('a mirror equal to the origin is tried once', () => {
    assert.deepEqual(
      urls('[registry."127.0.0.1:5000"]\nmirrors = ["http://127.0.0.1:5000"]', '127.0.0.1:5000'),
      ['mirror http://127.0.0.1:5000'],
    );
  });

  it('mirrors_only leaves the origin out, per registry or through "*"', () => {
    const text = [
      '[registry."*"]',
      'mirrors = ["http://127.0.0.1:5000"]',
      'mirrors_only = true',
      '[registry."docker.io"]',
      'mirrors = ["https://hub-mirror.internal"]',
      '[registry."quay.io"]',
      'mirrors = ["https://quay-mirror.internal"]',
      'mirrors_only = false',
      '[registry."ghcr.io"]',
    ].join('\n');
    assert.deepEqual(urls(text, 'registry.k8s.io'), ['mirror http://127.0.0.1:5000']);
    // A section of its own that does not set it inherits it from "*".
    assert.deepEqual(urls(text, 'docker.io'), ['mirror https://hub-mirror.internal']);
    assert.deepEqual(urls(text, 'index.docker.io'), ['mirror https://hub-mirror.internal']);
    // One that does overrides "*".
    assert.deepEqual(urls(text, 'quay.io'), [
      'mirror https://quay-mirror.internal',
      'origin https://quay.io',
    ]);
    // No mirrors and no origin: nothing is contacted at all.
    assert.deepEqual(urls(text, 'ghcr.io'), []);

    const perRegistry = '[registry."docker.io"]\nmirrors = ["http://127.0.0.1:5000"]\nmirrors_only = true\n';
    assert.deepEqual(urls(perRegistry, 'docker.io'), ['mirror http://127.0.0.1:5000']);
    assert.deepEqual(urls(perRegistry, 'quay.io'), ['origin https://quay.io']);
  });

  it('an empty file is the defaults', () => {
    const hosts = parseRegistryHosts('', 'r.toml');
    assert.equal(hosts.registries.size, 0);
    assert.equal(hosts.wildcard, null);
  });

  it('rejects bad keys and values, naming file and key', () => {
    fails('[registry."docker.io"]\nmirrors_only = "yes"\n', [
      'registry."docker.io".mirrors_only',
      'true or false',
    ]);
    fails('[registry."docker.io"]\nserver = "https://r.internal"\nmirrors_only = true\n', [
      'registry."docker.io".mirrors_only',
      'server',
    ]);
    fails('mirrors = []', ['mirrors', 'unknown key']);
    fails('[registry."docker.io"]\nmirror = []', ['registry."docker.io".mirror', 'unknown key']);
    fails('[registry."docker.io"]\ninsecure = "yes"', ['registry."docker.io".insecure', 'true or false']);
    fails('[registry."docker.io"]\nmirrors = "http://x"', ['registry."docker.io".mirrors', 'array']);
    fails('[registry."docker.io"]\nmirrors = [{ insecure = true }]', [
      'registry."docker.io".mirrors[0].url',
      'missing',
    ]);
    fails('[registry."docker.io"]\nmirrors = [{ url = "ftp://x" }]', ['mirrors[0].url', 'scheme']);
    fails('[registry."docker.io"]\nmirrors = [{ url = "http://x", user = "u" }]', [
      'mirrors[0].user',
      'unknown key',
    ]);
    fails('[registry."docker.io"]\nmirrors = [{ url = "https://x", insecure = true }]', [
      'mirrors[0].url',
      'insecure',
    ]);
    fails('[registry."docker.io"]\nmirrors = [{ url = "http://u:p@x" }]', ['mirrors[0].url', 'credentials']);
    fails('[registry."x.io"]\nusername = "u"', ['registry."x.io".password', 'missing']);
    fails('[registry."x.io"]\npassword = "p"', ['registry."x.io".username', 'missing']);
    fails('[registry."x.io"]\nauth = "bm9jb2xvbg=="', ['registry."x.io".auth', 'username:password']);
    fails('[registry."x.io"]\nauth = "dTpw"\nusername = "u"\npassword = "p"', [
      'registry."x.io".auth',
      'not both',
    ]);
    fails('[registry."http://x.io"]', ['registry."http://x.io"', 'registry host']);
    fails('[registry."x.io"]\n[registry."X.io"]', ['duplicate']);
    fails('[registry."docker.io"]\n[registry."index.docker.io"]', ['duplicate']);
    fails('[registry]\n"x.io" = 1', ['registry."x.io"', 'table']);
    fails('[registry."x.io"\n', ['invalid TOML', 'line']);
    fails('[registry."*"]\nserver = "http://127.0.0.1:5000"', ['registry."*".server', 'not allowed']);
  });
});

describe('loadRegistryHosts', () => {
  it('a missing file means defaults', async () => {
    const hosts = await loadRegistryHosts(join(dir, 'absent.toml'));
    assert.equal(hosts.source, null);
    assert.equal(hosts.registries.size, 0);
  });

  it('reads a file and names it in errors', async () => {
    const good = join(dir, 'good.toml');
    writeFileSync(good, '[registry."docker.io"]\nmirrors = [{ url = "http://127.0.0.1:5000" }]\n', {
      mode: 0o600,
    });
    const hosts = await loadRegistryHosts(good);
    assert.equal(hosts.source, good);
    assert.equal(endpointsFor(hosts, 'docker.io')[0]?.url, 'http://127.0.0.1:5000');

    const bad = join(dir, 'bad.toml');
    writeFileSync(bad, '[registry."docker.io"]\nmirors = []\n', { mode: 0o600 });
    await assert.rejects(loadRegistryHosts(bad), (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.ok(err.message.includes(bad) && err.message.includes('mirors'), err.message);
      return true;
    });
  });

  it('refuses a world-writable file (as root)', { skip: process.geteuid?.() !== 0 }, async () => {
    const path = join(dir, 'open.toml');
    writeFileSync(path, '');
    chmodSync(path, 0o666);
    await assert.rejects(loadRegistryHosts(path), /writable by every user/);
  });

  it('refuses a directory', async () => {
    await assert.rejects(loadRegistryHosts(dir), /not a regular file/);
  });
});
