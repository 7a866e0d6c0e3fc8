/**
 * Exec, Attach and PortForward end to end: a real berthd over its gRPC socket, containers run by
 * runc under conmon in pods on a real bridge, and the streams driven by crictl (the reference
 * SPDY client) and by this suite's own SPDY and WebSocket clients. Needs root. Traffic goes to
 * loopback and to the test pods' own network namespaces only.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { request } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import { run } from '../../src/exec.js';
import { commandLine, processesMentioning } from '../../src/process/index.js';
import { ANSWER_BOUND_MS } from '../harness/bounds.js';
import { TestDaemon } from '../harness/daemon.js';
import { rejectsWith } from '../harness/grpc.js';
import { busyboxLayer, pushImage, type LayerEntry, type PushedImage } from '../harness/images.js';
import { startRegistry, type TestRegistry } from '../harness/registry.js';
import { containerConfig, execSync, runPod, startContainer, type Pod } from '../harness/pods.js';
import { registrySkip } from '../harness/skip.js';
import {
  UpgradeRefused,
  channelText,
  crictl,
  crictlSkip,
  crictlTty,
  spdyConnect,
  spdyRemoteCommand,
  wsConnect,
} from '../harness/streaming.js';
import { waitFor } from '../harness/wait.js';

const SUITE_TIMEOUT_MS = 600_000;
const EXTRA_APPLETS = ['stty', 'tty', 'httpd', 'yes', 'dd', 'seq', 'sed', 'tr'];
const PAGE = '<html>served from a berth pod</html>\n';

interface UrlResponse {
  url: string;
}

/**
 * A shell command that prints the terminal's size once it is `rows cols`, or whatever it is after
 * about ten seconds: the client's size message races the command's start, and on a busy machine
 * a fixed sleep can lose.
 */
const sttySizeOnce = (rows: number, cols: number): string =>
  `i=0; while [ "$(stty size)" != "${rows} ${cols}" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; stty size`;

