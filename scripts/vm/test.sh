#!/usr/bin/env bash
# `npm run test:vm -- <test files>`: runs built test files (dist/test/...js, or their test/...ts
# sources) as root in the Debian 13 node VM (scripts/vm/run.sh), each under a bound of its own
# (scripts/vm/guest/files.sh), with the node test runner's spec output streamed back. Builds the
# project on the host first; the VM shares the checkout read-only.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

die() {
  printf 'test:vm: error: %s\n' "$*" >&2
  exit 1
}

(($# > 0)) || die "name the test files: npm run test:vm -- test/e2e/stats.test.ts"
files=()
for arg in "$@"; do
  case $arg in
    test/*.ts) arg="dist/${arg%.ts}.js" ;;
  esac
  files+=("$arg")
done
bash scripts/vm/setup.sh || die "debootstrap and qemu are needed (see above)"
npm run --silent build
for file in "${files[@]}"; do
  [[ -f $file ]] || die "no such built test file: $file"
done

job=$(mktemp /tmp/berth-vm-tests.XXXXXX.sh)
trap 'rm -f "$job"' EXIT
{
  echo 'set -e'
  echo 'echo "guest: $(uname -r), cgroup $(stat -fc %T /sys/fs/cgroup), node $(node --version)"'
  # The default runtime is the first runc in PATH: trixie's; forky's newer one is at /opt/runc-1.3.
  echo 'echo "guest: $(command -v runc): $(runc --version | head -n 1); $(crun --version | head -n 1)"'
  # Each file its own node --test process, under a bound: one that hangs cannot take the others.
  # bash reads a script as it runs it: a copy, so that an edit of the checkout meanwhile is not read.
  echo 'cp scripts/vm/guest/files.sh /tmp/berth-vm-files.sh'
  # In the job dir, which outlives a crashed guest: where a second boot goes on from.
  echo 'export BERTH_VM_FILES_STATE=/mnt/job/files-state'
  printf 'exec bash /tmp/berth-vm-files.sh'
  printf ' %q' "${files[@]}"
  echo
} >"$job"
exec bash scripts/vm/run.sh "$job" "${BERTH_VM_TIMEOUT_S:-1800}"
