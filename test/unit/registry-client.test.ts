/**
 * RegistryClient against fake registries and token servers on 127.0.0.1: auth flows, endpoint
 * order and failover, redirects, timeouts, TLS without verification.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { text } from 'node:stream/consumers';
import { after, afterEach, before, describe, it } from 'node:test';
import { run } from '../../src/exec.js';
import { parseReference } from '../../src/registry/reference.js';
import { MEDIA_TYPES, type Descriptor } from '../../src/registry/manifest.js';
import { basicHeader } from '../../src/registry/auth.js';
import { RegistryClient } from '../../src/registry/client.js';
import {
  RegistryAuthError,
  RegistryError,
  RegistryNotFoundError,
  RegistryUnavailableError,
} from '../../src/registry/errors.js';
import { parseRegistryHosts } from '../../src/registry/hosts.js';
import type { RegistryCredentials } from '../../src/registry/types.js';
import { freePort } from '../harness/registry.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

interface Seen {
  method: string;
  path: string;
  authorization: string | undefined;
  accept: string | undefined;
}

class FakeServer {
  readonly seen: Seen[] = [];
  handler: Handler = (_req, res) => res.writeHead(500).end();
  url = '';
  private server: http.Server | https.Server | null = null;

  static async start(tls?: { key: Buffer; cert: Buffer }): Promise<FakeServer> {
    const fake = new FakeServer();
    const listener: Handler = (req, res) => {
      fake.seen.push({
        method: req.method ?? '',
        path: req.url ?? '',
        authorization: req.headers.authorization,
        accept: req.headers.accept,
      });
      fake.handler(req, res);
    };
    const server = tls ? https.createServer(tls, listener) : http.createServer(listener);
    fake.server = server;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    fake.url = `${tls ? 'https' : 'http'}://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return fake;
  }

  get host(): string {
    return new URL(this.url).host;
  }

  close(): void {
    this.server?.closeAllConnections();
    this.server?.close();
  }
}

const sha256 = (b: Buffer | string): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

const MANIFEST = Buffer.from(
  JSON.stringify({
    schemaVersion: 2,
    mediaType: MEDIA_TYPES.ociManifest,
    config: { mediaType: MEDIA_TYPES.ociConfig, digest: sha256('{}'), size: 2 },
    layers: [],
  }),
);
const MANIFEST_DIGEST = sha256(MANIFEST);
const BLOB = Buffer.from('layer bytes '.repeat(1000));
const BLOB_DESC: Descriptor = {
  mediaType: MEDIA_TYPES.ociLayerGzip,
  digest: sha256(BLOB),
  size: BLOB.length,
};

interface RegistryBehaviour {
  /** Tokens the registry accepts (Bearer); anything else gets a challenge. */
  bearer?: { realm: string; accept: (token: string) => boolean };
  basic?: { username: string; password: string };
  manifests?: Record<string, { bytes: Buffer; type?: string }>;
  blobs?: Record<string, Buffer>;
  /** Where blob GETs are redirected to, if anywhere. */
  blobRedirect?: string;
}

