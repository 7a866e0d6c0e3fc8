/** The registry's HTTP transport on redirects, against two servers on 127.0.0.1 (two origins). */
import assert from 'node:assert/strict';
import http, { type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { drain, HttpTransport } from '../../src/registry/http.js';

interface Recorder {
  url: string;
  seen: IncomingHttpHeaders[];
  server: http.Server;
}

async function recorder(answer: (res: ServerResponse) => void): Promise<Recorder> {
  const seen: IncomingHttpHeaders[] = [];
  const server = http.createServer((req, res) => {
    seen.push(req.headers);
    answer(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, server };
}

const CREDENTIALS = {
  authorization: 'Bearer secret',
  'Proxy-Authorization': 'Basic cHJveHk6c2VjcmV0',
  cookie: 'session=secret',
};

describe('HttpTransport redirects', () => {
  let storage: Recorder;
  let registry: Recorder;
  const transport = new HttpTransport();

  before(async () => {
    storage = await recorder((res) => res.writeHead(200, { 'content-length': 2 }).end('ok'));
    registry = await recorder((res) => {
      const location = res.req.url === '/same' ? '/landed' : `${storage.url}/blob`;
      res.writeHead(res.req.url === '/landed' ? 200 : 307, { location }).end();
    });
  });

  after(() => {
    transport.close();
    for (const { server } of [storage, registry]) {
      server.closeAllConnections();
      server.close();
    }
  });

  it('drops authorization, proxy-authorization and cookie when the redirect leaves the origin', async () => {
    const res = await transport.request({
      url: `${registry.url}/v2/a/blobs/x`,
      headers: { ...CREDENTIALS, accept: '*/*' },
      timeoutMs: 30_000,
      idleTimeoutMs: 30_000,
      maxRedirects: 3,
    });
    drain(res.body);
    assert.equal(res.url, `${storage.url}/blob`);
    assert.equal(registry.seen[0]?.authorization, 'Bearer secret');
    assert.equal(registry.seen[0]?.cookie, 'session=secret');
    const atStorage = storage.seen[0];
    assert.ok(atStorage);
    assert.equal(atStorage.authorization, undefined);
    assert.equal(atStorage['proxy-authorization'], undefined);
    assert.equal(atStorage.cookie, undefined);
    assert.equal(atStorage.accept, '*/*');
  });

  it('keeps them on a redirect within the origin', async () => {
    const res = await transport.request({
      url: `${registry.url}/same`,
      headers: CREDENTIALS,
      timeoutMs: 30_000,
      idleTimeoutMs: 30_000,
      maxRedirects: 3,
    });
    drain(res.body);
    const landed = registry.seen.at(-1);
    assert.equal(res.url, `${registry.url}/landed`);
    assert.equal(landed?.authorization, 'Bearer secret');
    assert.equal(landed?.['proxy-authorization'], 'Basic cHJveHk6c2VjcmV0');
    assert.equal(landed?.cookie, 'session=secret');
  });
});
