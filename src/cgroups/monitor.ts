/**
 * The cgroup container monitors live in, outside berthd's own: a service manager that stops
 * berthd by killing its cgroup (systemd's default KillMode=control-group) must leave the conmons,
 * and with them the containers' stdio, logs and exit codes, alone. Like CRI-O's conmon_cgroup.
 */
import { join } from 'node:path';
import type { CgroupDriver } from './driver.js';
import { ensureCgroup, membershipsOf, moveProcess } from './hierarchy.js';
import { readMountInfo } from '../mounts/mountinfo.js';
import { commandLine, processesMentioning } from '../process/index.js';
import { allSettledOrThrow } from '../kit/settle.js';

/**
 * `berth-monitors`: a cgroup of their own at the top of every hierarchy berthd is in
 * (`berth-monitors.slice` with the systemd driver). `inherit`: berthd's own, as before.
 */
export const MONITOR_CGROUP_MODES = ['berth-monitors', 'inherit'] as const;
export type MonitorCgroupMode = (typeof MONITOR_CGROUP_MODES)[number];

const MONITORS_CGROUP = 'berth-monitors';

export class MonitorCgroup {
  private dirs: Promise<string[]> | null = null;
  private ownDir: Promise<string | null> | null = null;

  constructor(
    private readonly mode: MonitorCgroupMode,
    private readonly driver: CgroupDriver,
  ) {}

  /** The cgroup's name under each hierarchy's root; null when monitors stay in berthd's cgroup. */
  get name(): string | null {
    if (this.mode === 'inherit') return null;
    // systemd names slices so; systemd is not asked to make it, so it is a plain cgroupfs dir.
    return this.driver === 'systemd' ? `${MONITORS_CGROUP}.slice` : MONITORS_CGROUP;
  }

  /** Moves `pid` into the monitors' cgroup in every hierarchy berthd is in. */
  async place(pid: number): Promise<void> {
    // Side by side: cgroup v1 has a dozen hierarchies, each move is three thread-pool round trips,
    // and conmon waits for all of them before it may start runc.
    await allSettledOrThrow((await this.targetDirs()).map((dir) => moveProcess(pid, dir)));
  }

  /**
   * Readies the kernel for the move `place` makes next, without waiting for it. A move between
   * cgroups first waits for an RCU grace period unless another move happened a moment before
   * (the kernel's cgroup_threadgroup_rwsem): 8–20 ms on a 2-core VM, measured, against about 1 ms
   * right after another move. A waiting conmon is held for all of it. berthd moving itself into
   * the cgroup it is already in changes nothing but starts that wait at once, so a create calls
   * this as it begins and the wait overlaps the rootfs and spec work. Best effort.
   */
  prime(): void {
    if (this.name === null) return;
    this.ownDir ??= membershipsOf('self')
      .then((memberships) => {
        const own = memberships[0];
        return own ? join(own.mountPoint, own.path) : null;
      })
      .catch(() => null);
    // A move that fails changes nothing: the wait it would have started early comes at place().
    void this.ownDir
      .then((dir) => (dir === null ? undefined : moveProcess(process.pid, dir)))
      .catch(() => undefined);
  }

  /**
   * Moves the conmons of this berthd (those writing exits to `exitDir`) that are not in the
   * monitors' cgroup yet: monitors started by a berth before it had one would otherwise die with
   * berthd's cgroup. Returns their pids.
   */
  async adoptStrays(exitDir: string): Promise<number[]> {
    const name = this.name;
    if (name === null) return [];
    const mentioning = await processesMentioning(exitDir);
    // A node's mount table grows with its pods (netns pins, overlays, shm): read it once.
    const mounts = mentioning.length > 0 ? await readMountInfo() : [];
    // Checked side by side: start-up waits for this, and a node may run hundreds of monitors.
    const strays = await Promise.all(
      mentioning.map(async (pid) => {
        if (!(await isMonitorWritingTo(pid, exitDir))) return null;
        const memberships = await membershipsOf(pid, mounts).catch(() => null);
        if (memberships === null || memberships.every((m) => m.path === `/${name}`)) return null;
        return pid;
      }),
    );
    const adopted: number[] = [];
    for (const pid of strays) {
      if (pid === null) continue;
      // A conmon that exited meanwhile is no stray any more.
      const moved = await this.place(pid).then(
        () => true,
        async (err: unknown) => {
          if (await isMonitorWritingTo(pid, exitDir)) throw err;
          return false;
        },
      );
      if (moved) adopted.push(pid);
    }
    return adopted;
  }

  private targetDirs(): Promise<string[]> {
    const name = this.name;
    if (name === null) return Promise.resolve([]);
    this.dirs ??= membershipsOf('self')
      .then((memberships) => Promise.all(memberships.map((m) => ensureCgroup(m.mountPoint, name))))
      .catch((err: unknown) => {
        this.dirs = null;
        throw err;
      });
    return this.dirs;
  }
}

/** True when `pid` runs with `--exit-dir <exitDir>`: a conmon of the berthd owning that dir. */
async function isMonitorWritingTo(pid: number, exitDir: string): Promise<boolean> {
  const argv = (await commandLine(pid)) ?? [];
  return argv.some((arg, i) => arg === '--exit-dir' && argv[i + 1] === exitDir);
}
