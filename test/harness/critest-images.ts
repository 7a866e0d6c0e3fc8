/**
 * Stand-ins for every image the whole CRI validation suite pulls, pushed to a loopback TestRegistry
 * under critest's own paths (critestRegistryArgs sends berthd's pulls there). Built with the
 * harness's layer builder from Debian's busybox, plus two small static C programs (a fake nginx
 * and the setuid nonewprivs probe) compiled with gcc from ../shared/tools/critest-images/image-src,
 * which lies beside critest itself.
 */
import { existsSync, readdirSync, readFileSync, realpathSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { run } from '../../src/exec.js';
import { PREDEFINED_USER } from './critest.js';
import { buildLayer, pushImage, type BuiltLayer, type LayerEntry } from './images.js';
import type { TestRegistry } from './registry.js';

const APT_ARCHIVES = '/var/cache/apt/archives';

const PASSWD = [
  'root:x:0:0:root:/root:/bin/sh',
  'daemon:x:1:1:daemon:/usr/sbin:/bin/false',
  'www-data:x:33:33:www-data:/var/www:/bin/false',
  `default-user:x:${PREDEFINED_USER.uid}:${PREDEFINED_USER.uid}::/home/default-user:/bin/sh`,
  'nobody:x:65534:65534:nobody:/home:/bin/false',
];
const GROUP = [
  'root:x:0:',
  'daemon:x:1:',
  'www-data:x:33:',
  'users:x:100:',
  `default-user:x:${PREDEFINED_USER.uid}:`,
  'nogroup:x:65534:',
];

/** Debian's busybox-static lacks both applets; critest execs them. */
const PGREP = `#!/bin/sh
[ -n "$1" ] || { echo "usage: pgrep NAME" >&2; exit 2; }
rc=1
for d in /proc/[0-9]*; do
  c=$(cat "$d/comm" 2>/dev/null) || continue
  case "$c" in *"$1"*) [ "\${d#/proc/}" = "$$" ] || { echo "\${d#/proc/}"; rc=0; } ;; esac
done
exit $rc
`;
const IPCS = `#!/bin/sh
echo
echo "------ Shared Memory Segments --------"
echo "key        shmid      owner      perms      bytes      nattch     status"
awk 'NR>1 {printf "0x%08x %-10s %-10s %-10o %-10s %-10s\\n", $1, $2, $8, $3, $4, $7}' /proc/sysvipc/shm
echo
`;

/** An apache stand-in: busybox httpd on :80, logging the command line critest looks for. */
const HTTPD = `#!/bin/sh
echo "[core:notice] [pid $$] AH00094: Command line: 'httpd -D FOREGROUND'"
trap 'kill $child 2>/dev/null; exit 0' TERM INT WINCH
httpd -f -v -p 80 -h /usr/local/apache2/htdocs &
child=$!
wait $child
`;

/**
 * Debian's dynamic busybox package (`apt-get download busybox`; scripts/setup.sh keeps one in apt's
 * archive), or null. Not the host's busybox-static: that one runs its applets inside its shell
 * (`sh -c ls` never execs /bin/ls), which critest's MaskedPaths spec, masking /bin/ls, cannot tell
 * from a runtime that failed to mask. The package conflicts with busybox-static, so it is only
 * unpacked here, never installed.
 */
export const BUSYBOX_DEB: string | null =
  process.env.BERTH_BUSYBOX_DEB ??
  (existsSync(APT_ARCHIVES)
    ? (readdirSync(APT_ARCHIVES)
        .filter((f) => /^busybox_.*_amd64\.deb$/.test(f))
        .map((f) => join(APT_ARCHIVES, f))[0] ?? null)
    : null);

interface Busybox {
  binary: Buffer;
  /** The glibc pieces a dynamic busybox needs. */
  libs: LayerEntry[];
  applets: readonly string[];
}

/** The busybox the images get. */
async function busyboxBinary(): Promise<Busybox> {
  if (!BUSYBOX_DEB) {
    return { binary: await readFile('/bin/busybox'), libs: [], applets: await appletsOf('/bin/busybox') };
  }
  const dir = await mkdtemp(join(tmpdir(), 'berth-critest-bb-'));
  try {
    await run('dpkg-deb', ['-x', BUSYBOX_DEB, dir], { timeoutMs: 60_000 });
    const binary = await readFile(join(dir, 'bin', 'busybox'));
    const applets = await appletsOf(join(dir, 'bin', 'busybox'));
    const lib = (path: string, from: string): LayerEntry => ({
      type: 'file',
      path,
      content: readFileSync(realpathSync(from)),
      mode: 0o755,
    });
    const gnu = 'lib/x86_64-linux-gnu';
    const libs: LayerEntry[] = [
      { type: 'dir', path: 'lib' },
      { type: 'dir', path: gnu },
      { type: 'dir', path: 'lib64' },
      lib(`${gnu}/libc.so.6`, `/${gnu}/libc.so.6`),
      lib(`${gnu}/libresolv.so.2`, `/${gnu}/libresolv.so.2`),
      lib('lib64/ld-linux-x86-64.so.2', '/lib64/ld-linux-x86-64.so.2'),
    ];
    return { binary, libs, applets };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const DIRS =
  'bin dev etc home proc sys usr usr/bin usr/sbin usr/local usr/local/bin var var/run var/www'.split(' ');

/**
 * busybox with every applet a hard link in /bin, as the official image has it: critest's MaskedPaths
 * spec masks /bin/ls, and masking a symlink would mask busybox itself.
 */
function busyboxBase(busybox: Busybox, passwd: readonly string[], group: readonly string[]): LayerEntry[] {
  return [
    ...DIRS.map((path): LayerEntry => ({ type: 'dir', path })),
    { type: 'dir', path: 'root', mode: 0o700 },
    { type: 'dir', path: 'tmp', mode: 0o1777 },
    { type: 'dir', path: 'home/default-user', uid: PREDEFINED_USER.uid, gid: PREDEFINED_USER.uid },
    { type: 'file', path: 'bin/busybox', content: busybox.binary, mode: 0o755 },
    ...busybox.applets.map((a): LayerEntry => ({
      type: 'hardlink',
      path: `bin/${a}`,
      target: 'bin/busybox',
    })),
    ...busybox.libs,
    { type: 'file', path: 'bin/pgrep', content: PGREP, mode: 0o755 },
    { type: 'file', path: 'bin/ipcs', content: IPCS, mode: 0o755 },
    { type: 'file', path: 'etc/passwd', content: `${passwd.join('\n')}\n` },
    { type: 'file', path: 'etc/group', content: `${group.join('\n')}\n` },
    { type: 'file', path: 'etc/hostname', content: 'busybox\n' },
  ];
}

/** The applets of the busybox at `path`, but those the images have scripts for. */
async function appletsOf(path: string): Promise<string[]> {
  const { stdout } = await run(path, ['--list'], { timeoutMs: 10_000 });
  return stdout
    .toString()
    .split('\n')
    .map((a) => a.trim())
    .filter((a) => /^[a-z0-9_.-]+$/i.test(a) && !['busybox', 'pgrep', 'ipcs'].includes(a));
}

/** Compiles ../shared/tools/critest-images/image-src/<name>.c, statically. */
async function compile(critest: string, name: string): Promise<Buffer> {
  const src = join(dirname(critest), 'critest-images', 'image-src', `${name}.c`);
  const dir = await mkdtemp(join(tmpdir(), 'berth-critest-cc-'));
  try {
    const out = join(dir, name);
    await run('gcc', ['-static', '-Os', '-s', '-o', out, src], { timeoutMs: 120_000 });
    return await readFile(out);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Pushes every stand-in; `critest` is the path of the critest wrapper (its images' sources lie beside it). */
export async function pushCritestImages(registry: TestRegistry, critest: string): Promise<void> {
  const busybox = await busyboxBinary();
  const [nginx, nnp] = await Promise.all([compile(critest, 'fake-nginx'), compile(critest, 'nnp')]);
  const base = await buildLayer(busyboxBase(busybox, PASSWD, GROUP), 'gzip');
  const predefined = await buildLayer(
    busyboxBase(busybox, PASSWD, [
      ...GROUP,
      `group-defined-in-image:x:${PREDEFINED_USER.extraGid}:default-user`,
    ]),
    'gzip',
  );
  const layer = (entries: LayerEntry[]): Promise<BuiltLayer> => buildLayer(entries, 'gzip');
  const nginxLayer = await layer([
    { type: 'dir', path: 'usr/sbin' },
    { type: 'file', path: 'usr/sbin/nginx', content: nginx, mode: 0o755 },
  ]);
  const nnpLayer = await layer([
    { type: 'dir', path: 'usr/local/bin' },
    { type: 'file', path: 'usr/local/bin/nnp', content: nnp, mode: 0o4755, uid: 0, gid: 0 },
  ]);
  const push = (repo: string, tag: string, layers: BuiltLayer[], config: Record<string, unknown>) =>
    pushImage(registry, repo, tag, { layers, config: { Cmd: ['sh'], ...config } });
  const staging = 'k8s-staging-cri-tools';

  await push('e2e-test-images/busybox', '1.29-2', [base], {});
  for (const tag of ['1.35.0-glibc', '1-uclibc', '1', '1-glibc', '1-musl']) {
    await push('docker/library/busybox', tag, [base], {});
  }
  const nginxCmd = { Cmd: ['nginx', '-g', 'daemon off;'], StopSignal: 'SIGTERM' };
  await push('e2e-test-images/nginx', '1.14-2', [base, nginxLayer], nginxCmd);
  await push(`${staging}/hostnet-nginx-amd64`, 'latest', [base, nginxLayer], {
    ...nginxCmd,
    Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'NGINX_PORT=12003'],
    StopSignal: 'SIGQUIT',
  });
  const httpdLayer = await layer([
    { type: 'dir', path: 'usr/local/apache2' },
    { type: 'dir', path: 'usr/local/apache2/htdocs' },
    { type: 'file', path: 'usr/local/apache2/htdocs/index.html', content: '<h1>It works!</h1>\n' },
    { type: 'file', path: 'usr/local/bin/httpd-foreground', content: HTTPD, mode: 0o755 },
  ]);
  await push('e2e-test-images/httpd', '2.4.39-4', [base, httpdLayer], {
    Cmd: ['httpd-foreground'],
    WorkingDir: '/usr/local/apache2',
  });
  await push('e2e-test-images/nonewprivs', '1.3', [base, nnpLayer], {
    Entrypoint: ['/usr/local/bin/nnp'],
    Cmd: [],
    User: '1000',
  });
  const users: [string, string][] = [
    ['test-image-user-uid', '1002'],
    ['test-image-user-username', 'www-data'],
    ['test-image-user-uid-group', '1003:1004'],
    ['test-image-user-username-group', 'www-data:1004'],
  ];
  for (const [repo, user] of users) await push(`${staging}/${repo}`, 'latest', [base], { User: user });
  await push(`${staging}/test-image-predefined-group`, 'latest', [predefined], {
    User: String(PREDEFINED_USER.uid),
  });
  // Images that must differ from each other: each adds a file of its own name.
  const marked = async (name: string): Promise<BuiltLayer[]> => [
    base,
    await layer([{ type: 'file', path: name, content: '' }]),
  ];
  for (const n of [
    'test-image-1',
    'test-image-2',
    'test-image-3',
    'test-image-latest',
    'test-image-digest',
  ]) {
    await push(`${staging}/${n}`, 'latest', await marked(n), {});
  }
  const same = await marked('same-image');
  for (const t of ['1', '2', '3']) await push(`${staging}/test-image-tags`, t, same, {});
  await push(`${staging}/test-image-tag`, 'test', await marked('test'), {});
  await push(`${staging}/test-image-tag`, 'all', await marked('all'), {});
}