describe('streaming: exec, attach, port-forward', { skip: registrySkip, timeout: SUITE_TIMEOUT_MS }, () => {
  let registry: TestRegistry;
  let daemon: TestDaemon;
  let image: PushedImage;
  let main: Pod;
  /** Runs `sleep 1000`. */
  let sleeper: string;

  before(async () => {
    registry = await startRegistry();
    const www: LayerEntry[] = [
      { type: 'dir', path: 'www' },
      { type: 'file', path: 'www/index.html', content: PAGE },
    ];
    image = await pushImage(registry, 'berth/streaming', '1', {
      layers: [await busyboxLayer('gzip', { applets: EXTRA_APPLETS, entries: www })],
      config: { Cmd: ['/bin/sleep', '1000'], WorkingDir: '/', Env: ['PATH=/bin'] },
    });
    daemon = await TestDaemon.create({ cni: 'bridge' });
    await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
    main = await runPod(daemon.cri, daemon.pod('streams'));
    sleeper = await start('sleeper');
  });

  after(async () => {
    await daemon?.destroy();
    await registry?.stop();
  });

  /** A started container of the test image. */
  function start(name: string, extra: Record<string, unknown> = {}, pod = main): Promise<string> {
    return startContainer(daemon.cri, pod, containerConfig(name, image.reference, extra));
  }

  function execUrl(id: string, cmd: string[], flags: Record<string, boolean> = {}): Promise<string> {
    return daemon.cri
      .call<UrlResponse>('Exec', { container_id: id, cmd, stdout: true, stderr: true, ...flags })
      .then((r) => r.url);
  }

  /** What `cmd` wrote to stdout, whatever its exit code. */
  async function stdoutOf(id: string, cmd: string[]): Promise<string> {
    return (await execSync(daemon.cri, id, cmd)).stdout.toString();
  }

  async function stateOf(id: string): Promise<string> {
    const st = await daemon.cri.call<{ status: { state: string } }>('ContainerStatus', { container_id: id });
    return st.status.state;
  }

  /** Host processes whose command line mentions `needle` (runc exec helpers, socat, leftovers). */
  async function hostProcesses(needle: string): Promise<string[]> {
    const found: string[] = [];
    for (const pid of await processesMentioning(needle)) {
      found.push(`${pid}: ${((await commandLine(pid)) ?? []).join(' ')}`);
    }
    return found;
  }

  describe('the RPCs', () => {
    it('answer with a URL on the streaming server carrying a token', async () => {
      const url = await execUrl(sleeper, ['true']);
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/exec\/[A-Za-z0-9_-]{20,}$/);
      const attach = await daemon.cri.call<UrlResponse>('Attach', { container_id: sleeper, stdout: true });
      assert.match(attach.url, /\/attach\/[A-Za-z0-9_-]+$/);
      const pf = await daemon.cri.call<UrlResponse>('PortForward', { pod_sandbox_id: main.id, port: [80] });
      assert.match(pf.url, /\/portforward\/[A-Za-z0-9_-]+$/);
    });

    it('refuse bad requests with the field named, unknown ids and stopped containers', async () => {
      await rejectsWith(
        daemon.cri.call('Exec', { container_id: 'nope', cmd: ['true'], stdout: true }),
        status.NOT_FOUND,
        'nope',
      );
      await rejectsWith(
        daemon.cri.call('Exec', { container_id: sleeper, cmd: [], stdout: true }),
        status.INVALID_ARGUMENT,
        'cmd',
      );
      await rejectsWith(
        daemon.cri.call('Exec', { container_id: sleeper, cmd: ['true'] }),
        status.INVALID_ARGUMENT,
        'stdin',
      );
      await rejectsWith(
        daemon.cri.call('Exec', {
          container_id: sleeper,
          cmd: ['sh'],
          tty: true,
          stdout: true,
          stderr: true,
        }),
        status.INVALID_ARGUMENT,
        'stderr',
      );
      await rejectsWith(
        daemon.cri.call('Attach', { container_id: 'nope', stdout: true }),
        status.NOT_FOUND,
        'nope',
      );
      await rejectsWith(
        daemon.cri.call('PortForward', { pod_sandbox_id: 'nope', port: [80] }),
        status.NOT_FOUND,
        'nope',
      );
      await rejectsWith(
        daemon.cri.call('PortForward', { pod_sandbox_id: main.id, port: [70000] }),
        status.INVALID_ARGUMENT,
        'port[0]',
      );
      const stopped = await start('stopped-one');
      await daemon.cri.call('StopContainer', { container_id: stopped, timeout: 0 });
      await rejectsWith(
        daemon.cri.call('Exec', { container_id: stopped, cmd: ['true'], stdout: true }),
        status.FAILED_PRECONDITION,
        'not running',
      );
      await rejectsWith(
        daemon.cri.call('Attach', { container_id: stopped, stdout: true }),
        status.FAILED_PRECONDITION,
        'not running',
      );
    });

    it('a used, unknown or malformed token is a 404', async () => {
      const url = await execUrl(sleeper, ['true'], { stderr: false });
      const first = await spdyRemoteCommand(url);
      assert.match(first.errorText, /"status":"Success"/);
      await assert.rejects(
        spdyRemoteCommand(url),
        (err: unknown) => err instanceof UpgradeRefused && err.failure.statusCode === 404,
      );
      const base = url.slice(0, url.indexOf('/exec/'));
      await assert.rejects(
        spdyRemoteCommand(`${base}/exec/not-a-token`),
        (err: unknown) => err instanceof UpgradeRefused && err.failure.statusCode === 404,
      );
      const plain = await new Promise<number>((resolve, reject) => {
        request(`${base}/attach/x`, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
          .on('error', reject)
          .end();
      });
      assert.equal(plain, 404);
    });

    it('a protocol the server does not speak is refused with the ones it accepts', async () => {
      const url = await execUrl(sleeper, ['true']);
      await assert.rejects(spdyConnect(url, ['v9.channel.k8s.io']), (err: unknown) => {
        assert.ok(err instanceof UpgradeRefused);
        assert.equal(err.failure.statusCode, 403);
        assert.match(
          String(err.failure.headers['x-accepted-stream-protocol-versions']),
          /v4\.channel\.k8s\.io/,
        );
        return true;
      });
    });
  });

  describe('exec with crictl', { skip: crictlSkip }, () => {
    it('runs a command and passes its output and exit code', async () => {
      const ok = await crictl(daemon.socket, ['exec', sleeper, 'sh', '-c', 'echo out; echo err >&2; id -u']);
      assert.equal(ok.code, 0, ok.stderr);
      assert.equal(ok.stdout, 'out\n0\n');
      assert.match(ok.stderr, /err/);
      // crictl 1.29 itself exits 1 and names the command's code.
      const failed = await crictl(daemon.socket, ['exec', sleeper, 'sh', '-c', 'exit 7']);
      assert.equal(failed.code, 1, failed.stderr);
      assert.match(failed.stderr, /exit code 7/);
    });

    it('passes stdin to the command and its end closes the command stdin', async () => {
      const res = await crictl(daemon.socket, ['exec', '-i', sleeper, 'sh', '-c', 'cat; echo done'], {
        input: 'line one\nline two\n',
      });
      assert.equal(res.code, 0, res.stderr);
      assert.equal(res.stdout, 'line one\nline two\ndone\n');
    });

    it('exec -it gets a terminal of the client size inside the container, and resizes', async () => {
      const res = await crictlTty(
        daemon.socket,
        ['exec', '-it', sleeper, 'sh', '-c', `tty; ${sttySizeOnce(33, 101)}`],
        {
          rows: 33,
          cols: 101,
        },
      );
      assert.equal(res.code, 0, res.stdout + res.stderr);
      assert.match(res.stdout, /\/dev\/pts\/\d+/);
      assert.match(res.stdout, /33 101/);
    });

    it('exec -it takes interactive input and reports the exit code', async () => {
      const res = await crictlTty(daemon.socket, ['exec', '-it', sleeper, 'sh'], {
        input: 'echo interactive-$((6*7))\nexit 5\n',
      });
      assert.match(res.stdout, /interactive-42/);
      assert.equal(res.code, 1, res.stdout);
      assert.match(res.stdout + res.stderr, /exit code 5/);
    });

    it('^C in exec -it interrupts the command in the container', async () => {
      const started = Date.now();
      const running = async (): Promise<boolean> =>
        (await stdoutOf(sleeper, ['ps', '-o', 'args'])).includes('sleep 4323');
      // Sent once the command runs: crictl has its terminal in raw mode by then, so ^C goes to the
      // container instead of interrupting crictl itself.
      const res = await crictlTty(daemon.socket, ['exec', '-it', sleeper, 'sh', '-c', 'sleep 4323'], {
        input: '\x03',
        inputWhen: running,
        keepStdinOpen: true,
      });
      // Well before the hour the command would sleep.
      assert.ok(Date.now() - started < 60_000);
      assert.match(res.stdout + res.stderr, /exit code 130/);
      assert.ok(!(await stdoutOf(sleeper, ['ps', '-o', 'args'])).includes('sleep 4323'));
    });

    it('streams a large output completely', async () => {
      const res = await crictl(daemon.socket, [
        'exec',
        sleeper,
        'sh',
        '-c',
        'yes 0123456789abcdef | head -c 20000000',
      ]);
      assert.equal(res.code, 0, res.stderr);
      assert.equal(res.stdout.length, 20_000_000);
    });

    it('20 execs at once each get their own output', async () => {
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          crictl(daemon.socket, ['exec', sleeper, 'sh', '-c', `seq ${i} ${i + 999}`]),
        ),
      );
      results.forEach((res, i) => {
        assert.equal(res.code, 0, res.stderr);
        const lines = res.stdout.trim().split('\n');
        assert.equal(lines.length, 1000);
        assert.equal(lines[0], String(i));
      });
    });
  });

  describe('exec over SPDY directly', () => {
    it('v4 ends with a JSON status: Success, or NonZeroExitCode with the code', async () => {
      const ok = await spdyRemoteCommand(await execUrl(sleeper, ['echo', 'hi']), { stderr: true });
      assert.equal(ok.protocol, 'v4.channel.k8s.io');
      assert.equal(ok.stdout.toString(), 'hi\n');
      assert.deepEqual(JSON.parse(ok.errorText), { metadata: {}, status: 'Success' });
      const failed = await spdyRemoteCommand(await execUrl(sleeper, ['sh', '-c', 'exit 3']), {
        stderr: true,
      });
      const st = JSON.parse(failed.errorText) as {
        status: string;
        reason: string;
        details: { causes: { reason: string; message: string }[] };
      };
      assert.equal(st.status, 'Failure');
      assert.equal(st.reason, 'NonZeroExitCode');
      assert.deepEqual(st.details.causes, [{ reason: 'ExitCode', message: '3' }]);
    });

    it('older protocols get the failure as text and nothing on success', async () => {
      for (const protocol of ['v3.channel.k8s.io', 'v2.channel.k8s.io', 'channel.k8s.io']) {
        const ok = await spdyRemoteCommand(await execUrl(sleeper, ['echo', protocol]), {
          protocols: [protocol],
          stderr: true,
        });
        assert.equal(ok.protocol, protocol);
        assert.equal(ok.stdout.toString(), `${protocol}\n`);
        assert.equal(ok.errorText, '');
        const failed = await spdyRemoteCommand(await execUrl(sleeper, ['sh', '-c', 'exit 4']), {
          protocols: [protocol],
          stderr: true,
        });
        assert.match(failed.errorText, /non-zero exit code/);
      }
    });

    it('a missing executable exits 127 with the reason on stderr, as in a shell', async () => {
      const res = await spdyRemoteCommand(await execUrl(sleeper, ['/no/such/binary']), { stderr: true });
      const st = JSON.parse(res.errorText) as { reason: string; details: { causes: { message: string }[] } };
      assert.equal(st.reason, 'NonZeroExitCode');
      assert.equal(st.details.causes[0]?.message, '127');
      assert.match(res.stderr.toString(), /no\/such\/binary/);
    });

    it('a slow client slows the command: berthd does not buffer the output', async () => {
      const url = await execUrl(sleeper, ['sh', '-c', 'yes 0123456789abcdef | head -c 300000000'], {
        stderr: false,
      });
      const { value: res, growthKiB } = await daemon.rssGrowthDuring(() =>
        spdyRemoteCommand(url, { discardOutput: true, readDelayMs: 2000 }),
      );
      assert.equal(res.stdoutBytes, 300_000_000);
      assert.deepEqual(JSON.parse(res.errorText), { metadata: {}, status: 'Success' });
      assert.ok(
        growthKiB < 80 * 1024,
        `berthd grew by ${Math.round(growthKiB / 1024)} MiB while streaming 300 MB`,
      );
    });

    it('256 MB through cat, in by stdin and out by stdout, with berthd memory flat', async () => {
      const total = 256 * 1024 * 1024;
      const chunk = Buffer.alloc(64 * 1024, 'x');
      let sent = 0;
      const input = new Readable({
        read() {
          if (sent >= total) {
            this.push(null);
            return;
          }
          sent += chunk.length;
          this.push(chunk);
        },
      });
      const url = await execUrl(sleeper, ['cat'], { stdin: true, stderr: false });
      const { value: res, growthKiB } = await daemon.rssGrowthDuring(() =>
        spdyRemoteCommand(url, { stdin: input, discardOutput: true, readDelayMs: 1000 }),
      );
      assert.equal(res.stdoutBytes, total);
      assert.deepEqual(JSON.parse(res.errorText), { metadata: {}, status: 'Success' });
      assert.ok(growthKiB < 80 * 1024, `berthd grew by ${Math.round(growthKiB / 1024)} MiB`);
    });

    it('a client that goes away kills the command and leaves nothing behind', async () => {
      const marker = `gone-${Date.now()}`;
      const url = await execUrl(sleeper, ['sh', '-c', `exec sleep 4321 # ${marker}`], { stderr: false });
      const { conn, socket } = await spdyConnect(url, ['v4.channel.k8s.io']);
      await conn.openStream({ streamType: 'error' });
      await conn.openStream({ streamType: 'stdout' });
      await waitFor(
        async () => (await stdoutOf(sleeper, ['ps', '-o', 'args'])).includes('sleep 4321'),
        10_000,
      );
      socket.destroy();
      await waitFor(
        async () => !(await stdoutOf(sleeper, ['ps', '-o', 'args'])).includes('sleep 4321'),
        10_000,
      );
      await waitFor(
        async () => (await hostProcesses(' exec ')).filter((p) => p.includes(daemon.base)).length === 0,
        10_000,
      );
      assert.deepEqual(await readdir(join(daemon.stateDir, 'exec')), [], 'no exec dirs left');
    });
  });

  describe('exec over WebSocket', () => {
    it('v5 with the close signal for stdin, and the v4 status', async () => {
      const url = await execUrl(sleeper, ['sh', '-c', 'cat; exit 9'], { stdin: true });
      const ws = await wsConnect(url, ['v5.channel.k8s.io']);
      assert.equal(ws.protocol, 'v5.channel.k8s.io');
      ws.send(0, 'to stdin\n');
      ws.ws.send(Buffer.from([255, 0]));
      await ws.closed;
      assert.equal(channelText(ws, 1), 'to stdin\n');
      const st = JSON.parse(channelText(ws, 3)) as {
        reason: string;
        details: { causes: { message: string }[] };
      };
      assert.equal(st.reason, 'NonZeroExitCode');
      assert.equal(st.details.causes[0]?.message, '9');
    });

    it('v4 binary and base64 framing, stderr on its own channel', async () => {
      for (const protocol of ['v4.channel.k8s.io', 'v4.base64.channel.k8s.io']) {
        const ws = await wsConnect(await execUrl(sleeper, ['sh', '-c', 'echo o; echo e >&2']), [protocol]);
        assert.equal(ws.protocol, protocol);
        await ws.closed;
        assert.equal(channelText(ws, 1), 'o\n');
        assert.equal(channelText(ws, 2), 'e\n');
        assert.deepEqual(JSON.parse(channelText(ws, 3)), { metadata: {}, status: 'Success' });
      }
    });

    it('a terminal and a resize message', async () => {
      const url = await execUrl(sleeper, ['sh', '-c', sttySizeOnce(40, 120)], { tty: true, stderr: false });
      const ws = await wsConnect(url, ['v4.channel.k8s.io']);
      ws.send(4, JSON.stringify({ Width: 120, Height: 40 }));
      await ws.closed;
      assert.match(channelText(ws, 1), /40 120/);
    });
  });

  describe('attach', () => {
    let interactive: string;

    before(async () => {
      // `cat` echoes what it is given: stdin kept open (no stdin_once), no terminal.
      interactive = await start('interactive', { command: ['/bin/cat'], stdin: true });
    });

    it('joins the container stdio; detaching leaves it running; several at once', async () => {
      const urlA = (
        await daemon.cri.call<UrlResponse>('Attach', {
          container_id: interactive,
          stdin: true,
          stdout: true,
          stderr: true,
        })
      ).url;
      const urlB = (await daemon.cri.call<UrlResponse>('Attach', { container_id: interactive, stdout: true }))
        .url;
      const a = await wsConnect(urlA, ['v4.channel.k8s.io']);
      const b = await wsConnect(urlB, ['v4.channel.k8s.io']);
      a.send(0, 'hello attach\n');
      await waitFor(
        async () => channelText(a, 1).includes('hello attach') && channelText(b, 1).includes('hello attach'),
        10_000,
      );
      a.ws.close();
      b.ws.close();
      await Promise.all([a.closed, b.closed]);
      const st = await daemon.cri.call<{ status: { state: string } }>('ContainerStatus', {
        container_id: interactive,
      });
      assert.equal(st.status.state, 'CONTAINER_RUNNING');
    });

    it('crictl attach passes input through and output back', { skip: crictlSkip }, async () => {
      // crictl attach returns when the container's output ends: the container here exits on EOF.
      const once = await start('attach-once', {
        command: ['/bin/sh', '-c', 'read line; echo "got $line"; sleep 1'],
        stdin: true,
        stdin_once: true,
      });
      const res = await crictl(daemon.socket, ['attach', '-i', once], {
        input: 'something\n',
        timeoutMs: 30_000,
      });
      assert.match(res.stdout, /got something/, res.stderr);
    });

    it(
      'with stdin_once, the client closing its stdin closes the container stdin: cat exits, attach ends',
      { skip: crictlSkip },
      async () => {
        const once = await start('attach-cat-once', { command: ['/bin/cat'], stdin: true, stdin_once: true });
        // As containerd: the container's stdin is closed, its output stays attached until it ends.
        const res = await crictl(daemon.socket, ['attach', '-i', once], {
          input: 'to cat once\n',
          timeoutMs: ANSWER_BOUND_MS,
        });
        assert.match(res.stdout, /to cat once/, res.stderr);
        await waitFor(async () => (await stateOf(once)) === 'CONTAINER_EXITED', ANSWER_BOUND_MS);
      },
    );

    it(
      'without stdin_once, the client closing its stdin ends the attach; the container keeps running',
      { skip: crictlSkip },
      async () => {
        const kept = await start('attach-cat-kept', { command: ['/bin/cat'], stdin: true });
        // As containerd (and kubectl attach -i with stdin closed): the session ends, the stdin stays open.
        const res = await crictl(daemon.socket, ['attach', '-i', kept], {
          input: 'to cat kept\n',
          timeoutMs: ANSWER_BOUND_MS,
        });
        assert.equal(res.code, 0, res.stderr);
        assert.equal(await stateOf(kept), 'CONTAINER_RUNNING');
        // Its stdin was left open: a second attach still reaches cat.
        const again = await crictl(daemon.socket, ['attach', '-i', kept], {
          input: 'again\n',
          timeoutMs: ANSWER_BOUND_MS,
        });
        assert.equal(again.code, 0, again.stderr);
        assert.equal(await stateOf(kept), 'CONTAINER_RUNNING');
      },
    );

    it(
      'crictl attach -it drives a terminal container, as kubectl run -it does',
      { skip: crictlSkip },
      async () => {
        const shell = await start('attach-tty', {
          command: ['/bin/sh'],
          stdin: true,
          stdin_once: true,
          tty: true,
        });
        const res = await crictlTty(daemon.socket, ['attach', '-it', shell], {
          input: 'echo attached-$((2*3))\nexit 0\n',
          inputDelayMs: 1000,
          keepStdinOpen: true,
        });
        assert.match(res.stdout, /attached-6/);
        await waitFor(async () => {
          const st = await daemon.cri.call<{ status: { state: string } }>('ContainerStatus', {
            container_id: shell,
          });
          return st.status.state === 'CONTAINER_EXITED';
        }, 10_000);
      },
    );

    it('attach to a terminal container resizes its terminal', async () => {
      const tty = await start('tty', { command: ['/bin/sh'], stdin: true, tty: true });
      const url = (
        await daemon.cri.call<UrlResponse>('Attach', {
          container_id: tty,
          stdin: true,
          stdout: true,
          tty: true,
        })
      ).url;
      const ws = await wsConnect(url, ['v4.channel.k8s.io']);
      ws.send(4, JSON.stringify({ Width: 91, Height: 27 }));
      // Asked again until the resize has landed: it races the first question on a busy machine.
      await waitFor(
        async () => {
          if (channelText(ws, 1).includes('27 91')) return true;
          ws.send(0, 'stty size\n');
          return false;
        },
        30_000,
        { pollMs: 500 },
      );
      ws.ws.close();
    });

    it('a berthd restart ends the stream; the container keeps running; nothing leaks', async () => {
      const url = (await daemon.cri.call<UrlResponse>('Attach', { container_id: interactive, stdout: true }))
        .url;
      const ws = await wsConnect(url, ['v4.channel.k8s.io']);
      await daemon.restart();
      await ws.closed;
      const st = await daemon.cri.call<{ status: { state: string } }>('ContainerStatus', {
        container_id: interactive,
      });
      assert.equal(st.status.state, 'CONTAINER_RUNNING');
      assert.equal(await stdoutOf(interactive, ['echo', 'alive']), 'alive\n');
    });
  });

  describe('port-forward', () => {
    let webPod: Pod;
    let hostPod: Pod;
    let hostPort: number;

    before(async () => {
      webPod = await runPod(daemon.cri, daemon.pod('web'));
      await start('httpd', { command: ['/bin/httpd', '-f', '-p', '80', '-h', '/www'] }, webPod);
      // A host-network pod's port is the host's: a free one, so nothing else answers there.
      hostPort = await new Promise<number>((resolve) => {
        const s = createServer().listen(0, '127.0.0.1', () => {
          const p = (s.address() as AddressInfo).port;
          s.close(() => resolve(p));
        });
      });
      const hostNetwork = { linux: { security_context: { namespace_options: { network: 'NODE' } } } };
      hostPod = await runPod(daemon.cri, daemon.pod('hostnet', hostNetwork));
      await start(
        'httpd-host',
        { command: ['/bin/httpd', '-f', '-p', `127.0.0.1:${hostPort}`, '-h', '/www'] },
        hostPod,
      );
      await new Promise((r) => setTimeout(r, 300));
    });

    async function forwardGet(
      url: string,
      port: number,
      requestId = '0',
    ): Promise<{ data: string; error: string }> {
      const { conn } = await spdyConnect(url, ['portforward.k8s.io']);
      const headers = { port: String(port), requestID: requestId };
      const error = await conn.openStream({ streamType: 'error', ...headers });
      const data = await conn.openStream({ streamType: 'data', ...headers });
      error.end();
      const chunks: { data: Buffer[]; error: Buffer[] } = { data: [], error: [] };
      data.on('data', (c: Buffer) => chunks.data.push(c));
      error.on('data', (c: Buffer) => chunks.error.push(c));
      data.end('GET / HTTP/1.0\r\n\r\n');
      await Promise.all([new Promise((r) => data.once('end', r)), new Promise((r) => error.once('end', r))]);
      conn.close();
      return { data: Buffer.concat(chunks.data).toString(), error: Buffer.concat(chunks.error).toString() };
    }

    it('reaches a server inside the pod network namespace over SPDY', async () => {
      const url = (
        await daemon.cri.call<UrlResponse>('PortForward', { pod_sandbox_id: webPod.id, port: [80] })
      ).url;
      const res = await forwardGet(url, 80);
      assert.equal(res.error, '');
      assert.match(res.data, /200 OK/);
      assert.ok(res.data.includes(PAGE));
    });

    it('a host-network pod forwards to the host port', async () => {
      const url = (
        await daemon.cri.call<UrlResponse>('PortForward', { pod_sandbox_id: hostPod.id, port: [] })
      ).url;
      const res = await forwardGet(url, hostPort);
      assert.equal(res.error, '');
      assert.ok(res.data.includes(PAGE));
    });

    it('a closed port is an error on the error stream, not a hang', async () => {
      const url = (await daemon.cri.call<UrlResponse>('PortForward', { pod_sandbox_id: webPod.id, port: [] }))
        .url;
      const res = await forwardGet(url, 81);
      assert.match(res.error, /error forwarding port 81/);
      assert.match(res.error, /refused/i);
    });

    it('several connections at once on one session', async () => {
      const url = (await daemon.cri.call<UrlResponse>('PortForward', { pod_sandbox_id: webPod.id, port: [] }))
        .url;
      const { conn } = await spdyConnect(url, ['portforward.k8s.io']);
      const one = async (rid: number): Promise<string> => {
        const headers = { port: '80', requestID: String(rid) };
        const error = await conn.openStream({ streamType: 'error', ...headers });
        const data = await conn.openStream({ streamType: 'data', ...headers });
        error.end();
        let errorText = '';
        error.on('data', (c: Buffer) => (errorText += c.toString()));
        const chunks: Buffer[] = [];
        data.on('data', (c: Buffer) => chunks.push(c));
        data.end('GET / HTTP/1.0\r\n\r\n');
        await new Promise((r) => data.once('end', r));
        return `${Buffer.concat(chunks).toString()}${errorText}`;
      };
      const pages = await Promise.all([1, 2, 3, 4, 5].map(one));
      for (const page of pages) assert.ok(page.includes(PAGE), page);
      conn.close();
      await waitFor(
        async () =>
          (await hostProcesses('socat')).filter((p) => p.includes('TCP4:127.0.0.1:80')).length === 0,
        10_000,
      );
    });

    it('over WebSocket with the port in the URL', async () => {
      const url = (
        await daemon.cri.call<UrlResponse>('PortForward', { pod_sandbox_id: webPod.id, port: [80] })
      ).url;
      const ws = await wsConnect(`${url}?port=80`, ['v4.channel.k8s.io']);
      await waitFor(async () => (ws.received.get(0)?.length ?? 0) >= 1, 10_000);
      assert.deepEqual(ws.received.get(0)?.[0], Buffer.from([80, 0]));
      ws.send(0, 'GET / HTTP/1.0\r\n\r\n');
      await waitFor(async () => channelText(ws, 0).includes(PAGE.trim()), 10_000);
      ws.ws.close();
    });

    it('crictl port-forward serves a local port', { skip: crictlSkip }, async () => {
      const local = await new Promise<number>((resolve) => {
        const s = createServer().listen(0, '127.0.0.1', () => {
          const p = (s.address() as AddressInfo).port;
          s.close(() => resolve(p));
        });
      });
      const pf = crictl(daemon.socket, ['port-forward', webPod.id, `${local}:80`], {
        timeoutMs: 30_000,
      }).catch(() => undefined);
      let page = '';
      await waitFor(async () => {
        page = await new Promise<string>((resolve) => {
          request(`http://127.0.0.1:${local}/`, (res) => {
            let body = '';
            res.on('data', (c: Buffer) => (body += c.toString()));
            res.on('end', () => resolve(body));
          })
            .on('error', () => resolve(''))
            .end();
        });
        return page.includes(PAGE.trim());
      }, 20_000);
      for (const p of await hostProcesses(`${local}:80`)) process.kill(Number(p.split(':')[0]), 'SIGTERM');
      await pf;
    });
  });
});

