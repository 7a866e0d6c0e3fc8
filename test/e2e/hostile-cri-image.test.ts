/**
 * Hostile input against the image rpcs (the fuzz: test/harness/hostile-fuzz.ts). Needs root;
 * traffic stays on loopback: hostile image references name 127.0.0.1 only, and berthd runs with
 * name lookups blocked.
 *
 * BERTH_HOSTILE_SEED=<n> runs other random values; BERTH_HOSTILE_VERBOSE=1 prints codes per field.
 */
import assert from 'node:assert/strict';
import { describe, it, type TestContext } from 'node:test';
import { status } from '@grpc/grpc-js';
import { ANSWER_BOUND_MS, HOSTILE_FILE_BOUND_MS } from '../harness/bounds.js';
import { CriFuzz } from '../harness/hostile-fuzz.js';
import type { RpcSpec } from '../harness/hostile-specs.js';
import { HostileCri, assertAnswer } from '../harness/hostile-cri.js';
import { busyboxLayer, pushImage } from '../harness/images.js';
import { startRegistry } from '../harness/registry.js';
import { registrySkip as skip } from '../harness/skip.js';

describe('hostile input on the image rpcs', { skip, timeout: HOSTILE_FILE_BOUND_MS }, () => {
  const cri = HostileCri.forSuite();
  const fuzz = new CriFuzz(cri);
  const image = (): string => cri.image.reference;

  const specs: RpcSpec[] = [
    {
      rpc: 'ImageStatus',
      base: () => ({ image: { image: image() }, verbose: true }),
      fields: [
        { path: 'image.image', kind: 'imageLocal' },
        { path: 'image.annotations', kind: 'mapKey' },
        { path: 'verbose', kind: 'bool' },
      ],
    },
    {
      rpc: 'ListImages',
      base: () => ({ filter: { image: { image: image() } } }),
      fields: [{ path: 'filter.image.image', kind: 'imageLocal' }],
    },
    {
      rpc: 'StreamImages',
      base: () => ({ filter: { image: { image: image() } } }),
      fields: [{ path: 'filter.image.image', kind: 'imageLocal' }],
    },
    {
      rpc: 'PullImage',
      base: () => ({
        image: { image: image() },
        auth: { username: 'u', password: 'p' },
        sandbox_config: cri.daemon.pod(`pull${cri.next()}`),
      }),
      // A registry that refuses the credentials is the registry's answer.
      extraCodes: [status.UNAUTHENTICATED, status.PERMISSION_DENIED],
      // Concurrent pulls of one reference share a single pull, whatever their credentials.
      serial: true,
      fields: [
        // Only the references name a registry that is not there; hostile credentials for the
        // real one must not look like an outage.
        { path: 'image.image', kind: 'imagePull', extraCodes: [status.UNAVAILABLE] },
        { path: 'auth.username', kind: 'string' },
        { path: 'auth.password', kind: 'string' },
        { path: 'auth.auth', kind: 'string' },
        { path: 'auth.server_address', kind: 'string' },
        { path: 'auth.identity_token', kind: 'string' },
        { path: 'auth.registry_token', kind: 'string' },
        { path: 'sandbox_config.metadata.name', kind: 'string' },
      ],
    },
    {
      rpc: 'RemoveImage',
      base: () => ({ image: { image: `127.0.0.1:${cri.closedPort}/berth/absent:1` } }),
      destructive: true,
      fields: [{ path: 'image.image', kind: 'imageLocal' }],
    },
    { rpc: 'ImageFsInfo', base: () => ({}), fields: [] },
  ];

  describe('found by the fuzz, checked on their own', () => {
    it('concurrent pulls with different credentials each get the answer their own credentials earn', async () => {
      const secured = await startRegistry({ htpasswd: { username: 'berth', password: 'right' } });
      try {
        const pushed = await pushImage(secured, 'berth/private', '1', {
          layers: [await busyboxLayer()],
          config: { Cmd: ['/bin/true'] },
        });
        const spec = { image: pushed.reference };
        const good = { image: spec, auth: { username: 'berth', password: 'right' } };
        const bad = { image: spec, auth: { username: 'berth', password: 'wrong' } };
        const refused = [status.UNAUTHENTICATED, status.PERMISSION_DENIED];
        assertAnswer(
          'PullImage with wrong credentials',
          await cri.client.call('PullImage', bad, ANSWER_BOUND_MS),
          refused,
        );
        for (const [round, order] of [
          [good, bad],
          [bad, good],
        ].entries()) {
          await cri.admin.call('RemoveImage', { image: spec }, ANSWER_BOUND_MS);
          const outs = await Promise.all(
            order.map((req) => cri.client.call('PullImage', req, ANSWER_BOUND_MS)),
          );
          const [goodOut, badOut] = order[0] === good ? outs : [outs[1], outs[0]];
          assert.ok(goodOut && badOut);
          assertAnswer(`round ${round}: PullImage with the right credentials`, goodOut, [status.OK]);
          assertAnswer(`round ${round}: PullImage with wrong credentials, at the same time`, badOut, refused);
        }
      } finally {
        await cri.admin.call(
          'RemoveImage',
          { image: { image: `${secured.host}/berth/private:1` } },
          ANSWER_BOUND_MS,
        );
        await secured.stop();
      }
    });
  });

  it('answers every hostile request to every rpc of its group, with a typed status and a bounded message', async (t: TestContext) => {
    await fuzz.run(t, 'image', specs);
  });

  it('removes through the API what hostile requests created, and leaves nothing behind', async () => {
    await fuzz.assertNothingLeft();
  });
});
