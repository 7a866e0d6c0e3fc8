import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { copyFile, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { MountFlags, mountSyscall, unmountAll } from '../mounts/syscalls.js';
import { hostname as hostHostname } from 'node:os';
import { basename, dirname, join } from 'node:path';
import type { DnsConfig, Sandbox } from '../model/sandbox.js';

export const RESOLV_CONF = 'resolv.conf';
export const HOSTNAME_FILE = 'hostname';
export const HOSTS_FILE = 'hosts';
/** The pod's /dev/shm: a tmpfs in the sandbox dir that every container of the pod bind-mounts. */
export const SHM_DIR = 'shm';
/** As kubelet and containerd size a pod's /dev/shm by default. */
const SHM_SIZE = '64m';

/**
 * The pod's resolv.conf, written once per pod so every container mounts the same file. With no
 * DNS config from kubelet the pod inherits the host's resolver, as kubelet's "Default" policy means.
 */
export async function writeResolvConf(sandboxDir: string, dns: DnsConfig | null): Promise<void> {
  let text: string;
  if (dns && (dns.servers.length > 0 || dns.searches.length > 0 || dns.options.length > 0)) {
    const lines: string[] = [];
    if (dns.searches.length > 0) lines.push(`search ${dns.searches.join(' ')}`);
    for (const server of dns.servers) lines.push(`nameserver ${server}`);
    if (dns.options.length > 0) lines.push(`options ${dns.options.join(' ')}`);
    text = lines.join('\n') + '\n';
  } else {
    text = await readFile('/etc/resolv.conf', 'utf8').catch(() => '');
  }
  await writeFile(join(sandboxDir, RESOLV_CONF), text, { mode: 0o644 });
}

export async function writeHostnameFile(sandboxDir: string, podHostname: string): Promise<void> {
  await writeFile(join(sandboxDir, HOSTNAME_FILE), `${podHostname || hostHostname()}\n`, { mode: 0o644 });
}

/**
 * kubelet mounts its own /etc/hosts into most containers; when it does not, the pod's file is
 * used. Written once per pod, on first need (the pod's address is known only once it runs), so
 * existing pods get one too. Returns its path.
 */
export async function ensureHostsFile(
  sandbox: Pick<Sandbox, 'sandboxDir' | 'hostNetwork' | 'spec' | 'ip'>,
): Promise<string> {
  const path = join(sandbox.sandboxDir, HOSTS_FILE);
  // Created only where there is none: the file an earlier container of the pod got stays as it is.
  await writeHostsFile(path, sandbox).catch((err: unknown) => {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  });
  return path;
}

async function writeHostsFile(
  path: string,
  sandbox: Pick<Sandbox, 'hostNetwork' | 'spec' | 'ip'>,
): Promise<void> {
  const created = { mode: 0o644, flag: 'wx' } as const;
  if (sandbox.hostNetwork) {
    await copyFile('/etc/hosts', path, constants.COPYFILE_EXCL).catch(async (err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw err;
      await writeFile(path, DEFAULT_HOSTS, created);
    });
    return;
  }
  const name = sandbox.spec.hostname || sandbox.spec.metadata.name;
  const own = sandbox.ip ? `${sandbox.ip}\t${name}\n` : '';
  await writeFile(path, DEFAULT_HOSTS + own, created);
}

const DEFAULT_HOSTS = [
  '127.0.0.1\tlocalhost',
  '::1\tlocalhost ip6-localhost ip6-loopback',
  'fe00::0\tip6-localnet',
  'fe00::0\tip6-mcastprefix',
  'fe00::1\tip6-allnodes',
  'fe00::2\tip6-allrouters',
  '',
].join('\n');

/**
 * Mounts the pod's shm tmpfs. A bind of the infra's own /dev/shm cannot work: the kernel refuses
 * bind mounts out of another mount namespace.
 */
export async function mountShm(sandboxDir: string): Promise<void> {
  const dir = join(sandboxDir, SHM_DIR);
  // A new sandbox's own dir: nothing can be mounted there yet, so no mount table read on this path.
  await mkdir(dir, { recursive: true, mode: 0o755 });
  await mountSyscall({
    source: 'shm',
    target: dir,
    fstype: 'tmpfs',
    flags: MountFlags.NOSUID | MountFlags.NODEV | MountFlags.NOEXEC,
    data: `mode=1777,size=${SHM_SIZE}`,
  });
}

/** Idempotent: a missing or unmounted dir is fine. */
export async function unmountShm(sandboxDir: string): Promise<void> {
  await unmountAll(join(sandboxDir, SHM_DIR));
}

/** Removes a sandbox dir and everything in it; the shm tmpfs is unmounted first, so rm never walks it. */
export async function removeSandboxDir(sandboxDir: string): Promise<void> {
  await unmountShm(sandboxDir);
  await rm(sandboxDir, { recursive: true, force: true });
}

/** The name a removed pod's dir has while it is deleted; no sandbox id starts so. */
export const REMOVED_DIR_PREFIX = '.removed-';

/**
 * Moves a sandbox dir out of its place in one rename, for its contents to be deleted after the
 * caller is done: a recursive delete is a dozen thread-pool round trips, each waiting its turn
 * while other pods start and stop. The new name, beside the old, is no sandbox id, so start-up
 * sweeps it if berthd dies before it is gone. Returns it, or null when there was no dir.
 */
export async function setAsideSandboxDir(sandboxDir: string): Promise<string | null> {
  await unmountShm(sandboxDir);
  // A random part: a dir of the same pod set aside before and still being deleted keeps its name.
  const aside = join(
    dirname(sandboxDir),
    `${REMOVED_DIR_PREFIX}${basename(sandboxDir)}-${randomBytes(4).toString('hex')}`,
  );
  try {
    await rename(sandboxDir, aside);
    return aside;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}
