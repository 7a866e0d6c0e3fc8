import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import {
  basicHeader,
  parseWwwAuthenticate,
  pullScope,
  resolveCredentials,
  TokenSource,
  type Challenge,
} from '../../src/registry/auth.js';
import { RegistryAuthError, RegistryError } from '../../src/registry/errors.js';
import { HttpTransport } from '../../src/registry/http.js';

describe('parseWwwAuthenticate', () => {
  const table: [string, Challenge[]][] = [
    [
      'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull"',
      [
        {
          scheme: 'bearer',
          params: {
            realm: 'https://auth.docker.io/token',
            service: 'registry.docker.io',
            scope: 'repository:library/busybox:pull',
          },
        },
      ],
    ],
    ['Basic realm="berth-test"', [{ scheme: 'basic', params: { realm: 'berth-test' } }]],
    ['basic REALM=plain', [{ scheme: 'basic', params: { realm: 'plain' } }]],
    [
      'Bearer realm="https://r/t", error="insufficient_scope" , Basic realm="b"',
      [
        { scheme: 'bearer', params: { realm: 'https://r/t', error: 'insufficient_scope' } },
        { scheme: 'basic', params: { realm: 'b' } },
      ],
    ],
    [
      'Bearer realm="a \\"quoted\\" \\\\ realm"',
      [{ scheme: 'bearer', params: { realm: 'a "quoted" \\ realm' } }],
    ],
    [
      'Bearer realm="https://r/t",scope="repository:a:pull repository:b:pull"',
      [{ scheme: 'bearer', params: { realm: 'https://r/t', scope: 'repository:a:pull repository:b:pull' } }],
    ],
    [
      'Negotiate, Bearer realm="x"',
      [
        { scheme: 'negotiate', params: {} },
        { scheme: 'bearer', params: { realm: 'x' } },
      ],
    ],
    ['', []],
    // Garbage must not hang or throw.
    ['"unterminated', [{ scheme: 'unterminated', params: {} }]],
  ];
  for (const [header, expected] of table) {
    it(JSON.stringify(header), () => assert.deepEqual(parseWwwAuthenticate(header), expected));
  }
});

describe('resolveCredentials', () => {
  it('picks registry token, identity token, username/password, auth, in that order', () => {
    assert.equal(resolveCredentials(undefined), null);
    assert.equal(resolveCredentials({}), null);
    assert.deepEqual(
      resolveCredentials({ registryToken: 'rt', identityToken: 'it', username: 'u', password: 'p' }),
      {
        kind: 'bearer',
        token: 'rt',
      },
    );
    assert.deepEqual(resolveCredentials({ identityToken: 'it', username: 'u', password: 'p' }), {
      kind: 'refresh',
      refreshToken: 'it',
    });
    assert.deepEqual(
      resolveCredentials({ username: 'u', password: 'p', auth: Buffer.from('a:b').toString('base64') }),
      {
        kind: 'basic',
        username: 'u',
        password: 'p',
      },
    );
    assert.deepEqual(resolveCredentials({ auth: Buffer.from('user:pa:ss').toString('base64') }), {
      kind: 'basic',
      username: 'user',
      password: 'pa:ss',
    });
    assert.throws(() => resolveCredentials({ auth: 'bm9jb2xvbg==' }), RegistryAuthError);
  });

  it('basicHeader and pullScope', () => {
    assert.equal(basicHeader('u', 'p'), `Basic ${Buffer.from('u:p').toString('base64')}`);
    assert.equal(pullScope('library/busybox'), 'repository:library/busybox:pull');
  });
});

interface TokenCall {
  method: string;
  query: URLSearchParams;
  authorization: string | undefined;
  body: string;
}

