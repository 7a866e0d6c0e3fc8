#!/usr/bin/env bash
# Installs what is missing, checks types, lint and formatting, then runs the whole suite: on this
# host, then the VM suites in a Debian 13 VM (scripts/vm/suites.sh).
# Exits non-zero when anything fails. The e2e tests need root.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf 'test: %s\n' "$*"; }
die() {
  printf 'test: error: %s\n' "$*" >&2
  exit 1
}

test_started=$(date +%s)
bash scripts/setup.sh

# The cluster suites' Kubernetes binaries: $KUBERNETES_BIN, or those of ../shared/tools unpacked
# (once, checked against their sums). Without either, those suites skip and say why.
if [[ -z ${KUBERNETES_BIN:-} && -x ../shared/tools/kubernetes/unpack ]]; then
  if KUBERNETES_BIN=$(../shared/tools/kubernetes/unpack); then
    export KUBERNETES_BIN
    say "Kubernetes binaries: $KUBERNETES_BIN"
  else
    say "../shared/tools/kubernetes/unpack failed; the cluster suites will skip"
  fi
fi

# The VM part (scripts/vm/suites.sh) runs beside the host suite: on 2 cores the emulated guest and
# the host suite each take about one, and one after the other they were 83 minutes of CI's 90.
# Its setup and image build start now (on a fresh machine about five minutes of downloads and
# unpacking); its tests once `npm run check` has passed, since check regenerates
# src/cri/generated, which the VM's copy of the checkout (scripts/vm/run.sh) must not catch
# half-written. Its output goes to a file, printed once the host suite is done. Failures of the
# setup or build here are tried again by suites.sh, which says why it skips.
vm_part=''
vm_log=$(mktemp /tmp/berth-vm-part.XXXXXX)
vm_go=$(mktemp -u /tmp/berth-vm-go.XXXXXX)
if [[ ${BERTH_VM_SUITES:-} != skip && $(id -u) -eq 0 ]]; then
  # A session of its own, so that a run that stops early (a failed check) can end all of it.
  BERTH_VM_GO=$vm_go setsid bash -c '
    bash scripts/vm/setup.sh >/dev/null 2>&1 && bash scripts/vm/build-image.sh >/dev/null 2>&1
    while [[ ! -e $BERTH_VM_GO ]]; do
      kill -0 "$PPID" 2>/dev/null || exit 1
      sleep 1
    done
    exec bash scripts/vm/suites.sh' >"$vm_log" 2>&1 &
  vm_part=$!
fi
stop_vm_part() {
  [[ -z $vm_part ]] || kill -- "-$vm_part" 2>/dev/null || true
}
trap 'stop_vm_part; rm -f "$vm_log" "$vm_go"' EXIT

say "npm run check (tsc, eslint, prettier)"
npm run check
[[ -z $vm_part ]] || : >"$vm_go"

[[ -d dist/test ]] || die "dist/test does not exist: the build produced no tests"
# dist/test/vm holds the VM runner's own tests, which scripts/vm/suites.sh runs once it has the image.
mapfile -t tests < <(find dist/test -name '*.test.js' -not -path 'dist/test/vm/*' | sort)
((${#tests[@]} > 0)) || die "no *.test.js files under dist/test"

[[ $(id -u) -eq 0 ]] || say "warning: not root; tests that need root will fail"
# Two at a time: the unit tests and the e2e files of scripts/concurrent.txt, which touch nothing of
# the machine another file does. Then one at a time: the e2e files that share host resources
# (the host's netns dir and iptables, critest's daemon, systemd units, a filled machine).
declare -A listed
while read -r source; do
  built="dist/${source%.ts}.js"
  [[ -f $built ]] || die "scripts/concurrent.txt names $source, which was not built to $built"
  listed[$built]=1
done < <(grep -v -e '^#' -e '^[[:space:]]*$' scripts/concurrent.txt)
concurrent=() sequential=()
for file in "${tests[@]}"; do
  if [[ $file == dist/test/unit/* || -n ${listed[$file]:-} ]]; then
    concurrent+=("$file")
  else
    sequential+=("$file")
  fi
done
say "running ${#tests[@]} test files: ${#concurrent[@]} two at a time, then ${#sequential[@]} one at a time"

# Each group's runner prints its spec output and summary; its summary lines also go to an events
# file (test/harness/progress-reporter.ts), summed into one summary for the host suite below.
events=$(mktemp -d /tmp/berth-test-summary.XXXXXX)
# Each group's spec output is kept too: its failures are printed again at the very end, where a
# CI log cut to its tail still shows them after the VM part's output.
outputs=$(mktemp -d /tmp/berth-test-output.XXXXXX)
trap 'stop_vm_part; rm -rf "$events" "$outputs" "$vm_log" "$vm_go"' EXIT
keys=(tests suites pass fail cancelled skipped todo)
host=0
run_group() {
  local name=$1 concurrency=$2
  shift 2
  (($# > 0)) || return 0
  local code=0
  node --test --test-concurrency="$concurrency" \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=./dist/test/harness/progress-reporter.js \
    --test-reporter-destination="$events/$name" "$@" | tee "$outputs/$name" || code=$?
  ((code == 0)) || host=$code
}
summary_count() {
  awk -F '\t' -v key="$2" '
    $1 == "note" && $2 == "0" && split($3, w, " ") == 2 && w[1] == key && w[2] ~ /^[0-9]+$/ { n = w[2] }
    END { print n + 0 }
  ' "$1"
}
host_started=$(date +%s)
run_group concurrent 2 "${concurrent[@]}"
run_group sequential 1 "${sequential[@]}"
say "host suite: $(($(date +%s) - host_started)) s; both runs summed:"
for key in "${keys[@]}"; do
  sum=0
  for file in "$events"/*; do sum=$((sum + $(summary_count "$file" "$key"))); done
  printf '# %s %s\n' "$key" "$sum"
done

# Then the VM part, which ran beside the host suite: what needs cgroup v2 and AppArmor, which this
# host may not have, in the Debian 13 VM. Its output so far, then the rest as it comes.
vm=0
if [[ -n $vm_part ]]; then
  say "the VM part (scripts/vm/suites.sh), which ran beside the host suite:"
  tail -n +1 --pid="$vm_part" -f "$vm_log"
  wait "$vm_part" || vm=$?
  vm_part=''
else
  bash scripts/vm/suites.sh || vm=$?
fi
if ((host != 0)); then
  say "the host suite's failures again, as its runners reported them:"
  for name in concurrent sequential; do
    if [[ -f $outputs/$name ]]; then
      sed -n '/^✖ failing tests:/,$p' "$outputs/$name" | head -n 300 || true
    fi
  done
fi
say "host suite exited ${host}, VM suites exited ${vm}; npm test took $(($(date +%s) - test_started)) s"
((host == 0 && vm == 0))