describe(
  'streaming server settings: TLS and the idle timeout',
  { skip: registrySkip, timeout: SUITE_TIMEOUT_MS },
  () => {
    let registry: TestRegistry;
    let daemon: TestDaemon;
    let containerId: string;
    let tlsDir: string;

    before(async () => {
      registry = await startRegistry();
      const image = await pushImage(registry, 'berth/streaming-tls', '1', {
        layers: [await busyboxLayer()],
        config: { Cmd: ['/bin/sleep', '1000'], Env: ['PATH=/bin'] },
      });
      tlsDir = await mkdtemp(join(tmpdir(), 'berth-tls-'));
      const cert = join(tlsDir, 'streaming.crt');
      const key = join(tlsDir, 'streaming.key');
      // prettier-ignore
      await run('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
      '-subj', '/CN=127.0.0.1', '-keyout', key, '-out', cert,
    ], { timeoutMs: 30_000 });
      daemon = await TestDaemon.create({
        cni: 'bridge',
        extraArgs: [
          '--streaming-tls-cert',
          cert,
          '--streaming-tls-key',
          key,
          '--streaming-idle-timeout',
          '1s',
        ],
      });
      await daemon.cri.callImage('PullImage', { image: { image: image.reference } });
      const pod = await runPod(daemon.cri, daemon.pod('tls'));
      containerId = await startContainer(daemon.cri, pod, {
        metadata: { name: 'c' },
        image: { image: image.reference },
      });
    });

    after(async () => {
      await daemon?.destroy();
      await registry?.stop();
      if (tlsDir) await rm(tlsDir, { recursive: true, force: true });
    });

    it('serves https URLs and speaks SPDY over TLS', async () => {
      const { url } = await daemon.cri.call<UrlResponse>('Exec', {
        container_id: containerId,
        cmd: ['echo', 'over tls'],
        stdout: true,
      });
      assert.match(url, /^https:\/\/127\.0\.0\.1:\d+\/exec\//);
      const res = await spdyRemoteCommand(url);
      assert.equal(res.stdout.toString(), 'over tls\n');
    });

    it('closes a stream with no traffic after the idle timeout and kills its process', async () => {
      const { url } = await daemon.cri.call<UrlResponse>('Exec', {
        container_id: containerId,
        cmd: ['sleep', '4322'],
        stdout: true,
      });
      const started = Date.now();
      const res = await spdyRemoteCommand(url);
      const took = Date.now() - started;
      assert.ok(took < 10_000, `the session lasted ${took} ms`);
      assert.equal(res.errorText, '');
      await waitFor(async () => {
        const ps = await execSync(daemon.cri, containerId, ['ps', '-o', 'args']);
        return !ps.stdout.toString().includes('sleep 4322');
      }, 10_000);
    });
  },
);