/** A handler serving /v2/<repo>/manifests/<ref> and /v2/<repo>/blobs/<digest>. */
function registry(b: RegistryBehaviour): Handler {
  return (req, res) => {
    const auth = req.headers.authorization ?? '';
    if (b.bearer) {
      const token = auth.startsWith('Bearer ') ? auth.slice(7) : '';
      if (!b.bearer.accept(token)) {
        const m = /^\/v2\/(.+)\/(manifests|blobs)\//.exec(req.url ?? '');
        res.writeHead(401, {
          'www-authenticate': `Bearer realm="${b.bearer.realm}",service="fake",scope="repository:${m?.[1] ?? ''}:pull"`,
          'content-type': 'application/json',
        });
        res.end(JSON.stringify({ errors: [{ code: 'UNAUTHORIZED', message: 'authentication required' }] }));
        return;
      }
    }
    if (b.basic && auth !== basicHeader(b.basic.username, b.basic.password)) {
      res.writeHead(401, { 'www-authenticate': 'Basic realm="fake"' }).end();
      return;
    }
    const m = /^\/v2\/(.+)\/(manifests|blobs)\/([^/?]+)$/.exec(req.url ?? '');
    if (m?.[2] === 'manifests') {
      const found = b.manifests?.[`${m[1]}:${m[3]}`];
      if (!found) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ errors: [{ code: 'MANIFEST_UNKNOWN', message: 'manifest unknown' }] }));
        return;
      }
      res.writeHead(200, {
        'content-type': found.type ?? MEDIA_TYPES.ociManifest,
        'content-length': found.bytes.length,
      });
      res.end(found.bytes);
      return;
    }
    if (m?.[2] === 'blobs') {
      if (b.blobRedirect) {
        res.writeHead(307, { location: `${b.blobRedirect}/storage/${m[3]}?sig=1` }).end();
        return;
      }
      const blob = b.blobs?.[m[3] ?? ''];
      if (!blob) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'content-length': blob.length }).end(blob);
      return;
    }
    res.writeHead(404).end();
  };
}

/** A token server issuing t<N>; `users` (if any) are checked on Basic auth; anonymous gets `anon<N>`. */
function tokenServer(users: Record<string, string> = {}): { handler: Handler; issued: string[] } {
  const issued: string[] = [];
  const handler: Handler = (req, res) => {
    const auth = req.headers.authorization;
    if (auth !== undefined) {
      const [user, pass] = Buffer.from(auth.replace(/^Basic /, ''), 'base64')
        .toString()
        .split(':');
      if (user === undefined || users[user] !== pass) {
        res
          .writeHead(401, { 'content-type': 'application/json' })
          .end('{"details":"incorrect username or password"}');
        return;
      }
    }
    const token = `${auth === undefined ? 'anon' : 't'}${issued.length}`;
    issued.push(token);
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ token, expires_in: 300 }));
  };
  return { handler, issued };
}

const servers: FakeServer[] = [];
const clients: RegistryClient[] = [];
async function server(tls?: { key: Buffer; cert: Buffer }): Promise<FakeServer> {
  const s = await FakeServer.start(tls);
  servers.push(s);
  return s;
}
function client(toml = '', timeoutMs = 5000, idleTimeoutMs?: number): RegistryClient {
  const c = new RegistryClient({
    hosts: parseRegistryHosts(toml, 'test.toml'),
    timeoutMs,
    ...(idleTimeoutMs !== undefined ? { idleTimeoutMs } : {}),
  });
  clients.push(c);
  return c;
}
afterEach(() => {
  for (const c of clients.splice(0)) c.close();
  for (const s of servers.splice(0)) s.close();
});

async function fetchText(c: RegistryClient, ref: string, creds?: RegistryCredentials): Promise<string> {
  const blob = await c.fetchBlob(parseReference(ref), BLOB_DESC, creds);
  return text(blob.stream);
}

