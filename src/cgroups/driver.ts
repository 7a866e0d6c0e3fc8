/** How runc manages cgroups: by paths under each hierarchy, or through systemd units. */
export const CGROUP_DRIVERS = ['cgroupfs', 'systemd'] as const;
export type CgroupDriver = (typeof CGROUP_DRIVERS)[number];
