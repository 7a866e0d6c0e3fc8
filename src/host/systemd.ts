/**
 * What berth asks the node's systemd itself (through systemctl, which talks D-Bus to PID 1), for
 * the systemd cgroup driver: which version it is, and whether a scope runc made for a container
 * ended in an OOM kill.
 *
 * Why the last one: on cgroup v2 conmon learns of an OOM kill by reading the container cgroup's
 * memory.events when it changes, but with the systemd driver systemd removes the scope's cgroup
 * as soon as the kill empties it, and conmon's read then finds it gone (measured in the Debian 13
 * VM: 3 exits of 16 reported as Error). systemd itself sees every OOM kill of its
 * units, but under its default for runc's scopes it only logs it, and the emptied scope ends
 * inactive and is collected at once; with OOMPolicy=stop it fails the scope with
 * Result=oom-kill, a failed unit it keeps until `runc delete` resets it (measured there).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { SliceControl, SystemdOptions } from '../cgroups/systemd.js';
import { run } from '../exec.js';

/** systemd learnt OOMPolicy= for scopes in version 253; older ones refuse the property. */
export const SCOPE_OOM_POLICY_SINCE = 253;

/** What the node's systemd can do for the systemd driver (cgroups/systemd.ts), probed. */
export async function probeSystemd(timeoutMs: number): Promise<SystemdOptions> {
  const version = await systemdVersion(timeoutMs);
  return { scopeOomPolicy: version !== null && version >= SCOPE_OOM_POLICY_SINCE, slices: SLICES };
}

/** Pod slices through systemctl; `--` ends its options, whatever the unit is named. */
const SLICES: SliceControl = {
  async start(slice, properties, timeoutMs) {
    await run('systemctl', ['start', '--', slice], { timeoutMs });
    await SLICES.setProperties(slice, properties, timeoutMs);
  },
  async setProperties(slice, properties, timeoutMs) {
    await run('systemctl', ['set-property', '--runtime', '--', slice, ...properties], { timeoutMs });
  },
  async remove(slice, timeoutMs) {
    await run('systemctl', ['stop', '--', slice], { timeoutMs });
    // Drops the drop-ins set-property wrote, so that nothing of the pod is left for systemd to load.
    await run('systemctl', ['revert', '--', slice], { timeoutMs });
  },
};

/** How long a scope may stay active after its container's exit, and how often to look. */
const SETTLE_MS = 5_000;
const POLL_MS = 50;

/** systemd's version number, from `systemctl --version`; null when it does not answer. */
export async function systemdVersion(timeoutMs: number): Promise<number | null> {
  try {
    const { stdout } = await run('systemctl', ['--version'], { timeoutMs });
    const m = /^systemd (\d+)/.exec(stdout);
    return m?.[1] === undefined ? null : Number(m[1]);
  } catch {
    return null;
  }
}

/**
 * Whether scope `unit` failed with Result=oom-kill. The container's exit can be seen before
 * systemd has handled the kill, so a scope still active (or on its way down) is looked at again
 * until it has settled, for at most SETTLE_MS. A unit systemd no longer has tells nothing.
 */
export async function scopeOomKilled(unit: string, timeoutMs: number): Promise<boolean> {
  const deadline = performance.now() + SETTLE_MS;
  for (;;) {
    const props = await unitProperties(unit, ['LoadState', 'ActiveState', 'Result'], timeoutMs);
    if (props.LoadState !== 'loaded') return false;
    if (props.ActiveState === 'failed' || props.ActiveState === 'inactive')
      return props.Result === 'oom-kill';
    if (performance.now() >= deadline) return false;
    await sleep(POLL_MS);
  }
}

async function unitProperties(
  unit: string,
  names: readonly string[],
  timeoutMs: number,
): Promise<Record<string, string>> {
  const { stdout } = await run('systemctl', ['show', `--property=${names.join(',')}`, '--', unit], {
    timeoutMs,
  });
  const props: Record<string, string> = {};
  for (const line of stdout.split('\n')) {
    const eq = line.indexOf('=');
    if (eq > 0) props[line.slice(0, eq)] = line.slice(eq + 1);
  }
  return props;
}
