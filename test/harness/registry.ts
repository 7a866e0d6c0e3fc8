/**
 * A real registry for tests: Debian's docker-registry (distribution 2.8) on a free 127.0.0.1 port
 * with its own storage in a temp dir, plus push helpers speaking the registry API over fetch.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { run } from '../../src/exec.js';
import { BOUND_SCALE } from './bounds.js';

export const DOCKER_REGISTRY = '/usr/bin/docker-registry';
// A hang bound, stretched where everything runs slower (emulated VM: seen past 20 s at host load 14).
const STARTUP_TIMEOUT_MS = 20_000 * BOUND_SCALE;

export interface RegistryOptions {
  /** Require Basic auth (htpasswd, bcrypt) for every request. */
  htpasswd?: { username: string; password: string };
}

export interface PushedBlob {
  digest: string;
  size: number;
}

export interface TestRegistry {
  /** `http://127.0.0.1:<port>` */
  url: string;
  /** `127.0.0.1:<port>`: the registry part of image references. */
  host: string;
  port: number;
  dir: string;
  /** Whatever docker-registry printed (log level warn), for failure messages. */
  output(): string;
  /** Uploads a blob (monolithic: POST, then PUT with the digest). */
  pushBlob(repo: string, bytes: Buffer): Promise<PushedBlob>;
  /** PUTs a manifest under a tag or digest; returns its digest. */
  pushManifest(repo: string, reference: string, bytes: Buffer, mediaType: string): Promise<string>;
  stop(): Promise<void>;
}

export async function startRegistry(opts: RegistryOptions = {}): Promise<TestRegistry> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-registry-'));
  try {
    const port = await freePort();
    const config = [
      'version: 0.1',
      'log:',
      '  level: warn',
      '  accesslog:',
      '    disabled: true',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${join(dir, 'storage')}`,
      '  delete:',
      '    enabled: true',
      'http:',
      `  addr: 127.0.0.1:${port}`,
      `  secret: ${createHash('sha256').update(dir).digest('hex')}`,
    ];
    if (opts.htpasswd) {
      const { stdout } = await run('htpasswd', ['-Bbn', opts.htpasswd.username, opts.htpasswd.password], {
        timeoutMs: 10_000,
      });
      await writeFile(join(dir, 'htpasswd'), stdout.trim() + '\n', { mode: 0o600 });
      config.push('auth:', '  htpasswd:', '    realm: berth-test', `    path: ${join(dir, 'htpasswd')}`);
    }
    const configPath = join(dir, 'config.yml');
    await writeFile(configPath, config.join('\n') + '\n');

    const proc = spawn(DOCKER_REGISTRY, ['serve', configPath], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    proc.stdout?.on('data', (d: Buffer) => (output += d.toString()));
    proc.stderr?.on('data', (d: Buffer) => (output += d.toString()));
    const url = `http://127.0.0.1:${port}`;
    const authorization = opts.htpasswd
      ? `Basic ${Buffer.from(`${opts.htpasswd.username}:${opts.htpasswd.password}`).toString('base64')}`
      : undefined;
    const registry = new Registry(url, port, dir, proc, () => output, authorization);
    try {
      await registry.waitReady();
    } catch (err) {
      await registry.stop();
      throw err;
    }
    return registry;
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

class Registry implements TestRegistry {
  readonly host: string;
  private exited = false;

  constructor(
    readonly url: string,
    readonly port: number,
    readonly dir: string,
    private readonly proc: ChildProcess,
    readonly output: () => string,
    private readonly authorization: string | undefined,
  ) {
    this.host = `127.0.0.1:${port}`;
    proc.on('exit', () => (this.exited = true));
    // A failed spawn (no docker-registry binary) arrives as an event; without a listener it would crash the run.
    proc.on('error', () => (this.exited = true));
  }

  async waitReady(): Promise<void> {
    const deadline = Date.now() + STARTUP_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (this.exited) throw new Error(`docker-registry exited at start: ${this.output()}`);
      try {
        const res = await fetch(`${this.url}/v2/`, { signal: AbortSignal.timeout(1000) });
        await res.arrayBuffer();
        // 401 is an answer too: the htpasswd registry wants credentials.
        if (res.status === 200 || res.status === 401) return;
      } catch {
        // Not listening yet.
      }
      await sleep(50);
    }
    throw new Error(
      `docker-registry did not answer on ${this.url} within ${STARTUP_TIMEOUT_MS} ms: ${this.output()}`,
    );
  }

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return this.authorization ? { ...extra, authorization: this.authorization } : extra;
  }

  async pushBlob(repo: string, bytes: Buffer): Promise<PushedBlob> {
    const digest = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
    const start = await fetch(`${this.url}/v2/${repo}/blobs/uploads/`, {
      method: 'POST',
      headers: this.headers(),
    });
    await start.arrayBuffer();
    const location = start.headers.get('location');
    if (start.status !== 202 || location === null) {
      throw new Error(`starting a blob upload to ${repo}: HTTP ${start.status}`);
    }
    const target = new URL(location, this.url);
    target.searchParams.set('digest', digest);
    const put = await fetch(target, {
      method: 'PUT',
      headers: this.headers({ 'content-type': 'application/octet-stream' }),
      body: new Uint8Array(bytes),
    });
    const text = await put.text();
    if (put.status !== 201) {
      throw new Error(`uploading blob ${digest} to ${repo}: HTTP ${put.status}: ${text}`);
    }
    return { digest, size: bytes.length };
  }

  async pushManifest(repo: string, reference: string, bytes: Buffer, mediaType: string): Promise<string> {
    const res = await fetch(`${this.url}/v2/${repo}/manifests/${reference}`, {
      method: 'PUT',
      headers: this.headers({ 'content-type': mediaType }),
      body: new Uint8Array(bytes),
    });
    const text = await res.text();
    if (res.status !== 201) {
      throw new Error(`pushing manifest ${repo}:${reference}: HTTP ${res.status}: ${text}`);
    }
    return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
  }

  async stop(): Promise<void> {
    if (!this.exited && this.proc.pid !== undefined) {
      const gone = new Promise<void>((resolve) => this.proc.once('exit', () => resolve()));
      this.proc.kill('SIGTERM');
      // Cancel the grace timer once it exits: a pending timer would hold the test process for 5 s.
      const grace = new AbortController();
      const timedOut = sleep(5000, false, { signal: grace.signal }).catch(() => true);
      const exited = await Promise.race([gone.then(() => true), timedOut]);
      grace.abort();
      if (!exited) {
        this.proc.kill('SIGKILL');
        await gone;
      }
    }
    await rm(this.dir, { recursive: true, force: true });
  }
}

/** A port nothing listens on right now (the kernel picks it; the registry binds it moments later). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
