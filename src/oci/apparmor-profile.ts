/**
 * berth's default AppArmor profile, the one RuntimeDefault (and a request naming no profile)
 * confines a container with where the host has AppArmor. It grants what the container's
 * capabilities, seccomp filter and mounts already decide (files, network, capabilities) and takes
 * away what reaches past the container: writes to the kernel's knobs in /proc and /sys, mounts,
 * and signals and ptrace between the container and processes outside its profile.
 *
 * ABI 3.0 is pinned: from 4.0 on, a `network` rule no longer covers unix sockets, and the 3.0 ABI
 * is what both Debian 12's and 13's parsers know. No include is used, so the text is all of it.
 */

/** The name containers see in /proc/self/attr/current; one profile for every container. */
export const DEFAULT_APPARMOR_PROFILE = 'berth-default';

/**
 * Labels that may signal a container's processes: runc and crun carry profiles of their own
 * (flagged unconfined) on current distributions, conmon may too; berthd, kubelet and a root shell
 * on the host are "unconfined".
 */
const MANAGERS = ['unconfined', 'runc', 'crun', 'conmon'];

export function defaultAppArmorProfile(name: string = DEFAULT_APPARMOR_PROFILE): string {
  const lines = [
    'abi <abi/3.0>,',
    '',
    `profile ${name} flags=(attach_disconnected,mediate_deleted) {`,
    '  file,',
    '  network,',
    '  capability,',
    '',
    ...MANAGERS.map((peer) => `  signal (receive) peer=${peer},`),
    '  # Within the container (and between containers under this profile) as the kernel allows.',
    `  signal (send, receive) peer=${name},`,
    `  ptrace (trace, read, tracedby, readby) peer=${name},`,
    '',
    '  # runc mounted everything before the profile applied; nothing after it may change the tree',
    '  # (an unmount would uncover what masked paths hide).',
    '  deny mount,',
    '  deny umount,',
    '  deny pivot_root,',
    '',
    '  # /proc: files directly in it (sysrq-trigger, kmsg...) and every directory that is not a',
    "  # process's own (sys, fs, irq, bus, driver...) take no writes.",
    '  deny /proc/* wl,',
    '  deny /proc/[^0-9]*/** wl,',
    '  deny /proc/[0-9]*[^0-9/]*/** wl,',
    '  deny /proc/{kcore,kmsg,sysrq-trigger} rwlkx,',
    '',
    '  # /sys takes no writes but to the cgroup filesystem (read-only unless the container may).',
    '  deny /sys/{[^f],f[^s],fs/[^c],fs/c[^g],fs/cg[^r]}*/** wlk,',
    '  deny /sys/firmware/** rwlkx,',
    '  deny /sys/kernel/security/** rwlkx,',
    '  deny /sys/devices/virtual/powercap/** rwlkx,',
    '}',
    '',
  ];
  return lines.join('\n');
}