describe('RegistryClient: manifests and blobs', () => {
  it('fetches a manifest by tag with the right Accept header, and by digest', async () => {
    const reg = await server();
    reg.handler = registry({
      manifests: { 'a/b:v1': { bytes: MANIFEST }, [`a/b:${MANIFEST_DIGEST}`]: { bytes: MANIFEST } },
    });
    const c = client();
    const got = await c.fetchManifest(parseReference(`${reg.host}/a/b:v1`));
    assert.equal(got.digest, MANIFEST_DIGEST);
    assert.equal(got.mediaType, MEDIA_TYPES.ociManifest);
    assert.equal(got.endpoint, reg.url);
    assert.deepEqual(got.bytes, MANIFEST);
    for (const type of [
      MEDIA_TYPES.ociManifest,
      MEDIA_TYPES.ociIndex,
      MEDIA_TYPES.dockerManifest,
      MEDIA_TYPES.dockerManifestList,
    ]) {
      assert.ok(reg.seen[0]?.accept?.includes(type), type);
    }
    // tag + digest: the digest is what is fetched.
    const byDigest = await c.fetchManifest(parseReference(`${reg.host}/a/b:v1@${MANIFEST_DIGEST}`));
    assert.equal(byDigest.digest, MANIFEST_DIGEST);
    assert.equal(reg.seen[1]?.path, `/v2/a/b/manifests/${MANIFEST_DIGEST}`);
  });

  it('refuses malformed digests before they reach a URL', async () => {
    const ref = parseReference('127.0.0.1:1/a/b');
    const c = client();
    await assert.rejects(c.fetchManifestByDigest(ref, 'sha256:../../../x'), /invalid digest/);
    await assert.rejects(c.fetchBlob(ref, { ...BLOB_DESC, digest: 'md5:abc' }), /invalid digest/);
    await assert.rejects(c.fetchBlob(ref, { ...BLOB_DESC, size: -1 }), /not a byte count/);
  });

  it('rejects a manifest whose bytes do not match the requested digest', async () => {
    const reg = await server();
    const wrong = sha256('something else');
    reg.handler = registry({ manifests: { [`a/b:${wrong}`]: { bytes: MANIFEST } } });
    await assert.rejects(
      client().fetchManifestByDigest(parseReference(`${reg.host}/a/b`), wrong),
      (err: unknown) => {
        assert.ok(err instanceof RegistryError);
        assert.match(err.message, new RegExp(`digest is ${MANIFEST_DIGEST}`));
        return true;
      },
    );
  });

  it('takes the media type from the header when the JSON has none, and refuses schema 1', async () => {
    const reg = await server();
    const bare = Buffer.from(JSON.stringify({ schemaVersion: 2, manifests: [] }));
    const v1 = Buffer.from(JSON.stringify({ schemaVersion: 1, name: 'a/b', fsLayers: [] }));
    reg.handler = registry({
      manifests: {
        'a/b:list': { bytes: bare, type: `${MEDIA_TYPES.dockerManifestList}; charset=utf-8` },
        'a/b:plain': { bytes: bare, type: 'application/json' },
        'a/b:v1': { bytes: v1, type: 'application/vnd.docker.distribution.manifest.v1+prettyjws' },
      },
    });
    const c = client();
    assert.equal(
      (await c.fetchManifest(parseReference(`${reg.host}/a/b:list`))).mediaType,
      MEDIA_TYPES.dockerManifestList,
    );
    assert.equal(
      (await c.fetchManifest(parseReference(`${reg.host}/a/b:plain`))).mediaType,
      MEDIA_TYPES.ociIndex,
    );
    await assert.rejects(c.fetchManifest(parseReference(`${reg.host}/a/b:v1`)), /schema 1/);
  });

  it('refuses a manifest whose own media type is unsupported, whatever its shape and header', async () => {
    const reg = await server();
    const odd = Buffer.from(
      JSON.stringify({ ...(JSON.parse(MANIFEST.toString()) as object), mediaType: 'application/x-odd' }),
    );
    reg.handler = registry({ manifests: { 'a/b:odd': { bytes: odd, type: MEDIA_TYPES.ociManifest } } });
    await assert.rejects(
      client().fetchManifest(parseReference(`${reg.host}/a/b:odd`)),
      (err: unknown) =>
        err instanceof RegistryError &&
        /unsupported manifest media type "application\/x-odd"/.test(err.message),
    );
  });

  it('refuses an oversized manifest', async () => {
    const reg = await server();
    reg.handler = registry({ manifests: { 'a/b:big': { bytes: Buffer.alloc(5 * 1024 * 1024, 0x20) } } });
    await assert.rejects(client().fetchManifest(parseReference(`${reg.host}/a/b:big`)), {
      name: 'ManifestTooLargeError',
      message: /more than the 4194304/,
    });
  });

  it('an unknown tag at the origin is RegistryNotFoundError naming the reference', async () => {
    const reg = await server();
    reg.handler = registry({});
    await assert.rejects(client().fetchManifest(parseReference(`${reg.host}/a/b:nope`)), (err: unknown) => {
      assert.ok(err instanceof RegistryNotFoundError);
      assert.equal(err.reference, `${reg.host}/a/b:nope`);
      assert.match(err.message, /manifest unknown/);
      return true;
    });
    await assert.rejects(
      client().fetchBlob(parseReference(`${reg.host}/a/b`), BLOB_DESC),
      RegistryNotFoundError,
    );
  });

  it('streams a blob, following a redirect to storage without our Authorization', async () => {
    const storage = await server();
    storage.handler = (_req, res) => res.writeHead(200, { 'content-length': BLOB.length }).end(BLOB);
    const reg = await server();
    reg.handler = registry({ basic: { username: 'u', password: 'p' }, blobRedirect: storage.url });
    const c = client(`[registry."${reg.host}"]\nusername = "u"\npassword = "p"`);
    const blob = await c.fetchBlob(parseReference(`${reg.host}/a/b`), BLOB_DESC);
    assert.equal(blob.endpoint, reg.url);
    assert.equal(blob.size, BLOB.length);
    assert.equal(sha256(Buffer.from(await text(blob.stream))), BLOB_DESC.digest);
    assert.equal(storage.seen[0]?.path, `/storage/${BLOB_DESC.digest}?sig=1`);
    assert.equal(storage.seen[0]?.authorization, undefined);
  });

  it('refuses a blob whose Content-Length differs from the descriptor', async () => {
    const reg = await server();
    reg.handler = registry({ blobs: { [BLOB_DESC.digest]: Buffer.from('short') } });
    await assert.rejects(
      client().fetchBlob(parseReference(`${reg.host}/a/b`), BLOB_DESC),
      /sent 5 bytes, the descriptor says/,
    );
  });
});

