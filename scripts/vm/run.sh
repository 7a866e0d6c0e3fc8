#!/usr/bin/env bash
# Runs a shell script as root in the Debian 13 node VM and exits with its exit code:
#   scripts/vm/run.sh <script> [timeout-seconds]
# The VM boots the cached image (scripts/vm/build-image.sh) with systemd as PID 1, cgroup v2 and
# AppArmor, under qemu: KVM when /dev/kvm is there, software emulation otherwise, 2 vCPUs. The
# disk is a throwaway snapshot, so every run starts from the same image. It has no NIC: nothing in
# it reaches any network but its own loopback and the namespaces its tests make. The checkout is
# at /opt/berth, read-only, as a copy on a disk of its own (or a 9p share; see checkout_disk); the
# script runs there and its output is streamed here.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

say() { printf 'vm: %s\n' "$*" >&2; }
die() {
  printf 'vm: error: %s\n' "$*" >&2
  exit 1
}

script=${1:?usage: scripts/vm/run.sh <script> [timeout-seconds]}
timeout_s=${2:-1800}
[[ -f $script ]] || die "no such script: $script"
command -v qemu-system-x86_64 >/dev/null 2>&1 || die "qemu-system-x86_64 is missing (apt-get install qemu-system-x86)"

# One VM at a time on this machine: two emulated 2-vCPU guests on a 2-core host starve each other
# until their tests' hang bounds expire. A second run waits here for the first to end.
exec 9>/run/berth-vm.lock
if ! flock -n 9; then
  say "another VM run holds /run/berth-vm.lock; waiting for it"
  flock 9
fi

