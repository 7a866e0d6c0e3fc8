#!/bin/sh
# The job's side in the VM, copied into the job dir by scripts/vm/run.sh: mounts the checkout and
# the dirs it reaches out of itself (job/shares: "<tag> <guest path>" lines), runs the job's run.sh
# as root in the checkout, and leaves its exit code in job/exit; the host reads job/output.log.
# job/started, written first, tells the host the boot got this far: a run is repeated only before.
set -u
: >/mnt/job/started
fail() {
  echo "berth-vm-job: $*" >>/mnt/job/output.log
  echo 125 >/mnt/job/exit
  exit 1
}
mkdir -p /opt/berth
# The host's copy of the checkout on the second disk (job/checkout-disk says it made one), else
# the checkout's 9p share. noload: the disk is read-only, so ext4 replays nothing.
if [ -e /mnt/job/checkout-disk ]; then
  mount -t ext4 -o ro,noload /dev/vdb /opt/berth || fail 'the checkout disk (/dev/vdb) did not mount'
else
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576,ro berth /opt/berth ||
    fail 'the checkout share did not mount'
fi
while read -r tag path; do
  mkdir -p "$path"
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576,ro "$tag" "$path" ||
    fail "the $tag share did not mount at $path"
done </mnt/job/shares
cd /opt/berth
# What the host sets for the job's environment (job/env: KEY=value lines).
set -a
. /mnt/job/env
set +a
sh /mnt/job/run.sh >>/mnt/job/output.log 2>&1
echo $? >/mnt/job/exit.tmp
mv /mnt/job/exit.tmp /mnt/job/exit
