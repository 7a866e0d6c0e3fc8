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

bash scripts/setup.sh

say "npm run check (tsc, eslint, prettier)"
npm run check

[[ -d dist/test ]] || die "dist/test does not exist: the build produced no tests"
# dist/test/vm holds the VM runner's own tests, which scripts/vm/suites.sh runs once it has the image.
mapfile -t tests < <(find dist/test -name '*.test.js' -not -path 'dist/test/vm/*' | sort)
((${#tests[@]} > 0)) || die "no *.test.js files under dist/test"

[[ $(id -u) -eq 0 ]] || say "warning: not root; tests that need root will fail"
say "running ${#tests[@]} test files"
# Node 20 does not expand globs itself, hence the explicit file list. One file at a time: the e2e
# tests share host resources (socket, netns dir, CNI network).
host=0
node --test --test-reporter=spec --test-concurrency=1 "${tests[@]}" || host=$?

# Then what needs cgroup v2 and AppArmor, which this host may not have, in the Debian 13 VM.
vm=0
bash scripts/vm/suites.sh || vm=$?
say "host suite exited ${host}, VM suites exited ${vm}"
((host == 0 && vm == 0))
