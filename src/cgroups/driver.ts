/** How runc manages cgroups: by paths under each hierarchy, or through systemd units. */
export const CGROUP_DRIVERS = ['cgroupfs', 'systemd'] as const;
export type CgroupDriver = (typeof CGROUP_DRIVERS)[number];

/**
 * runc's linux.cgroupsPath for container `id`. cgroupfs takes a path under each hierarchy; systemd
 * takes "slice:prefix:name" and creates the scope itself, as runc's --systemd-cgroup expects.
 */
export function cgroupsPath(driver: CgroupDriver, parent: string, id: string): string {
  if (driver === 'systemd') return `${parent || 'system.slice'}:berth:${id}`;
  const base = parent ? (parent.startsWith('/') ? parent : `/${parent}`) : '/berth';
  return `${base.replace(/\/+$/, '')}/${id}`;
}
