/**
 * Hostile SPDY on the streaming server: a real berthd, a real running container (and a server in
 * its pod for port-forward), and clients that misbehave after their upgrade. First the findings of
 * issue 22, each on its own; then a seeded fuzz (test/harness/spdy-fuzz.ts). After each case
 * berthd must be alive, a CRI Version call must answer (the deadline is a bound for a hang, not a
 * speed), and nothing the session started may be left: no exec'd command in the container, no
 * `runc exec` or socat of berthd's.
 *
 * BERTH_HOSTILE_SEED=<n> runs other cases; BERTH_HOSTILE_SPDY_CASES=<n> runs more or fewer;
 * BERTH_HOSTILE_VERBOSE=1 prints each case and its time.
 * Traffic goes to loopback and into the test pod's network namespace only.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdir } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, it, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { status } from '@grpc/grpc-js';
import { FrameType, RstStatus, StoredHeaderWriter, controlFrame, u32 } from '../../src/spdy/frames.js';
import { commandLine, parentPid, processesMentioning } from '../../src/process/index.js';
import { TestDaemon } from '../harness/daemon.js';
import { DeadlineClient, Rng, hostileSeed } from '../harness/hostile.js';
import { busyboxLayer, pushImage, type LayerEntry, type PushedImage } from '../harness/images.js';
import { containerConfig, execSync, runPod, startContainer, type Pod } from '../harness/pods.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { registrySkip } from '../harness/skip.js';
import { FORWARDED_PORT, spdyCases, type SpdyCase } from '../harness/spdy-fuzz.js';
import {
  CRICTL,
  crictlSkip,
  readFrames,
  spdyConnect,
  spdyRemoteCommand,
  spdyUpgrade,
  synStreamFrame,
} from '../harness/streaming.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 600_000;
/** A CRI call that takes longer than this is hung, not slow. */
const CRI_DEADLINE_MS = 30_000;
/** How long berthd may take to notice a client is gone and clean up after it. */
const CLEANUP_WAIT_MS = 30_000;
const DEFAULT_CASES = 40;
/** Past this the fuzz stops and reports what it found: each case takes about half a second. */
const FUZZ_BUDGET_MS = 300_000;
const PAGE = 'served to hostile clients\n';
const HOLDING_PORT = 81;

/** A bound for a wait that must not keep the test process alive once everything else is done. */
const deadline = (ms: number): Promise<void> => sleep(ms, undefined, { ref: false });

interface UrlResponse {
  url: string;
}

