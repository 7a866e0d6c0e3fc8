/**
 * The whole CRI validation suite (cri-tools' critest 1.34, its benchmarks excepted) against a test
 * berthd, every image it pulls a stand-in from a loopback registry (test/harness/critest-images.ts).
 * The specs this host cannot run are skipped, each for the reason written below; critest skips a
 * few itself, and only for the reasons allowed below; every other spec must pass.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CRITEST, critestRegistryArgs, critestSkip, runCritest } from '../harness/critest.js';
import { BUSYBOX_DEB, pushCritestImages } from '../harness/critest-images.js';
import { TestDaemon } from '../harness/daemon.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { appArmorEnabled, registrySkip } from '../harness/skip.js';

/** A hang bound for the whole run (about 80 s on a 2-core host). */
const CRITEST_TIMEOUT_MS = 1_200_000;

/** Specs of critest 1.34: 108 validation specs and 5 benchmarks, which run only with -benchmark. */
const SPECS = 108;
const BENCHMARKS = 5;

/** Specs this host cannot run, and why. */
const SKIPS: { spec: string; why: string }[] = [
  {
    spec: 'public image with digest',
    why: 'pulls test-image-digest by the digest of the real image on gcr.io, which no stand-in can have',
  },
  ...(BUSYBOX_DEB
    ? []
    : [
        {
          spec: 'should support MaskedPaths',
          why: "no busybox .deb to unpack (scripts/setup.sh fetches one), and busybox-static's shell never execs the masked /bin/ls",
        },
      ]),
];

/** Reasons critest gives when it skips a spec itself, where this host or berth allows them. */
const SELF_SKIPS: string[] = [
  // Issue 25: berth reports user namespaces once a probe shows the node can idmap mounts.
  'no runtime handler found which supports user namespaces',
  ...(appArmorEnabled ? [] : ['AppArmor is disabled on this host']),
];

const gccSkip = existsSync('/usr/bin/gcc') ? false : 'no gcc to build the nginx and nonewprivs stand-ins';

const skip = registrySkip || critestSkip || gccSkip;

/** The reasons of the specs critest skipped itself: ginkgo prints "[SKIPPED] <reason>" once for each. */
function selfSkips(output: string): string[] {
  return [...output.matchAll(/^\s+\[SKIPPED\] (?!in \[)(.+)$/gm)].map((m) => (m[1] ?? '').trim());
}

/** ginkgo's report of each failed spec (its "• [FAILED]" block), which a tail of the output may cut. */
function failures(output: string): string {
  const blocks = output.split(/^-{10,}$/m).filter((b) => /^• \[(FAILED|PANICKED|TIMEDOUT)\]/m.test(b));
  return blocks.join('\n').slice(0, 30_000);
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

describe('the CRI validation suite (critest)', { skip, timeout: CRITEST_TIMEOUT_MS + 300_000 }, () => {
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let configDir = '';

  before(async () => {
    registry = await startRegistry();
    await pushCritestImages(registry, String(CRITEST));
    configDir = await mkdtemp(join(tmpdir(), 'berth-critest-'));
    daemon = await TestDaemon.create({
      // critest maps host ports and reaches them on 127.0.0.1.
      cni: 'bridge+portmap',
      // critest's user namespace specs map from host id 1000, below kubelet's 65536.
      extraArgs: [...(await critestRegistryArgs(registry, configDir)), '--userns-min-host-id', '1000'],
    });
  });

  after(async () => {
    try {
      await daemon?.destroy();
    } finally {
      await registry?.stop();
      if (configDir) await rm(configDir, { recursive: true, force: true });
    }
  });

  it('passes every spec but those this host cannot run', async () => {
    const t0 = Date.now();
    const skipped = SKIPS.map((s) => escape(s.spec)).join('|');
    const outcome = await runCritest(daemon, null, CRITEST_TIMEOUT_MS, skipped);
    const seconds = Math.round((Date.now() - t0) / 1000);
    const tail = `${failures(outcome.output)}\n...\n${outcome.output.slice(-10_000)}`;
    const own = selfSkips(outcome.output);
    console.log(
      `critest: ${outcome.passed} passed, ${outcome.failed} failed, ${outcome.skipped} skipped in ${seconds} s`,
    );
    for (const s of SKIPS) console.log(`  skipped "${s.spec}": ${s.why}`);
    for (const why of new Set(own)) {
      console.log(`  critest skipped ${own.filter((w) => w === why).length}: ${why}`);
    }
    assert.equal(outcome.code, 0, `critest failed:\n${tail}`);
    assert.equal(outcome.failed, 0, tail);
    const unexpected = own.filter((why) => !SELF_SKIPS.includes(why));
    assert.deepEqual(unexpected, [], `critest skipped specs for reasons not allowed here:\n${tail}`);
    assert.equal(outcome.skipped, BENCHMARKS + SKIPS.length + own.length, tail);
    assert.equal(outcome.passed, SPECS - SKIPS.length - own.length, tail);
  });
});