describe('TokenSource against a local token server', () => {
  let server: http.Server;
  let realm: string;
  const calls: TokenCall[] = [];
  /** What the next answers look like; tests change it. */
  let respond: (call: TokenCall) => { status: number; body: unknown } = () => ({ status: 200, body: {} });
  let issued = 0;
  let clock = 1_000_000;
  const transport = new HttpTransport();

  before(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        const call: TokenCall = {
          method: req.method ?? '',
          query: new URL(req.url ?? '/', 'http://x').searchParams,
          authorization: req.headers.authorization,
          body,
        };
        calls.push(call);
        const { status, body: out } = respond(call);
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(out));
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    realm = `http://127.0.0.1:${(server.address() as AddressInfo).port}/token`;
  });
  after(() => {
    transport.close();
    server.closeAllConnections();
    server.close();
  });
  beforeEach(() => {
    calls.length = 0;
    respond = () => ({ status: 200, body: { token: `t${++issued}`, expires_in: 300 } });
  });

  const challenge = (scope?: string): Challenge => ({
    scheme: 'bearer',
    params: { realm, service: 'reg', ...(scope ? { scope } : {}) },
  });
  const source = (): TokenSource => new TokenSource(transport, () => clock);
  const request = (
    overrides: Partial<Parameters<TokenSource['token']>[0]> = {},
  ): Parameters<TokenSource['token']>[0] => ({
    challenge: challenge(),
    scope: pullScope('a/b'),
    credentials: null,
    useCache: true,
    skipVerify: false,
    timeoutMs: 5000,
    ...overrides,
  });

  it('fetches anonymously with service and scope, then serves from the cache', async () => {
    const tokens = source();
    const first = await tokens.token(request());
    const second = await tokens.token(request());
    assert.equal(first, second);
    assert.equal(calls.length, 1);
    assert.equal(calls[0]?.method, 'GET');
    assert.equal(calls[0]?.query.get('service'), 'reg');
    assert.equal(calls[0]?.query.get('scope'), 'repository:a/b:pull');
    assert.equal(calls[0]?.authorization, undefined);
  });

  it('parallel requests for one key share a token request', async () => {
    const tokens = source();
    const got = await Promise.all([
      tokens.token(request()),
      tokens.token(request()),
      tokens.token(request()),
    ]);
    assert.equal(new Set(got).size, 1);
    assert.equal(calls.length, 1);
  });

  it("prefers the challenge's scope to ours", async () => {
    await source().token(request({ challenge: challenge('repository:other:pull') }));
    assert.equal(calls[0]?.query.get('scope'), 'repository:other:pull');
  });

  it('keys the cache by scope and by credentials', async () => {
    const tokens = source();
    const anon = await tokens.token(request());
    const otherScope = await tokens.token(request({ scope: pullScope('c/d') }));
    const withUser = await tokens.token(
      request({ credentials: { kind: 'basic', username: 'u', password: 'p' } }),
    );
    const otherUser = await tokens.token(
      request({ credentials: { kind: 'basic', username: 'u', password: 'q' } }),
    );
    assert.equal(new Set([anon, otherScope, withUser, otherUser]).size, 4);
    assert.equal(calls.length, 4);
    assert.equal(calls[2]?.authorization, basicHeader('u', 'p'));
    // Each is cached under its own key.
    assert.equal(
      await tokens.token(request({ credentials: { kind: 'basic', username: 'u', password: 'p' } })),
      withUser,
    );
    assert.equal(calls.length, 4);
  });

  it('refetches shortly before expiry, and when told not to use the cache', async () => {
    const tokens = source();
    respond = () => ({ status: 200, body: { access_token: `a${++issued}`, expires_in: 60 } });
    const first = await tokens.token(request());
    assert.match(first, /^a\d+$/);
    clock += 54_000;
    assert.equal(await tokens.token(request()), first);
    clock += 2_000; // 56 s: inside the 5 s margin
    const second = await tokens.token(request());
    assert.notEqual(second, first);
    const third = await tokens.token(request({ useCache: false }));
    assert.notEqual(third, second);
    assert.equal(calls.length, 3);
  });

  it('uses 60 s when the server gives no expiry; forget drops a token', async () => {
    const tokens = source();
    respond = () => ({ status: 200, body: { token: `n${++issued}` } });
    const first = await tokens.token(request());
    clock += 50_000;
    assert.equal(await tokens.token(request()), first);
    tokens.forget(first);
    assert.notEqual(await tokens.token(request()), first);
  });

  it('a 401 from the token endpoint is a RegistryAuthError', async () => {
    respond = () => ({ status: 401, body: { details: 'incorrect username or password' } });
    await assert.rejects(
      source().token(request({ credentials: { kind: 'basic', username: 'u', password: 'bad' } })),
      (err: unknown) => {
        assert.ok(err instanceof RegistryAuthError);
        assert.equal(err.reason, 'unauthenticated');
        assert.match(err.message, /incorrect username or password/);
        return true;
      },
    );
  });

  it('a response without a token is an error', async () => {
    respond = () => ({ status: 200, body: { nothing: true } });
    await assert.rejects(
      source().token(request()),
      (err: unknown) => err instanceof RegistryError && /no token/.test(err.message),
    );
  });

  it('exchanges an identity token with an OAuth2 refresh-token POST', async () => {
    respond = (call) =>
      call.method === 'POST'
        ? { status: 200, body: { access_token: 'from-refresh', expires_in: 300 } }
        : { status: 500, body: {} };
    const token = await source().token(request({ credentials: { kind: 'refresh', refreshToken: 'rt' } }));
    assert.equal(token, 'from-refresh');
    const form = new URLSearchParams(calls[0]?.body);
    assert.equal(form.get('grant_type'), 'refresh_token');
    assert.equal(form.get('refresh_token'), 'rt');
    assert.equal(form.get('service'), 'reg');
    assert.equal(form.get('scope'), 'repository:a/b:pull');
  });

  it('falls back to GET with the identity token as password when POST is not supported', async () => {
    respond = (call) =>
      call.method === 'POST' ? { status: 404, body: {} } : { status: 200, body: { token: 'from-get' } };
    const token = await source().token(request({ credentials: { kind: 'refresh', refreshToken: 'rt' } }));
    assert.equal(token, 'from-get');
    assert.equal(calls[1]?.authorization, basicHeader('<token>', 'rt'));
  });
});
