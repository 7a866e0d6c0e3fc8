#!/usr/bin/env bash
# In the VM, from the checkout (scripts/vm/test.sh writes the job that calls it):
#   bash scripts/vm/guest/files.sh <built test file>...
# Runs each file as its own `node --test` process under a bound, so that a file that hangs is
# killed and reported and the next one still runs. After a file that failed or was killed it
# shows what was running (test/harness/progress-reporter.ts) and the tail of each berthd the file
# started (BERTH_TEST_DAEMON_LOG_DIR); after every file it kills what the file's test daemons
# left (berthd, conmon, containers) and unmounts what they left under /run/berth-test-*.
# Ends with the node runner's summary lines summed over the files, then "N passed, N failed";
# exits non-zero when any file failed. With BERTH_VM_FILES_STATE (a file in the job dir, which
# outlives the guest) it records after each file how far it got and what the files ended with, and
# a run that finds that record goes on from the file after the last one that ended: a guest that
# crashed (an emulated kernel's panic) is booted once more by scripts/vm/run.sh to finish the run.
set -uo pipefail

# A bound for a hang, scaled like the tests' own (BERTH_TEST_BOUND_SCALE is 4 emulated): the
# slowest file, pod-resources, takes about 330 s in the emulated VM on a 2-core machine.
bound_s=${BERTH_VM_FILE_BOUND_S:-$((240 * ${BERTH_TEST_BOUND_SCALE:-1}))}
# What a killed file's processes get after SIGTERM before SIGKILL.
kill_after_s=30
reporter=dist/test/harness/progress-reporter.js

say() { printf 'vm-files: %s\n' "$*"; }

# Its clean-up kills every test daemon on the machine: on a shared host, other people's too.
[[ $(hostname) == berth-vm ]] || {
  say "error: this runs in the VM only (scripts/vm/test.sh)" >&2
  exit 2
}

# Leftovers of test daemons: their dirs are /run/berth-test-<tag> (test/harness/daemon.ts).
cleanup_daemons() {
  local killed=0 unmounted=0 pid root
  # Containers first, while their runc state is there: conmon's death does not end them.
  for root in /run/berth-test-*/state/runc; do
    [[ -d $root ]] || continue
    for id in $(runc --root "$root" list -q 2>/dev/null); do
      timeout 30 runc --root "$root" delete --force "$id" >/dev/null 2>&1 || true
    done
  done
  # berthd and conmon name their daemon's dir on their command line (the bracket keeps grep's own
  # from matching).
  for pid in $(grep -ls '/run/berth-tes[t]-' /proc/[0-9]*/cmdline | cut -d/ -f3); do
    [[ $pid != "$$" ]] || continue
    kill -KILL "$pid" 2>/dev/null && killed=$((killed + 1))
  done
  # Deepest first; lazily, as a process may still hold one.
  while read -r mount; do
    umount -l "$mount" 2>/dev/null && unmounted=$((unmounted + 1))
  done < <(awk '$5 ~ "^/run/berth-test-" { print $5 }' /proc/self/mountinfo | sort -r)
  for dir in /run/berth-test-*; do
    [[ -d $dir ]] || continue
    ip link del "bt$(basename "$dir" | cut -c12-19)" 2>/dev/null || true
    rm -rf "$dir" 2>/dev/null || true
  done
  if ((killed + unmounted > 0)); then
    say "cleaned up after it: killed ${killed} test daemon processes, unmounted ${unmounted} mounts"
  fi
}

# The tests that had begun and not ended, outermost first, from the progress reporter's lines.
in_flight() {
  awk -F '\t' '
    $1 == "start" { open[$2] = $3; for (n = $2 + 1; n <= 64; n++) delete open[n] }
    $1 == "pass" || $1 == "fail" { delete open[$2] }
    END { line = ""; for (n = 0; n <= 64; n++) if (n in open) line = line (line == "" ? "" : " > ") open[n]; print line }
  ' "$1"
}

