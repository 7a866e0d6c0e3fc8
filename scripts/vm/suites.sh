#!/usr/bin/env bash
# The VM part of `npm test`: the test files of scripts/vm/suites.txt, run in the Debian 13 VM
# (cgroup v2, AppArmor), within a bound that leaves CI's 90 minutes room for the host suite.
# Where the VM cannot be had (no root to install qemu, no mirror to build the image from) it says
# why and skips, exiting 0; a failure of the tests themselves fails. BERTH_VM_SUITES=skip skips too.
#
# Two guests, never more than two loads on the machine's two cores. The first guest's files start
# at once, beside the host suite (scripts/test.sh). The runner's own tests and then the second
# guest's files start when BERTH_VM_LATER_GO names a file that exists, which scripts/test.sh
# makes when the host suite is done (at once without it), and take a lock of their own
# (scripts/vm/run.sh, BERTH_VM_LOCK). Runner tests, then all files in one guest, made the VM part
# 58 minutes here and ran out its 70-minute bound on CI. The first guest's output is streamed; the
# second's follows it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

say() { printf 'test: %s\n' "$*"; }
skip() {
  say "VM suites skipped: $*"
  exit 0
}

[[ ${BERTH_VM_SUITES:-} != skip ]] || skip "BERTH_VM_SUITES=skip"
[[ $(id -u) -eq 0 ]] || skip "not root: building and booting the VM image needs root"
bash scripts/vm/setup.sh || skip "debootstrap and qemu could not be installed (see above)"

# 70 minutes, runner tests and boot included: a bound for a hang. `npm test` runs this beside the
# host suite, after its setup and check (a few minutes on a fresh machine), so the whole run stays
# within CI's 90 even when this part hangs.
bound_s=${BERTH_VM_SUITES_BOUND_S:-4200}
started=$(date +%s)
left_s() { echo $((bound_s - $(date +%s) + started)); }
say "building or reusing the Debian 13 VM image"
bash scripts/vm/build-image.sh >/dev/null || skip "the VM image could not be built (see above)"
say "VM image ready after $(($(date +%s) - started)) s"

# suites.txt: "<guest> <test file>" lines, guest "first" or "later".
first=() later=()
while read -r guest file rest; do
  [[ -n $guest && $guest != \#* ]] || continue
  [[ -n $file && -z $rest ]] || skip "scripts/vm/suites.txt: '$guest $file $rest' is not '<guest> <test file>'"
  case $guest in
    first) first+=("$file") ;;
    later) later+=("$file") ;;
    *) skip "scripts/vm/suites.txt: guest '$guest' is neither first nor later" ;;
  esac
done <scripts/vm/suites.txt
((${#first[@]} > 0)) || skip "scripts/vm/suites.txt lists no test files for the first guest"

# Tests the host suite runs to the same effect skip there (test/harness/skip.ts, hostProves).
export BERTH_TEST_VM_PART=1
# Built by scripts/setup.sh, which `npm test` runs before the host suite: scripts/vm/test.sh
# builds no more, which would rewrite dist/ under the other guest's runner.
export BERTH_VM_BUILT=1

later_log=$(mktemp /tmp/berth-vm-later.XXXXXX)
export BOUND_END=$((started + bound_s))
# A session of its own, so that the end of the bound can stop all of it.
BERTH_VM_LOCK=/run/berth-vm-later.lock setsid bash -c '
  set -uo pipefail
  say() { printf "test: %s\n" "$*"; }
  if [[ -n ${BERTH_VM_LATER_GO:-} ]]; then
    say "the second guest waited for the host suite to end"
    until [[ -e $BERTH_VM_LATER_GO ]]; do
      kill -0 "$PPID" 2>/dev/null || exit 1
      sleep 2
    done
  fi
  code=0
  # A runner that cannot be trusted to end a crashed guest would let one hang the whole bound.
  say "testing the VM runner (scripts/vm/run.sh)"
  node --test --test-reporter=spec --test-concurrency=1 dist/test/vm/*.test.js || code=$?
  if (($# > 0)); then
    say "running $# test files in the second guest: $*"
    BERTH_VM_TIMEOUT_S=$((BOUND_END - $(date +%s))) bash scripts/vm/test.sh "$@" || code=$?
  fi
  exit "$code"' later "${later[@]}" >"$later_log" 2>&1 &
later_pid=$!
trap 'kill -- "-$later_pid" 2>/dev/null || true; rm -f "$later_log"' EXIT
# A stop from outside (npm test ending early, a signal) takes the second guest with it.
trap 'exit 143' TERM INT HUP

code=0
say "running ${#first[@]} test files in the first guest: ${first[*]}"
BERTH_VM_TIMEOUT_S=$(left_s) bash scripts/vm/test.sh "${first[@]}" || code=$?
say "the first guest's files exited ${code} after $(($(date +%s) - started)) s"

# The second guest within the same bound.
while kill -0 "$later_pid" 2>/dev/null && (($(left_s) > 0)); do sleep 5; done
later_code=0
if kill -0 "$later_pid" 2>/dev/null; then
  say "the second guest had not ended within the bound of ${bound_s} s; stopping it"
  kill -- "-$later_pid" 2>/dev/null || true
  later_code=124
fi
wait "$later_pid" || later_code=$?
say "the runner's tests and the second guest's files, which ran beside the first, exited ${later_code}:"
cat "$later_log"
((later_code == 0)) || code=$later_code
say "VM suites exited ${code} after $(($(date +%s) - started)) s (image build and boot included)"
exit "$code"