describe('RegistryClient: auth', () => {
  it('anonymous Bearer: one token, reused up front for later requests', async () => {
    const tokens = tokenServer();
    const auth = await server();
    auth.handler = tokens.handler;
    const reg = await server();
    reg.handler = registry({
      bearer: { realm: `${auth.url}/token`, accept: (t) => tokens.issued.includes(t) },
      manifests: { 'a/b:v1': { bytes: MANIFEST }, 'c/d:v1': { bytes: MANIFEST } },
      blobs: { [BLOB_DESC.digest]: BLOB },
    });
    const c = client();
    await c.fetchManifest(parseReference(`${reg.host}/a/b:v1`));
    assert.equal(await fetchText(c, `${reg.host}/a/b`), BLOB.toString());
    assert.equal(tokens.issued.length, 1);
    // 401, retry with the token, then the blob with the token straight away.
    assert.deepEqual(
      reg.seen.map((s) => s.authorization),
      [undefined, 'Bearer anon0', 'Bearer anon0'],
    );
    const q = new URL(auth.seen[0]?.path ?? '', auth.url).searchParams;
    assert.equal(q.get('service'), 'fake');
    assert.equal(q.get('scope'), 'repository:a/b:pull');
    // Another repository on the same registry gets a token for its own scope, fetched up front.
    await c.fetchManifest(parseReference(`${reg.host}/c/d:v1`));
    assert.equal(tokens.issued.length, 2);
    assert.equal(
      new URL(auth.seen[1]?.path ?? '', auth.url).searchParams.get('scope'),
      'repository:c/d:pull',
    );
    assert.deepEqual(reg.seen[3]?.authorization, 'Bearer anon1');
  });

  it('request credentials win over the configured ones', async () => {
    const tokens = tokenServer({ right: 'pw' });
    const auth = await server();
    auth.handler = tokens.handler;
    const reg = await server();
    reg.handler = registry({
      bearer: { realm: `${auth.url}/token`, accept: (t) => t.startsWith('t') && tokens.issued.includes(t) },
      manifests: { 'a/b:v1': { bytes: MANIFEST } },
    });
    const c = client(`[registry."${reg.host}"]\nusername = "wrong"\npassword = "nope"`);
    await c.fetchManifest(parseReference(`${reg.host}/a/b:v1`), { username: 'right', password: 'pw' });
    assert.equal(auth.seen[0]?.authorization, basicHeader('right', 'pw'));
    // The configured credentials alone are refused by the token server.
    await assert.rejects(c.fetchManifest(parseReference(`${reg.host}/a/b:v1`)), (err: unknown) => {
      assert.ok(err instanceof RegistryAuthError);
      assert.equal(err.reason, 'unauthenticated');
      return true;
    });
    // Empty request credentials leave the configured ones in force.
    await assert.rejects(c.fetchManifest(parseReference(`${reg.host}/a/b:v1`), {}), RegistryAuthError);
    // Encoded as auth, same thing.
    await c.fetchManifest(parseReference(`${reg.host}/a/b:v1`), {
      auth: Buffer.from('right:pw').toString('base64'),
    });
  });

  it('anonymous pull of a private repository is a RegistryAuthError', async () => {
    const tokens = tokenServer();
    const auth = await server();
    auth.handler = tokens.handler;
    const reg = await server();
    reg.handler = registry({ bearer: { realm: `${auth.url}/token`, accept: (t) => t.startsWith('t') } });
    await assert.rejects(client().fetchManifest(parseReference(`${reg.host}/a/b:v1`)), (err: unknown) => {
      assert.ok(err instanceof RegistryAuthError);
      assert.equal(err.status, 401);
      assert.match(err.message, /anonymous pull refused with HTTP 401.*may not exist, or needs credentials/);
      return true;
    });
  });

  it('a registry token is sent as it is, without a token server', async () => {
    const reg = await server();
    reg.handler = registry({
      bearer: { realm: 'http://127.0.0.1:1/never', accept: (t) => t === 'given' },
      manifests: { 'a/b:v1': { bytes: MANIFEST } },
    });
    const c = client();
    await c.fetchManifest(parseReference(`${reg.host}/a/b:v1`), { registryToken: 'given' });
    assert.deepEqual(
      reg.seen.map((s) => s.authorization),
      ['Bearer given'],
    );
    await assert.rejects(
      c.fetchManifest(parseReference(`${reg.host}/a/b:v1`), { registryToken: 'bad' }),
      RegistryAuthError,
    );
  });

  it('Basic: works with credentials, refuses without, and 403 means denied', async () => {
    const reg = await server();
    reg.handler = registry({
      basic: { username: 'u', password: 'p' },
      manifests: { 'a/b:v1': { bytes: MANIFEST } },
    });
    const c = client();
    const ref = parseReference(`${reg.host}/a/b:v1`);
    await c.fetchManifest(ref, { username: 'u', password: 'p' });
    await assert.rejects(c.fetchManifest(ref), /requires credentials \(Basic auth\) and none were given/);
    await assert.rejects(c.fetchManifest(ref, { username: 'u', password: 'x' }), (err: unknown) => {
      assert.ok(err instanceof RegistryAuthError && err.reason === 'unauthenticated');
      return true;
    });
    reg.handler = (_req, res) => res.writeHead(403).end('{"errors":[{"code":"DENIED","message":"no"}]}');
    await assert.rejects(c.fetchManifest(ref, { username: 'u', password: 'p' }), (err: unknown) => {
      assert.ok(err instanceof RegistryAuthError);
      assert.equal(err.reason, 'denied');
      assert.match(err.message, /DENIED no/);
      return true;
    });
  });
});

