/**
 * Registries for air-gapped nodes, end to end through a real berthd: `mirrors_only` keeps pulls
 * off a registry's origin (not a request, not a name lookup), and a pull whose download stalls
 * is cancelled after `--image-pull-progress-timeout`, leaving nothing half-written.
 *
 * Needs root. Traffic goes to 127.0.0.1 only: the "origins" are counting proxies on loopback in
 * front of a docker-registry, and the one origin named by a host name (under .invalid) is never
 * looked up: berthd runs with the test's name lookup guard, which fails every lookup on the spot.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { status } from '@grpc/grpc-js';
import { TestDaemon } from '../harness/daemon.js';
import { DNS_BLOCKED_MARKER, DNS_GUARD_ACTIVE, DNS_GUARD_ENV } from '../harness/dns-guard.js';
import { exists, namesIn } from '../harness/files.js';
import { rejectsWith } from '../harness/grpc.js';
import { buildLayer, pushImage, type PushedImage } from '../harness/images.js';
import { freePort, startRegistry, type TestRegistry } from '../harness/registry.js';
import { startRegistryProxy, type RegistryProxy } from '../harness/registry-proxy.js';
import { registrySkip as skip } from '../harness/skip.js';

const SUITE_TIMEOUT_MS = 300_000;
const DNS_GUARD = fileURLToPath(new URL('../harness/dns-guard.js', import.meta.url));
/** A name that must never be looked up: the guard would report it, and .invalid never resolves. */
const NAMED_ORIGIN = 'origin.berth-test.invalid:5000';
const STALL_TIMEOUT_S = 2;

async function pull(daemon: TestDaemon, image: string): Promise<string> {
  const res = await daemon.cri.callImage<{ image_ref: string }>('PullImage', { image: { image } });
  return res.image_ref;
}

function hex(digest: string): string {
  return digest.slice('sha256:'.length);
}