image=$(bash scripts/vm/build-image.sh)
job=$(mktemp -d /tmp/berth-vm-job.XXXXXX)
# A run stopped from outside (a signal, a CI timeout) takes its VM with it: qemu holds the lock.
qemu=
cleanup() {
  [[ -z $qemu ]] || kill "$qemu" 2>/dev/null || true
  rm -rf "$job"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP
cp "$script" "$job/run.sh"
cp scripts/vm/guest/job.sh "$job/guest.sh"
: >"$job/output.log"

# Dirs the checkout reaches out of itself, shared read-only where the checkout at /opt/berth finds
# them in the guest: a git worktree's node_modules symlinked to another checkout's (at the link's
# target), and ../shared/tools with crictl and critest (at /opt/shared/tools). The guest mounts
# each line of job/shares: "<tag> <guest path>".
extra_shares=()
: >"$job/shares"
share() {
  local tag=$1 host_path=$2 guest_path=$3
  printf '%s %s\n' "$tag" "$guest_path" >>"$job/shares"
  extra_shares+=(-virtfs "local,path=$host_path,mount_tag=$tag,security_model=none,readonly=on,id=$tag")
}
# The checkout itself goes in as a read-only ext4 disk (/dev/vdb), not a 9p share: node loads
# dist/ and node_modules/ file by file, and over 9p importing the daemon took 15.5 s in the
# emulated guest against 5.5 s from a local filesystem, paid by every berthd and node --test
# process. The disk is a copy of the checkout as this run starts (.git left out), made from hard
# links in a few seconds; node_modules that is a symlink to another checkout's goes in as the
# dir it points at. Where hard links cannot be made (another filesystem), or with
# BERTH_VM_CHECKOUT=9p (to compare), the 9p share it was.
checkout_disk() {
  local tree=$job/checkout entry modules files kib
  mkdir "$tree" || return 1
  for entry in * .[!.]*; do
    [[ -e $entry && $entry != .git ]] || continue
    if [[ $entry == node_modules && -L $entry ]]; then
      modules=$(realpath -e node_modules) || return 1
      cp -al "$modules" "$tree/node_modules" || return 1
    else
      cp -al "$entry" "$tree/" || return 1
    fi
  done
  files=$(find "$tree" | wc -l)
  kib=$(du -s --apparent-size --block-size=1K "$tree" | cut -f1)
  # Room for ext4's own blocks and a block per small file; an inode for every entry.
  mkfs.ext4 -q -F -O ^has_journal -m 0 -N $((files * 2 + 1024)) -L berth -d "$tree" \
    "$job/checkout.ext4" "$((kib * 3 / 2 + files * 4 + 65536))K" || return 1
  rm -rf "$tree"
}
checkout_drive=()
if [[ ${BERTH_VM_CHECKOUT:-disk} != 9p ]] && checkout_disk; then
  checkout_drive=(-drive "file=$job/checkout.ext4,format=raw,if=virtio,readonly=on")
  : >"$job/checkout-disk"
else
  [[ ${BERTH_VM_CHECKOUT:-disk} == 9p ]] ||
    say "the checkout could not be copied to a disk; sharing it over 9p (slower in the guest)"
  rm -rf "$job/checkout" "$job/checkout.ext4"
  modules=$(realpath -e node_modules 2>/dev/null || true)
  if [[ -n $modules && $modules != "$PWD"/* ]]; then share modules "$modules" "$modules"; fi
fi
if [[ -d ../shared/tools ]]; then share tools "$(realpath -e ../shared/tools)" /opt/shared/tools; fi
# The Kubernetes binaries: $KUBERNETES_BIN, or those of ../shared/tools unpacked here (once; an
# emulated guest would take minutes to unpack them on every run), shared where the guest's
# KUBERNETES_BIN then points.
kube_bin=${KUBERNETES_BIN:-}
if [[ -z $kube_bin && -x ../shared/tools/kubernetes/unpack ]]; then
  kube_bin=$(../shared/tools/kubernetes/unpack) || say "../shared/tools/kubernetes/unpack failed; the guest gets no Kubernetes binaries"
fi
guest_env=()
if [[ -n $kube_bin && -d $kube_bin ]]; then
  share kubernetes "$(realpath -e "$kube_bin")" /opt/kubernetes
  guest_env+=(KUBERNETES_BIN=/opt/kubernetes)
fi
# npm test's VM part skips what the host suite proves (test/harness/skip.ts, hostProves).
[[ -z ${BERTH_TEST_VM_PART:-} ]] || guest_env+=("BERTH_TEST_VM_PART=$BERTH_TEST_VM_PART")

# KVM only where the CPU offers virtualization to this machine: a /dev/kvm node without it (a
# nested guest) starts, then stops at the first emulation failure.
accel=${BERTH_VM_ACCEL:-tcg}
if [[ -z ${BERTH_VM_ACCEL:-} && -w /dev/kvm ]] && grep -qE '\b(vmx|svm)\b' /proc/cpuinfo; then
  accel=kvm
fi
# Emulated, everything in the guest runs several times slower than on the host: the tests' hang
# bounds stretch by this factor there (test/harness/bounds.ts).
scale=1
[[ $accel == kvm ]] || scale=4
printf 'BERTH_TEST_BOUND_SCALE=%s\n' "${BERTH_TEST_BOUND_SCALE:-$scale}" >"$job/env"
((${#guest_env[@]} == 0)) || printf '%s\n' "${guest_env[@]}" >>"$job/env"
# A guest kernel that panics reboots at once (panic=-1), which -no-reboot turns into qemu's exit:
# a crash ends the run with its console instead of idling until the timeout. Seen once in CI: an
# int3 oops in sched_clock_cpu, 3 s into an emulated boot, and a panicked guest that sat out the
# rest of the hour. no_timer_check: an emulated guest on a busy host is too slow for the boot's
# check that the timer ticks through the IO-APIC ("IO-APIC + timer doesn't work!", a panic; two of
# three boots while both host cores were busy, measured). BERTH_VM_APPEND adds to the kernel's
# command line (debugging, the runner's tests).
qemu_args=(
  -machine q35 -accel "$accel" -cpu max -smp 2 -m 4096 -nodefaults -no-reboot -display none
  -nic none
  -kernel "$image/vmlinuz" -initrd "$image/initrd.img"
  -append "root=/dev/vda rw console=ttyS0 quiet systemd.show_status=0 apparmor=1 security=apparmor panic=-1 no_timer_check ${BERTH_VM_APPEND:-}"
  -drive "file=$image/root.ext4,format=raw,if=virtio,snapshot=on"
  -virtfs "local,path=$job,mount_tag=job,security_model=none,id=job"
  -virtfs "local,path=$PWD,mount_tag=berth,security_model=none,readonly=on,id=berth"
  "${checkout_drive[@]}"
  "${extra_shares[@]}"
  -serial "file:$job/console.log"
)
# A boot that fails before the job starts (the guest writes job/started first) costs seconds and
# says nothing about berth: it is tried again, up to BERTH_VM_BOOT_TRIES boots in all. A boot
# that has not started the job within BERTH_VM_BOOT_BOUND_S (about 25 s emulated, measured) is
# taken for hung. Once the job has started, the run is never repeated, with one exception: a job
# that keeps a record of how far it got (job/resumable: scripts/vm/guest/files.sh) and whose guest
# crashed gets one more boot, in which it goes on from there. An emulated guest's kernel has
# panicked mid-run (in the scheduler, 213 s in, with both host cores busy) where nothing berth
# did was at fault; a second crash ends the run.
tries=${BERTH_VM_BOOT_TRIES:-3}
resumed=0
boot_bound_s=${BERTH_VM_BOOT_BOUND_S:-300}
started=$(date +%s)
deadline=$((started + timeout_s))
for ((try = 1; ; try++)); do
  rm -f "$job/started" "$job/exit" "$job/resumable"
  # What the job wrote in an earlier boot has been shown already.
  shown=$(stat -c %s "$job/output.log" 2>/dev/null || echo 0)
  left=$((deadline - $(date +%s)))
  ((left > 0)) || left=1
  say "booting $image ($accel, 2 vCPUs) for $script (boot $try of $tries)"
  booted=$(date +%s)
  timeout --kill-after=10 "$left" qemu-system-x86_64 "${qemu_args[@]}" &
  qemu=$!
  # The job's output, as the VM writes it into the shared dir.
  tail -c +$((shown + 1)) -F --pid="$qemu" "$job/output.log" 2>/dev/null &
  while [[ ! -f $job/started ]] && kill -0 "$qemu" 2>/dev/null; do
    if (($(date +%s) - booted >= boot_bound_s)); then
      say "the job had not started ${boot_bound_s} s into the boot; stopping the VM"
      kill "$qemu" 2>/dev/null || true
      break
    fi
    sleep 1
  done
  qemu_code=0
  wait "$qemu" || qemu_code=$?
  qemu=
  sleep 0.2
  [[ ! -f $job/exit ]] || break
  if [[ -f $job/started ]]; then
    if ((qemu_code == 124)); then
      say "the job had no exit code after ${timeout_s} s; the VM was stopped. Its console:"
      tail -n 40 "$job/console.log" >&2 || true
      exit 124
    fi
    say "the VM stopped without the job's exit code after $(($(date +%s) - started)) s; its console:"
    tail -n 40 "$job/console.log" >&2 || true
    if [[ -f $job/resumable ]] && ((resumed == 0)) && (($(date +%s) < deadline)); then
      resumed=1
      say "the job recorded how far it got: booting once more for it to go on from there"
      continue
    fi
    exit 124
  fi
  say "boot $try of $tries did not start the job; its console:"
  tail -n 40 "$job/console.log" >&2 || true
  if ((try >= tries)) || (($(date +%s) >= deadline)); then
    say "no boot started the job; giving up"
    exit 124
  fi
done
code=$(cat "$job/exit")
say "job exited $code after $(($(date +%s) - started)) s (boot included)"
exit "$code"