describe('RegistryClient: endpoints', () => {
  async function setup(
    mirrorHandler: Handler,
  ): Promise<{ mirror: FakeServer; origin: FakeServer; c: RegistryClient }> {
    const mirror = await server();
    mirror.handler = mirrorHandler;
    const origin = await server();
    origin.handler = registry({
      manifests: { 'a/b:v1': { bytes: MANIFEST } },
      blobs: { [BLOB_DESC.digest]: BLOB },
    });
    const c = client(`[registry."${origin.host}"]\nmirrors = ["${mirror.url}"]\n`);
    return { mirror, origin, c };
  }

  it('serves from the mirror when it has the content, leaving the origin alone', async () => {
    const { mirror, origin, c } = await setup(registry({ manifests: { 'a/b:v1': { bytes: MANIFEST } } }));
    const got = await c.fetchManifest(parseReference(`${origin.host}/a/b:v1`));
    assert.equal(got.endpoint, mirror.url);
    assert.equal(origin.seen.length, 0);
  });

  for (const [name, handler] of [
    ['a 404', registry({})],
    ['a 500', (_req: IncomingMessage, res: ServerResponse) => res.writeHead(500).end()],
    ['a 400', (_req: IncomingMessage, res: ServerResponse) => res.writeHead(400).end()],
  ] as const) {
    it(`moves on to the origin after ${name} from the mirror`, async () => {
      const { mirror, origin, c } = await setup(handler);
      const got = await c.fetchManifest(parseReference(`${origin.host}/a/b:v1`));
      assert.equal(got.endpoint, origin.url);
      assert.equal(mirror.seen.length, 1);
      assert.equal(await fetchText(c, `${origin.host}/a/b`), BLOB.toString());
    });
  }

  it('moves on after a connection error', async () => {
    const origin = await server();
    origin.handler = registry({ manifests: { 'a/b:v1': { bytes: MANIFEST } } });
    const dead = await freePort();
    const c = client(`[registry."${origin.host}"]\nmirrors = ["http://127.0.0.1:${dead}"]\n`);
    assert.equal((await c.fetchManifest(parseReference(`${origin.host}/a/b:v1`))).endpoint, origin.url);
    // Alone, the connection error is a RegistryError saying what was fetched from where.
    await assert.rejects(
      client().fetchManifest(parseReference(`127.0.0.1:${dead}/a/b:v1`)),
      (err: unknown) => {
        assert.ok(err instanceof RegistryError);
        assert.match(
          err.message,
          new RegExp(`^127.0.0.1:${dead}/a/b:v1: http://127.0.0.1:${dead}: connect ECONNREFUSED`),
        );
        return true;
      },
    );
  });

  it('an auth failure at a mirror is final; request credentials are not sent to mirrors', async () => {
    const { mirror, origin, c } = await setup(registry({ basic: { username: 'u', password: 'p' } }));
    await assert.rejects(
      c.fetchManifest(parseReference(`${origin.host}/a/b:v1`), { username: 'u', password: 'p' }),
      RegistryAuthError,
    );
    assert.equal(mirror.seen[0]?.authorization, undefined);
    assert.equal(origin.seen.length, 0);
  });

  it('lists every endpoint when all fail', async () => {
    const { mirror, origin, c } = await setup((_req, res) => res.writeHead(502).end());
    origin.handler = (_req, res) => res.writeHead(503).end('down for maintenance');
    await assert.rejects(c.fetchManifest(parseReference(`${origin.host}/a/b:v1`)), (err: unknown) => {
      assert.ok(err instanceof RegistryUnavailableError);
      assert.deepEqual(
        err.failures.map((f) => f.endpoint),
        [mirror.url, origin.url],
      );
      assert.match(err.message, /HTTP 502.*HTTP 503: down for maintenance/);
      return true;
    });
  });

  it('a mirror 404 then an origin 404 is not found', async () => {
    const { origin, c } = await setup(registry({}));
    await assert.rejects(c.fetchManifest(parseReference(`${origin.host}/a/b:nope`)), RegistryNotFoundError);
  });

  it('preferEndpoint goes first', async () => {
    const { mirror, origin, c } = await setup(registry({ manifests: { 'a/b:v1': { bytes: MANIFEST } } }));
    const got = await c.fetchManifest(parseReference(`${origin.host}/a/b:v1`), undefined, {
      preferEndpoint: origin.url,
    });
    assert.equal(got.endpoint, origin.url);
    assert.equal(mirror.seen.length, 0);
  });

  it('sends docker.io pulls to a mirror under the same repository path', async () => {
    const mirror = await server();
    mirror.handler = registry({ manifests: { 'library/busybox:1': { bytes: MANIFEST } } });
    // The origin points at a closed loopback port: nothing may leave the machine.
    const c = client(
      `[registry."docker.io"]\nmirrors = ["${mirror.url}"]\nserver = "http://127.0.0.1:${await freePort()}"\n`,
    );
    const got = await c.fetchManifest(parseReference('busybox:1'));
    assert.equal(got.endpoint, mirror.url);
    assert.equal(mirror.seen[0]?.path, '/v2/library/busybox/manifests/1');
  });
});