describe('mirrors_only and the pull progress timeout', { skip, timeout: SUITE_TIMEOUT_MS }, () => {
  let configDir = '';
  /** Has every image. */
  let origin: TestRegistry;
  /** Has none: every pull from it is a 404. */
  let emptyMirror: TestRegistry;
  /** Three names for `origin`, each counting its requests; and one that stalls layer downloads. */
  let strictOrigin: RegistryProxy;
  let fallbackOrigin: RegistryProxy;
  let wildcardOrigin: RegistryProxy;
  let stallingOrigin: RegistryProxy;
  /** Under mirrors_only from "*", with no mirror of its own. */
  let unmirroredOrigin: RegistryProxy;
  let closedMirror = '';
  let image: PushedImage;
  let bigImage: PushedImage;
  let daemon: TestDaemon;

  before(async () => {
    configDir = await mkdtemp(join(tmpdir(), 'berth-mirrors-test-'));
    [origin, emptyMirror] = await Promise.all([startRegistry(), startRegistry()]);
    const small = await buildLayer([{ type: 'file', path: 'hello.txt', content: 'hello\n' }]);
    image = await pushImage(origin, 'berth/app', '1', { layers: [small] });
    // Incompressible, so the blob is far bigger than what the stalling proxy lets through.
    const big = await buildLayer([{ type: 'file', path: 'big.bin', content: randomBytes(512 * 1024) }]);
    bigImage = await pushImage(origin, 'berth/big', '1', { layers: [big] });

    [strictOrigin, fallbackOrigin, wildcardOrigin, unmirroredOrigin, stallingOrigin] = await Promise.all([
      startRegistryProxy(origin.url),
      startRegistryProxy(origin.url),
      startRegistryProxy(origin.url),
      startRegistryProxy(origin.url),
      startRegistryProxy(origin.url, { stallPathContaining: hex(big.digest), stallAfterBytes: 4096 }),
    ]);
    closedMirror = `http://127.0.0.1:${await freePort()}`;
    const registries = join(configDir, 'registries.toml');
    await writeFile(
      registries,
      [
        // Everything without a section of its own: one mirror, that nobody listens on, and never the origin.
        '[registry."*"]',
        `mirrors = ["${closedMirror}"]`,
        'mirrors_only = true',
        // Inherits mirrors_only from "*".
        `[registry."${strictOrigin.host}"]`,
        `mirrors = ["${emptyMirror.url}"]`,
        // Overrides "*": may fall back to its origin.
        `[registry."${fallbackOrigin.host}"]`,
        `mirrors = ["${emptyMirror.url}"]`,
        'mirrors_only = false',
        `[registry."${unmirroredOrigin.host}"]`,
        `[registry."${stallingOrigin.host}"]`,
        'mirrors_only = false',
        `[registry."${origin.host}"]`,
        'mirrors_only = false',
        `[registry."${NAMED_ORIGIN}"]`,
        `mirrors = ["${emptyMirror.url}"]`,
        '',
      ].join('\n'),
      { mode: 0o600 },
    );
    daemon = await TestDaemon.create({
      cni: 'bridge',
      extraArgs: ['--registry-config', registries, '--image-pull-progress-timeout', `${STALL_TIMEOUT_S}s`],
      env: { NODE_OPTIONS: `--import=${DNS_GUARD}`, [DNS_GUARD_ENV]: '1' },
    });
    assert.ok(daemon.output.includes(DNS_GUARD_ACTIVE), 'berthd runs without the name lookup guard');
  });

  after(async () => {
    await daemon?.destroy();
    await Promise.all(
      [strictOrigin, fallbackOrigin, wildcardOrigin, unmirroredOrigin, stallingOrigin].map((p) => p?.stop()),
    );
    await Promise.all([origin?.stop(), emptyMirror?.stop()]);
    if (configDir) await rm(configDir, { recursive: true, force: true });
  });

  it('with mirrors_only, a pull the mirror lacks is NOT_FOUND, names the mirror, and never reaches the origin', async () => {
    const err = await rejectsWith(pull(daemon, `${strictOrigin.host}/berth/app:1`), status.NOT_FOUND);
    assert.ok(err.details.includes(emptyMirror.url), `the mirror is not named: ${err.details}`);
    assert.match(err.details, /manifest unknown/);
    assert.match(err.details, /mirrors_only/);
    assert.match(err.details, /origin was not tried/);
    assert.deepEqual(strictOrigin.requests, []);
  });

  it('with mirrors_only from "*", an unreachable mirror is UNAVAILABLE and the origin sees nothing', async () => {
    const err = await rejectsWith(pull(daemon, `${wildcardOrigin.host}/berth/app:1`), status.UNAVAILABLE);
    assert.ok(err.details.includes(closedMirror), `the mirror is not named: ${err.details}`);
    assert.match(err.details, /origin was not tried/);
    assert.deepEqual(wildcardOrigin.requests, []);
  });

  it('with mirrors_only and no mirror, a pull contacts nothing and says why', async () => {
    await rejectsWith(
      pull(daemon, `${unmirroredOrigin.host}/berth/app:1`),
      status.UNKNOWN,
      /no mirror is configured \(mirrors_only is set .*origin was not tried\)/,
    );
    assert.deepEqual(unmirroredOrigin.requests, []);
  });

  it('with mirrors_only, the origin is not even looked up by name', async () => {
    const offset = daemon.output.length;
    const err = await rejectsWith(pull(daemon, `${NAMED_ORIGIN}/berth/app:1`), status.NOT_FOUND);
    assert.ok(err.details.includes(emptyMirror.url), err.details);
    assert.ok(!daemon.output.slice(offset).includes(DNS_BLOCKED_MARKER), 'berthd looked up a name');
  });

  it('without it, the same pull falls back to the origin, which serves it', async () => {
    const ref = await pull(daemon, `${fallbackOrigin.host}/berth/app:1`);
    assert.equal(ref, image.configDigest);
    assert.ok(
      fallbackOrigin.requests.some((path) => path.includes('/manifests/1')),
      `the origin was not asked: ${JSON.stringify(fallbackOrigin.requests)}`,
    );
  });

  it('a download that stalls is cancelled after the progress timeout, leaving nothing behind', async () => {
    const layer = bigImage.layers[0];
    assert.ok(layer);
    const started = Date.now();
    const err = await rejectsWith(
      pull(daemon, `${stallingOrigin.host}/berth/big:1`),
      status.DEADLINE_EXCEEDED,
      /stalled/,
    );
    const ms = Date.now() - started;
    assert.ok(err.details.includes(layer.digest), `the layer is not named: ${err.details}`);
    assert.match(err.details, /image_pull_progress_timeout/);
    // Not the registry timeout (a minute): the progress timeout ended it.
    assert.ok(ms < 30_000, `the stalled pull took ${ms} ms`);
    assert.equal(stallingOrigin.stalled(), 0, 'the stalled connection is still open');

    assert.deepEqual(await namesIn(join(daemon.rootDir, 'ingest')), []);
    const temps = (await namesIn(join(daemon.rootDir, 'layers'))).filter((n) => n.includes('.tmp-'));
    assert.deepEqual(temps, [], 'temporary layer dirs left');
    assert.equal(await exists(join(daemon.rootDir, 'blobs', 'sha256', hex(layer.digest))), false);

    // The same image from a registry that does not stall.
    assert.equal(await pull(daemon, bigImage.reference), bigImage.configDigest);
    assert.equal(await exists(join(daemon.rootDir, 'layers', hex(layer.diffId))), true);
  });
});
