/**
 * OCI bundles made by hand, for the tests that drive runc and conmon without berthd: a busybox
 * root filesystem on disk, `runc spec`'s defaults and a config.json beside them.
 */
import assert from 'node:assert/strict';
import { chmod, copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../../src/exec.js';
import type { ContainerState, Runc } from '../../src/runtime/runc.js';
import type { LinuxResources, Spec } from '../../src/oci/spec.js';
import { BOUND_SCALE } from './bounds.js';
import { waitFor } from './wait.js';

const BUSYBOX = '/bin/busybox';
const RUNC_TIMEOUT_MS = 10_000 * BOUND_SCALE;

/** Mount points the default spec mounts over, and a writable /tmp. */
export const ROOTFS_DIRS = ['proc', 'dev', 'sys', 'tmp'] as const;

/** A root filesystem at `dir`: bin/busybox with each of `applets` linked to it, and empty `dirs`. */
export async function writeBusyboxRootfs(
  dir: string,
  applets: readonly string[],
  dirs: readonly string[] = ROOTFS_DIRS,
): Promise<void> {
  for (const d of ['bin', ...dirs]) await mkdir(join(dir, d), { recursive: true });
  await copyFile(BUSYBOX, join(dir, 'bin', 'busybox'));
  await chmod(join(dir, 'bin', 'busybox'), 0o755);
  for (const applet of applets) await symlink('busybox', join(dir, 'bin', applet));
}

/** `runc spec`'s default config: `sh` on a terminal, its root at rootfs/ beside config.json. */
export async function runcDefaultSpec(): Promise<Spec> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-runc-spec-'));
  try {
    await run('runc', ['spec', '--bundle', dir], { timeoutMs: RUNC_TIMEOUT_MS });
    return JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as Spec;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Writes `spec` as the config.json of bundle `dir`, making the dir; returns the dir. */
export async function writeBundle(dir: string, spec: Spec): Promise<string> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'config.json'), JSON.stringify(spec, null, 2));
  return dir;
}

export interface BusyboxProcess {
  /** Linked into the bundle's own rootfs/. */
  applets: readonly string[];
  args: string[];
  cgroupsPath: string;
  /** Merged over the default spec's resources. */
  resources?: LinuxResources;
}

/**
 * A bundle at `dir` with a busybox rootfs of its own: `runc spec`'s defaults, running `args`
 * without a terminal in `cgroupsPath`. Returns the spec written.
 */
export async function writeBusyboxBundle(dir: string, proc: BusyboxProcess): Promise<Spec> {
  await writeBusyboxRootfs(join(dir, 'rootfs'), proc.applets);
  const spec = await runcDefaultSpec();
  assert.ok(spec.process && spec.linux, 'runc spec wrote no process or linux section');
  spec.process.terminal = false;
  spec.process.args = proc.args;
  spec.linux.cgroupsPath = proc.cgroupsPath;
  if (proc.resources) spec.linux.resources = { ...spec.linux.resources, ...proc.resources };
  await writeBundle(dir, spec);
  return spec;
}

/** writeBusyboxBundle at `dir`, then the container `id` created and started there by `runc`. */
export async function runBusyboxContainer(
  runc: Runc,
  id: string,
  dir: string,
  proc: BusyboxProcess,
): Promise<Spec> {
  const spec = await writeBusyboxBundle(dir, proc);
  await runc.create(id, dir, join(dir, 'init.pid'));
  await runc.start(id);
  return spec;
}

/** Polls `runc state` until container `id` is in `status`; false when it is not within `timeoutMs`. */
export async function waitForRuncStatus(
  runc: Runc,
  id: string,
  status: ContainerState['status'],
  timeoutMs = 30_000,
): Promise<boolean> {
  return waitFor(async () => (await runc.state(id))?.status === status, timeoutMs).then(
    () => true,
    () => false,
  );
}
