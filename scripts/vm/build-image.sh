#!/usr/bin/env bash
# Builds the Debian 13 (trixie) node VM the VM suites run in, from Debian's packages only:
# debootstrap from the mirror this machine already uses (the host gets no trixie apt source and is
# not upgraded), then an ext4 disk image made from the tree (mkfs.ext4 -d: no loop mount). The
# image, kernel and initrd are cached under $BERTH_VM_CACHE (default /var/cache/berth-vm) in a dir
# named by the hash of this recipe, so they are rebuilt only when the recipe changes.
# Prints the cache dir on stdout when done. Needs root, debootstrap and e2fsprogs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"

say() { printf 'vm-image: %s\n' "$*" >&2; }
die() {
  printf 'vm-image: error: %s\n' "$*" >&2
  exit 1
}

[[ $(id -u) -eq 0 ]] || die "run as root: debootstrap needs it"
for bin in debootstrap mkfs.ext4 sha256sum; do
  command -v "$bin" >/dev/null 2>&1 || die "$bin is missing (apt-get install debootstrap e2fsprogs)"
done

# What a node has: the kernel, systemd as PID 1, the runtimes and their monitor, CNI plugins,
# AppArmor, criu, node for berthd; then what the tests use on the host too (scripts/setup.sh), and
# gcc, with which the seccomp tests build their syscall probe; then what a Kubernetes node and its
# control plane need besides their binaries (shared from the host, scripts/vm/run.sh): etcd,
# conntrack for kube-proxy, xz for the binaries' own unpack script.
packages=(
  linux-image-amd64 systemd systemd-sysv udev dbus kmod
  runc crun conmon catatonit containernetworking-plugins
  iproute2 iptables apparmor apparmor-utils criu socat nodejs
  util-linux attr zstd procps
  docker-registry skopeo busybox-static apache2-utils openssl
  gcc libc6-dev
  etcd-server conntrack xz-utils
)
# Today's runtimes, from Debian forky (the release after trixie; its runc and crun need glibc
# 2.38, which trixie has): crun with the one library trixie lacks replaces trixie's crun, while
# forky's runc goes beside trixie's (one package name cannot be installed twice): its binary is
# taken out of the .deb into /opt/runc-1.3, outside PATH: trixie's 1.1.15 at /usr/sbin/runc stays
# the default, since with 1.3 as the default stats.test.ts failed in the VM (runc 1.3 converts cpu
# shares 1024 to weight 100 where 1.1 gave 39), and 1.3 is a second handler
# (runtime-binaries.test.ts) until the VM suites are made to pass with it.
forky_installs=(crun libblake3-0)
image_size=6G

# The mirror this machine's own apt uses; trixie lives on the same one.
mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[[ -n $mirror ]] || mirror=$(awk '/^deb / { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
[[ -n $mirror ]] || die "no Debian mirror found in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"

recipe=$(cat build-image.sh guest/berth-vm-job guest/berth-vm-job.service | sha256sum | cut -c1-16)
cache_root=${BERTH_VM_CACHE:-/var/cache/berth-vm}
out="$cache_root/$recipe"
if [[ -f $out/done ]]; then
  touch "$out/done"
  echo "$out"
  exit 0
fi

started=$(date +%s)
work="$cache_root/build.$$"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
say "debootstrap trixie from $mirror (${#packages[@]} packages and their dependencies)"
include=$(
  IFS=,
  echo "${packages[*]}"
)
debootstrap --variant=minbase --include="$include" trixie "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  die "debootstrap failed: $(tail -5 "$work/debootstrap.log")"

say "configuring the guest"
root="$work/root"
echo berth-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost berth-vm\n::1 localhost\n' >"$root/etc/hosts"
printf '/dev/vda / ext4 rw,errors=remount-ro 0 1\n' >"$root/etc/fstab"
# No network but loopback: the VM has no NIC, and nothing waits for one.
chroot "$root" systemctl mask systemd-networkd-wait-online.service >/dev/null 2>&1 || true
install -m 0755 guest/berth-vm-job "$root/usr/local/sbin/berth-vm-job"
install -m 0644 guest/berth-vm-job.service "$root/etc/systemd/system/berth-vm-job.service"
chroot "$root" systemctl enable berth-vm-job.service >/dev/null 2>&1
# The 9p modules the job mounts the host's dirs with, loaded before the job starts.
printf '9p\n9pnet_virtio\n' >"$root/etc/modules-load.d/berth-vm.conf"
# docker-registry's and etcd's own services would start at boot; the tests start their own.
chroot "$root" systemctl disable docker-registry.service etcd.service >/dev/null 2>&1 || true

say "adding forky's runc and crun"
# Pinned below trixie's 500, so that nothing comes from forky but what is named by release here.
printf 'deb %s forky main\n' "$mirror" >"$root/etc/apt/sources.list.d/forky.list"
printf 'Package: *\nPin: release n=forky\nPin-Priority: 100\n' >"$root/etc/apt/preferences.d/forky"
# The mirror may be a snapshot older than forky's Release file's Valid-Until (a testing suite's
# lasts a week): its signature is still checked, its age is not.
chroot "$root" apt-get update -q -o Acquire::Check-Valid-Until=false >"$work/apt.log" 2>&1 || die "apt-get update failed: $(tail -5 "$work/apt.log")"
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  "${forky_installs[@]/%//forky}" >>"$work/apt.log" 2>&1 ||
  die "installing ${forky_installs[*]} from forky failed: $(tail -5 "$work/apt.log")"
chroot "$root" sh -c 'cd /tmp && apt-get download -q runc/forky' >>"$work/apt.log" 2>&1 ||
  die "downloading forky's runc failed: $(tail -5 "$work/apt.log")"
debs=("$root"/tmp/runc_*.deb)
dpkg-deb -x "${debs[0]}" "$work/runc-forky"
install -D -m 0755 "$work/runc-forky/usr/sbin/runc" "$root/opt/runc-1.3/runc"
rm -f "$root"/tmp/runc_*.deb
# The lists only served this build: the VM has no network to refresh them from.
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/*
runtimes=$(
  for bin in /opt/runc-1.3/runc /usr/sbin/runc /usr/bin/crun; do
    printf '%s: %s\n' "$bin" "$(chroot "$root" "$bin" --version | head -1)"
  done
)
say "runtimes: $(echo "$runtimes" | paste -sd ';')"
rm -f "$root/etc/machine-id" && touch "$root/etc/machine-id"

say "making the disk image ($image_size)"
mkdir -p "$work/out"
cp "$root"/boot/vmlinuz-* "$work/out/vmlinuz"
cp "$root"/boot/initrd.img-* "$work/out/initrd.img"
chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' >"$work/out/packages.txt"
echo "$runtimes" >"$work/out/runtimes.txt"
mkfs.ext4 -q -L berth-vm -d "$root" "$work/out/root.ext4" "$image_size" >&2
echo "$mirror" >"$work/out/mirror"
rm -rf "$out"
mv "$work/out" "$out"
date +%s >"$out/done"
# Images of other recipes not used for a week go: each is a gigabyte, and a recipe change leaves
# the old one behind. A recent one stays, for a checkout of another branch still on it.
find "$cache_root" -mindepth 2 -maxdepth 2 -name done -mtime +7 -printf '%h\0' | xargs -0 -r rm -rf --
say "built $out in $(($(date +%s) - started)) s"
echo "$out"