# The last value of the runner's summary line "<key> N" in the progress reporter's lines, 0 if none.
summary_count() {
  awk -F '\t' -v key="$2" '
    $1 == "note" && $2 == "0" && split($3, w, " ") == 2 && w[1] == key && w[2] ~ /^[0-9]+$/ { n = w[2] }
    END { print n + 0 }
  ' "$1"
}

work=$(mktemp -d /tmp/berth-vm-files.XXXXXX)
keys=(tests suites pass fail cancelled skipped todo)
declare -A total
for key in "${keys[@]}"; do total[$key]=0; done
failed_files=()
state=${BERTH_VM_FILES_STATE:-}
ended=0
if [[ -n $state && -f $state ]]; then
  while read -r key value; do
    case $key in
      ended) ended=$value ;;
      failed) failed_files+=("$value") ;;
      *) total[$key]=$value ;;
    esac
  done <"$state"
  say "a boot after a guest crash: files 1 to ${ended} ended before it and count as they ended; from file $((ended + 1)) on"
fi
# After each file: how far the run got, what the files so far ended with.
save_state() {
  [[ -n $state ]] || return 0
  {
    echo "ended $1"
    for key in "${keys[@]}"; do echo "$key ${total[$key]}"; done
    for f in "${failed_files[@]}"; do echo "failed $f"; done
  } >"$state.tmp" && mv "$state.tmp" "$state"
}
# A crash from here on may be resumed (scripts/vm/run.sh boots once more).
[[ -z $state ]] || : >"$(dirname "$state")/resumable"
i=0
for file in "$@"; do
  i=$((i + 1))
  ((i > ended)) || continue
  events="$work/$i.events" daemons="$work/$i.daemons"
  mkdir -p "$daemons"
  : >"$events"
  say "file $i of $#: $file (bound ${bound_s} s)"
  started=$(date +%s)
  # timeout runs the file in a process group of its own and signals all of it: node's runner, the
  # test process, the berthd and registries it started.
  BERTH_TEST_DAEMON_LOG_DIR=$daemons timeout --kill-after="$kill_after_s" "$bound_s" \
    node --test --test-concurrency=1 \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter="./$reporter" --test-reporter-destination="$events" \
    "$file"
  code=$?
  took=$(($(date +%s) - started))
  if ((code == 124 || code == 137)); then
    # No summary from a killed runner: what its tests reported so far, and one failure for the file.
    pass=$(grep -c $'^pass\t[0-9]*\ttest\t' "$events")
    fail=$(grep -c $'^fail\t[0-9]*\ttest\t' "$events")
    total[tests]=$((total[tests] + pass + fail + 1))
    total[pass]=$((total[pass] + pass))
    total[fail]=$((total[fail] + fail + 1))
    running=$(in_flight "$events")
    say "KILLED: $file did not end within its ${bound_s} s bound; it was running: ${running:-(no test: between tests or in a hook)}"
  else
    for key in "${keys[@]}"; do total[$key]=$((total[$key] + $(summary_count "$events" "$key"))); done
    # A runner that failed with no failed test (a file that did not load) still fails.
    if ((code != 0 && $(summary_count "$events" fail) == 0)); then
      total[tests]=$((total[tests] + 1))
      total[fail]=$((total[fail] + 1))
    fi
  fi
  if ((code != 0)); then
    failed_files+=("$file")
    say "$file exited ${code} after ${took} s"
    for log in "$daemons"/*.log; do
      [[ -f $log ]] || continue
      say "the last lines of $(basename "$log" .log), which this file started:"
      tail -n 30 "$log"
    done
  else
    say "$file passed in ${took} s"
  fi
  cleanup_daemons
  save_state "$i"
done

say "${#failed_files[@]} of $# files failed${failed_files[*]:+: ${failed_files[*]}}"
# The node runner's summary lines, summed over the files: what a reader of the last lines expects.
for key in "${keys[@]}"; do printf '# %s %s\n' "$key" "${total[$key]}"; done
printf '%s passed, %s failed\n' "${total[pass]}" "${total[fail]}"
rm -rf "$work"
((${#failed_files[@]} == 0))