describe('hostile SPDY on the streaming server', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  const seed = hostileSeed();
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let image: PushedImage;
  let admin: DeadlineClient;
  let pod: Pod;
  /** Runs `sleep`; every exec goes here. */
  let target: string;

  before(async () => {
    registry = await startRegistry();
    const www: LayerEntry[] = [
      { type: 'dir', path: 'www' },
      { type: 'file', path: 'www/index.html', content: PAGE },
    ];
    image = await pushImage(registry, 'berth/hostile-spdy', '1', {
      layers: [await busyboxLayer('gzip', { applets: ['httpd'], entries: www })],
      config: { Cmd: ['/bin/sleep', '100000'], WorkingDir: '/', Env: ['PATH=/bin'] },
    });
    daemon = await TestDaemon.create({ cni: 'bridge' });
    admin = new DeadlineClient(daemon.socket);
    await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
    pod = await runPod(daemon.cri, daemon.pod('hostile-spdy'));
    target = await startContainer(daemon.cri, pod, containerConfig('target', image.reference));
    const httpd = ['/bin/httpd', '-f', '-p', String(FORWARDED_PORT), '-h', '/www'];
    await startContainer(daemon.cri, pod, containerConfig('web', image.reference, { command: httpd }));
    // A server that holds each connection without a word and without noticing its end.
    const holder = ['/bin/nc', '-ll', '-p', String(HOLDING_PORT), '-e', '/bin/sleep', '100000'];
    await startContainer(daemon.cri, pod, containerConfig('holder', image.reference, { command: holder }));
  });

  after(async () => {
    admin?.close();
    await daemon?.destroy();
    await registry?.stop();
  });

  function execUrl(cmd: string[], stdin = false): Promise<string> {
    return daemon.cri
      .call<UrlResponse>('Exec', { container_id: target, cmd, stdin, stdout: true, stderr: true })
      .then((r) => r.url);
  }

  function forwardUrl(): Promise<string> {
    return daemon.cri
      .call<UrlResponse>('PortForward', { pod_sandbox_id: pod.id, port: [] })
      .then((r) => r.url);
  }

  /** berthd runs and answers the CRI. */
  async function assertAlive(where: string): Promise<void> {
    const proc = daemon.proc;
    assert.ok(proc && proc.exitCode === null && proc.signalCode === null, `${where}: berthd exited`);
    const out = await admin.call('Version', {}, CRI_DEADLINE_MS);
    if (out.noAnswer) admin.reconnect();
    assert.equal(out.code, status.OK, `${where}: Version answered ${status[out.code]} ${out.details}`);
  }

  /** berthd's own children whose command line has `word` (runc exec, socat). */
  async function children(word: string): Promise<string[]> {
    const found: string[] = [];
    for (const pid of await processesMentioning(word)) {
      if ((await parentPid(pid)) !== daemon.proc?.pid) continue;
      found.push(`${pid}: ${((await commandLine(pid)) ?? []).join(' ')}`);
    }
    return found;
  }

  /** Nothing a session started is left: no exec in progress, no socat, no `marker` in the container. */
  async function assertNothingLeft(where: string, marker?: string): Promise<void> {
    let left: string[] = [];
    await waitFor(
      async () => {
        const dirs = await readdir(join(daemon.stateDir, 'exec')).catch(() => [] as string[]);
        left = [
          ...(await children('exec')),
          ...(await children('socat')),
          ...dirs.map((d) => `exec dir ${d}`),
        ];
        return left.length === 0;
      },
      CLEANUP_WAIT_MS,
      { pollMs: 100, what: `${where}: sessions ended` },
    ).catch(() => assert.fail(`${where}: left after ${CLEANUP_WAIT_MS} ms: ${left.join('; ')}`));
    if (marker) {
      const ps = (await execSync(daemon.cri, target, ['ps', '-o', 'args'])).stdout.toString();
      assert.ok(!ps.includes(marker), `${where}: "${marker}" still runs in the container:\n${ps}`);
    }
  }

  /** Resolves once the socket closed, or after `ms`; true when it closed. */
  function closedWithin(socket: Socket, ms: number): Promise<boolean> {
    if (socket.destroyed) return Promise.resolve(true);
    return Promise.race([once(socket, 'close').then(() => true), deadline(ms).then(() => false)]);
  }

  describe('the findings of issue 22', () => {
    it('a header block over 16 KiB opens its stream, and 64 MB of stdin follow it', async () => {
      const total = 64 * 1024 * 1024;
      const chunk = Buffer.alloc(64 * 1024, 'z');
      let sent = 0;
      const input = new Readable({
        read() {
          sent += chunk.length;
          this.push(sent > total ? null : chunk);
        },
      });
      const url = await execUrl(['head', '-c', String(total)], true);
      const res = await spdyRemoteCommand(url, {
        stdin: input,
        stderr: true,
        discardOutput: true,
        streamHeaders: { padding: 'p'.repeat(40 * 1024) },
      });
      assert.equal(res.stdoutBytes, total);
      assert.deepEqual(JSON.parse(res.errorText), { metadata: {}, status: 'Success' });
      await assertAlive('after the big header block');
      await assertNothingLeft('after the big header block');
    });

    it('an exec client that ends its connection has it closed, and its command killed', async () => {
      const marker = 'sleep 4101';
      const { socket, conn } = await spdyConnect(await execUrl(marker.split(' ')), ['v4.channel.k8s.io']);
      for (const type of ['error', 'stdout', 'stderr']) await conn.openStream({ streamType: type });
      await waitFor(async () => (await children('exec')).length > 0, 10_000, { what: 'runc exec' });
      socket.end();
      assert.ok(await closedWithin(socket, CLEANUP_WAIT_MS), 'berthd left the connection half open');
      await assertNothingLeft('after the client ended', marker);
    });

    it('a port-forward client that ends its connection has it closed, and its pod connection', async () => {
      const { socket, conn } = await spdyConnect(await forwardUrl(), ['portforward.k8s.io']);
      const headers = { port: String(HOLDING_PORT), requestID: '1' };
      await conn.openStream({ streamType: 'error', ...headers });
      const data = await conn.openStream({ streamType: 'data', ...headers });
      data.write('anyone there?\n');
      await waitFor(async () => (await children('socat')).length > 0, 10_000, { what: 'socat' });
      socket.end();
      assert.ok(await closedWithin(socket, CLEANUP_WAIT_MS), 'berthd left the connection half open');
      await assertNothingLeft('after the port-forward client ended');
    });

    it('a port-forward connection holds 256 streams at once; more are refused', async () => {
      const { socket, head } = await spdyUpgrade(await forwardUrl(), ['portforward.k8s.io']);
      assert.equal(head.length, 0);
      const writer = new StoredHeaderWriter();
      const count = 300;
      // Error streams whose data stream never comes: each waits, holding its place.
      const syns = Array.from({ length: count }, (_, i) =>
        synStreamFrame(writer, 2 * i + 1, { streamType: 'error', port: '80', requestID: String(i) }),
      );
      const answers = readFrames(socket, count);
      socket.write(Buffer.concat(syns));
      const frames = await answers;
      const refused = frames.filter(
        (f) =>
          f.kind === 'control' &&
          f.type === FrameType.RST_STREAM &&
          f.body.readUInt32BE(4) === RstStatus.REFUSED_STREAM,
      );
      assert.equal(refused.length, count - 256);
      socket.destroy();
      await assertAlive('after 300 streams');
    });

    it(
      'crictl exec killed with -9, with -i and a command ignoring stdin, leaves nothing',
      { skip: crictlSkip },
      async () => {
        for (const [i, interactive] of [false, true].entries()) {
          const marker = `sleep 420${i}`;
          const args = [
            '--runtime-endpoint',
            `unix://${daemon.socket}`,
            'exec',
            ...(interactive ? ['-i'] : []),
          ];
          const child = spawn(CRICTL ?? 'crictl', [...args, target, ...marker.split(' ')], {
            stdio: ['pipe', 'ignore', 'ignore'],
          });
          child.stdin.on('error', () => undefined);
          // More input than the command's pipe and every buffer on the way hold: crictl is stuck writing.
          if (interactive) for (let n = 0; n < 256; n++) child.stdin.write(Buffer.alloc(64 * 1024, 'i'));
          await waitFor(
            async () =>
              (await execSync(daemon.cri, target, ['ps', '-o', 'args'])).stdout.toString().includes(marker),
            20_000,
            { what: `${marker} running` },
          );
          await sleep(500);
          child.kill('SIGKILL');
          await once(child, 'exit');
          await assertNothingLeft(`crictl exec ${interactive ? '-i ' : ''}killed`, marker);
        }
      },
    );

    it(
      'crictl exec -i whose stdin waits unread for a while still gets all the output after',
      { skip: crictlSkip },
      async () => {
        // While stdin is not read berthd probes the idle connection; the probes must not stop crictl
        // from reading the output that comes before the command reads its input.
        const script = 'sleep 12; seq 1 3000000; cat >/dev/null; echo done';
        const child = spawn(
          CRICTL ?? 'crictl',
          ['--runtime-endpoint', `unix://${daemon.socket}`, 'exec', '-i', target, 'sh', '-c', script],
          { stdio: ['pipe', 'pipe', 'ignore'] },
        );
        child.stdin.on('error', () => undefined);
        let out = '';
        child.stdout.setEncoding('utf8');
        child.stdout.on('data', (c: string) => (out = (out + c).slice(-100)));
        for (let n = 0; n < 256; n++) child.stdin.write(Buffer.alloc(64 * 1024, 'i'));
        child.stdin.end();
        const exited = once(child, 'exit');
        const code = await Promise.race([
          exited.then(([c]) => c as number | null),
          deadline(90_000).then(() => 'hung'),
        ]);
        if (code === 'hung') child.kill('SIGKILL');
        assert.equal(code, 0, `crictl: ${String(code)}; output ends with ${JSON.stringify(out)}`);
        assert.match(out, /3000000\ndone\n$/);
        await assertNothingLeft('after crictl exec -i');
      },
    );

    it('a PING flood from a client that never reads leaves berthd’s memory bounded', async () => {
      const { socket, head } = await spdyUpgrade(await execUrl(['sleep', '4301']), ['v4.channel.k8s.io']);
      assert.equal(head.length, 0);
      socket.pause();
      socket.on('error', () => undefined);
      const pings = Buffer.concat(
        Array.from({ length: 10_000 }, (_, i) => controlFrame(FrameType.PING, 0, u32(2 * i + 1))),
      );
      const { growthKiB } = await daemon.rssGrowthDuring(async () => {
        // 2 million PINGs (24 MB), as fast as berthd takes them, until it stops taking them.
        for (let i = 0; i < 200; i++) socket.write(pings);
        let last = -1;
        for (let waited = 0; waited < 20_000 && socket.writableLength !== last; waited += 1000) {
          last = socket.writableLength;
          await sleep(1000);
        }
        await assertAlive('during the PING flood');
      });
      socket.destroy();
      assert.ok(growthKiB < 64 * 1024, `berthd grew by ${Math.round(growthKiB / 1024)} MiB`);
      await assertAlive('after the PING flood');
      await assertNothingLeft('after the PING flood');
    });
  });

  it('the seeded fuzz: every case leaves berthd alive, answering, and nothing behind', async (t: TestContext) => {
    const count = Number(process.env.BERTH_HOSTILE_SPDY_CASES ?? DEFAULT_CASES);
    const cases = spdyCases(new Rng(seed), count);
    const started = Date.now();
    const failures: string[] = [];
    for (const [i, c] of cases.entries()) {
      if (Date.now() - started > FUZZ_BUDGET_MS) {
        failures.push(`ran out of time after ${i} of ${cases.length} cases: berthd is slow to clean up`);
        break;
      }
      const where = `case ${i} (${c.label})`;
      const caseStarted = Date.now();
      try {
        await runCase(c, i);
        await assertAlive(where);
        await assertNothingLeft(where, c.kind === 'exec' ? markerOf(c, i) : undefined);
        if (process.env.BERTH_HOSTILE_VERBOSE) t.diagnostic(`${where}: ${Date.now() - caseStarted} ms`);
      } catch (err) {
        failures.push(`${where}: ${err instanceof Error ? err.message : String(err)}`);
        if (daemon.proc?.exitCode !== null) break;
      }
    }
    t.diagnostic(`seed ${seed}: ${cases.length} cases in ${Math.round((Date.now() - started) / 1000)} s`);
    assert.deepEqual(
      failures,
      [],
      `seed ${seed} (BERTH_HOSTILE_SEED=${seed} reproduces):\n${failures.join('\n')}`,
    );
  });

  /** A command per case that ps shows: stdin cases read it (head), others ignore it (sleep). */
  function commandOf(c: SpdyCase, i: number): string[] {
    return c.stdin && i % 2 === 0 ? ['head', '-c', String(4_000_000_000 + i)] : ['sleep', String(40_000 + i)];
  }

  function markerOf(c: SpdyCase, i: number): string {
    return commandOf(c, i).join(' ');
  }

  async function runCase(c: SpdyCase, i: number): Promise<void> {
    const url = c.kind === 'exec' ? await execUrl(commandOf(c, i), c.stdin) : await forwardUrl();
    const { socket } = await spdyUpgrade(url, [
      c.kind === 'exec' ? 'v4.channel.k8s.io' : 'portforward.k8s.io',
    ]);
    socket.on('error', () => undefined);
    if (c.reads) socket.resume();
    else socket.pause();
    for (const bytes of c.writes) socket.write(bytes);
    // Time for berthd to take it all (or to stop taking it), and to start what the session asked for.
    for (let waited = 0; waited < 3000 && socket.writableLength > 0 && !socket.destroyed; waited += 100) {
      await sleep(100);
    }
    await sleep(300);
    if (c.ending === 'end') {
      socket.end();
      // A client that reads sees berthd close its side; one that does not would wait in vain.
      if (c.reads) await closedWithin(socket, 2000);
    }
    socket.destroy();
  }
});
