/**
 * Suites that run once per cgroup driver, with pods nested as kubelet nests them: the cgroup
 * parents kubelet gives a burstable pod, and where each driver puts a container below it, written
 * out here rather than taken from src/cgroups, so that a wrong path in berth shows.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdir, readFile, rmdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { CGROUP_DRIVERS, type CgroupDriver } from '../../src/cgroups/driver.js';
import { parseProcCgroup } from '../../src/cgroups/hierarchy.js';
import { hostRunsSystemd } from '../../src/config/load.js';
import { run } from '../../src/exec.js';
import { CGROUP_V2 } from './cgroups.js';
import { TestDaemon } from './daemon.js';
import { useBusyboxImage } from './images.js';
import { registrySkip } from './skip.js';

const CGROUP_ROOT = '/sys/fs/cgroup';
const EXEC_TIMEOUT_MS = 30_000;

/** Each driver with why its suite cannot run here, or false. */
export const DRIVERS: ReadonlyArray<{ driver: CgroupDriver; skip: string | false }> = CGROUP_DRIVERS.map(
  (driver) => ({
    driver,
    skip:
      registrySkip ||
      (driver === 'systemd' && !hostRunsSystemd()
        ? 'the systemd cgroup driver needs a host running systemd, and this one does not'
        : false),
  }),
);

/** Why a v2-only case is skipped here, or false; printed by the test runner with the skip. */
export const V2_ONLY: string | false = CGROUP_V2 ? false : 'needs cgroup v2; this host runs cgroup v1';

/** berthd flags for `driver`, with an infra process in every pod so that it is checked too. */
export function driverArgs(driver: CgroupDriver): string[] {
  return ['--cgroup-driver', driver, '--pod-infra', 'always'];
}

/**
 * For the enclosing describe block: a berthd with `driver` (driverArgs) that has the busybox
 * sleeper pushed as `repo` pulled, and a kubelet pod whose cgroups are removed after it, as
 * kubelet would.
 */
export function useDriverDaemon(
  driver: CgroupDriver,
  repo: string,
): { daemon: () => TestDaemon; imageRef: () => string; pod: KubeletPod } {
  const imageRef = useBusyboxImage(repo);
  let daemon: TestDaemon | undefined;
  const pod = kubeletPod(driver);
  before(async () => {
    daemon = await TestDaemon.create({ extraArgs: driverArgs(driver) });
    await daemon.cri.callImage('PullImage', { image: { image: imageRef() } });
  });
  after(async () => {
    await daemon?.destroy();
    await removeKubeletPod(driver, pod);
  });
  return {
    daemon: () => {
      assert.ok(daemon, 'berthd did not start');
      return daemon;
    },
    imageRef,
    pod,
  };
}

/** A burstable pod of kubelet's: its uid, the cgroup_parent kubelet sends, and that cgroup's path. */
export interface KubeletPod {
  uid: string;
  cgroupParent: string;
  /** The pod's cgroup below the hierarchies' roots. */
  path: string;
  /** The cgroups above it that kubelet would make (top first), which hold no process on v2. */
  ancestors: string[];
}

export function kubeletPod(driver: CgroupDriver): KubeletPod {
  const hex = randomBytes(8).toString('hex');
  const uid = `${hex.slice(0, 8)}-${hex.slice(8)}`;
  if (driver === 'cgroupfs') {
    return {
      uid,
      cgroupParent: `/kubepods/burstable/pod${uid}`,
      path: `/kubepods/burstable/pod${uid}`,
      ancestors: ['/kubepods', '/kubepods/burstable'],
    };
  }
  // kubelet escapes a uid's dashes for systemd, where a dash nests slices.
  const pod = `kubepods-burstable-pod${uid.replace(/-/g, '_')}.slice`;
  return {
    uid,
    cgroupParent: pod,
    path: `/kubepods.slice/kubepods-burstable.slice/${pod}`,
    ancestors: ['/kubepods.slice', '/kubepods.slice/kubepods-burstable.slice'],
  };
}