describe('RegistryClient: deadlines', () => {
  it('gives up on a server that never answers', async () => {
    const reg = await server();
    reg.handler = () => {}; // never responds
    const started = Date.now();
    await assert.rejects(
      client('', 300).fetchManifest(parseReference(`${reg.host}/a/b:v1`)),
      /a\/b:v1: http:\/\/127.0.0.1:\d+: no response within 300 ms/,
    );
    // The server never answers: only the deadline ends the wait.
    assert.ok(Date.now() - started < 20_000);
  });

  it('a slow but moving blob is fine; a stalled one fails', async () => {
    const reg = await server();
    const chunks = 40;
    const chunk = Buffer.alloc(1000, 0x61);
    const whole = Buffer.concat(Array.from({ length: chunks }, () => chunk));
    let stall = false;
    reg.handler = (_req, res) => {
      res.writeHead(200, { 'content-length': whole.length });
      let sent = 0;
      const tick = setInterval(() => {
        if (stall && sent === 2) return; // stop sending, keep the connection open
        res.write(chunk);
        if (++sent === chunks) {
          clearInterval(tick);
          res.end();
        }
      }, 100);
      res.on('close', () => clearInterval(tick));
    };
    const desc: Descriptor = { mediaType: MEDIA_TYPES.ociLayer, digest: sha256(whole), size: whole.length };
    // 4 s in total, more than the 3 s deadline, but never a thirtieth of it without data: room for
    // a busy machine to run the sender late (1 s was exceeded once beside the emulated VM).
    const c = client('', 3_000);
    const blob = await c.fetchBlob(parseReference(`${reg.host}/a/b`), desc);
    assert.equal((await text(blob.stream)).length, whole.length);

    stall = true;
    const stalled = await c.fetchBlob(parseReference(`${reg.host}/a/b`), desc);
    await assert.rejects(text(stalled.stream), /stalled: no data for 3000 ms/);
  });

  it('an aborted signal stops the request', async () => {
    const reg = await server();
    reg.handler = () => {};
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    await assert.rejects(
      client('', 10_000).fetchManifest(parseReference(`${reg.host}/a/b:v1`), undefined, {
        signal: controller.signal,
      }),
      { name: 'AbortError' },
    );
  });
});

describe('RegistryClient: HTTPS', () => {
  let dir: string;
  let tls: { key: Buffer; cert: Buffer };
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'berth-tls-test-'));
    await run(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=127.0.0.1',
        '-addext',
        'subjectAltName=IP:127.0.0.1',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
      ],
      { timeoutMs: 30_000 },
    );
    tls = { key: await readFile(join(dir, 'key.pem')), cert: await readFile(join(dir, 'cert.pem')) };
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('skip_verify accepts a self-signed certificate, only where configured', async () => {
    const reg = await server(tls);
    reg.handler = registry({ manifests: { 'a/b:v1': { bytes: MANIFEST } } });
    const ref = parseReference(`${reg.host}/a/b:v1`);
    // Loopback means plain HTTP by default: say it is HTTPS.
    const verified = client(`[registry."${reg.host}"]\ninsecure = false\n`);
    await assert.rejects(verified.fetchManifest(ref), /self.signed certificate/);
    const unverified = client(`[registry."${reg.host}"]\ninsecure = false\nskip_verify = true\n`);
    const got = await unverified.fetchManifest(ref);
    assert.equal(got.endpoint, reg.url);
  });
});