/** Where `driver` puts container (or infra) `id` of a pod whose cgroup is `podPath`. */
export function containerCgroup(driver: CgroupDriver, podPath: string, id: string): string {
  return driver === 'cgroupfs' ? `${podPath}/${id}` : `${podPath}/berth-${id}.scope`;
}

/** The cgroup berth makes for pod `podId`, one without a cgroup parent. */
export function unparentedPodCgroup(driver: CgroupDriver, podId: string): string {
  return driver === 'cgroupfs' ? `/berth/pod_${podId}` : `/berth.slice/berth-pod_${podId}.slice`;
}

/** Where `driver` puts container (or infra) `id` of pod `podId`, one without a cgroup parent. */
export function unparentedCgroup(driver: CgroupDriver, podId: string, id: string): string {
  return containerCgroup(driver, unparentedPodCgroup(driver, podId), id);
}

/** The cgroup of `pid`: v2's one, or its memory cgroup on v1 (the one limits are read from). */
export async function cgroupOfPid(pid: number): Promise<string> {
  const lines = parseProcCgroup(await readFile(`/proc/${pid}/cgroup`, 'utf8'));
  const line = CGROUP_V2
    ? lines.find((l) => l.controllers === '')
    : lines.find((l) => l.controllers.split(',').includes('memory'));
  if (!line) throw new Error(`process ${pid} has no ${CGROUP_V2 ? 'v2' : 'memory'} cgroup`);
  return line.path;
}

/** The directory of cgroup `path` (as from cgroupOfPid) in the hierarchy limits are read from. */
export function cgroupDir(path: string): string {
  return CGROUP_V2 ? join(CGROUP_ROOT, path) : join(CGROUP_ROOT, 'memory', path);
}

/** The pids in cgroup `path` itself (not its children); v2 only. */
export async function processesInCgroup(path: string): Promise<number[]> {
  const text = await readFile(join(CGROUP_ROOT, path, 'cgroup.procs'), 'utf8');
  return text.split('\n').filter(Boolean).map(Number);
}

/** The cgroups below cgroup `path`; an absent cgroup has none. */
export async function childCgroups(path: string): Promise<string[]> {
  const entries = await readdir(cgroupDir(path), { withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isDirectory()).map((e) => e.name);
}

/**
 * Removes a pod's cgroup and the parents above it no other pod uses, as kubelet does once the pod
 * is gone: berth never made them. With systemd, by stopping the slice, which removes its parents'
 * implicit units when nothing else is in them.
 */
export async function removeKubeletPod(driver: CgroupDriver, pod: KubeletPod): Promise<void> {
  if (driver === 'systemd') {
    const slice = pod.path.split('/').pop() ?? '';
    await run('systemctl', ['stop', slice], { timeoutMs: EXEC_TIMEOUT_MS }).catch(() => undefined);
    return;
  }
  const hierarchies = CGROUP_V2 ? [''] : await readdir(CGROUP_ROOT);
  for (const path of [pod.path, ...[...pod.ancestors].reverse()]) {
    // Another pod's cgroup below a parent keeps it: rmdir refuses, and that is fine.
    for (const h of hierarchies) await rmdir(join(CGROUP_ROOT, h, path)).catch(() => undefined);
  }
}

/** The scopes runc asked systemd for, for containers (or infras) `ids`, that systemd still has. */
export async function scopesLeft(ids: readonly string[]): Promise<string[]> {
  const { stdout } = await run(
    'systemctl',
    ['list-units', '--all', '--plain', '--no-legend', '--no-pager', 'berth-*.scope'],
    { timeoutMs: EXEC_TIMEOUT_MS },
  );
  const ours = new Set(ids.map((id) => `berth-${id}.scope`));
  return stdout
    .split('\n')
    .map((line) => line.trim().split(/\s+/)[0] ?? '')
    .filter((unit) => ours.has(unit));
}
